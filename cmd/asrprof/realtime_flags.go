package main

import (
	"github.com/asrprof/asrprof/capture"
)

// addRealtimeFlags registers the flags of the realtime protocols
// (funasr-ws, openai-realtime) in their help group, writing into cfg;
// cfg's values are the defaults. It must be called after --concurrency is
// defined: --sessions is the same flag under the name realtime users know.
func addRealtimeFlags(g *flagGroups, cfg *capture.Config) {
	fs := g.fs
	g.add("Realtime protocols (--protocol funasr-ws or openai-realtime; docs/REALTIME.md)",
		func() {
			if c := fs.Lookup("concurrency"); c != nil {
				fs.Var(c.Value, "sessions", "concurrent WebSocket sessions per level, comma-separated `LIST` (an alias of --concurrency),\ne.g. 1,4,8")
			}
		},
		func() {
			fs.StringVar(&cfg.Pace, "pace", cfg.Pace, "`realtime` sends each frame when its audio would have been spoken (scheduled from the\nsession's start, so drift does not accumulate); none sends as fast as possible")
		},
		func() { fs.IntVar(&cfg.ChunkMs, "chunk-ms", cfg.ChunkMs, "audio per frame, in `MS`") },
		func() {
			fs.IntVar(&cfg.Loops, "loops", cfg.Loops, "play each sample's audio `K` times within its session")
		},
		func() {
			fs.StringVar(&cfg.Dialect, "realtime-dialect", cfg.Dialect, "--protocol openai-realtime: `openai` (GA, 24 kHz), vllm or sglang-omni (16 kHz)")
		},
		func() {
			fs.Func("hotwords", "--protocol funasr-ws: hotwords sent as HOTWORDS:`w1,w2`", func(v string) error {
				w, err := splitList(v)
				cfg.Hotwords = w
				return err
			})
		},
	)
}
