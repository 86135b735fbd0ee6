package main

import (
	"flag"
	"strings"

	"github.com/asrprof/asrprof/capture"
)

// addRealtimeFlags registers the flags of the realtime protocols
// (funasr-ws, openai-realtime) on fs, writing into cfg; cfg's values are
// the defaults. It must be called
// after --concurrency is defined: --sessions is the same flag under the
// name realtime users know.
func addRealtimeFlags(fs *flag.FlagSet, cfg *capture.Config) {
	if c := fs.Lookup("concurrency"); c != nil {
		fs.Var(c.Value, "sessions", "realtime protocols: concurrent WebSocket sessions per level, comma-separated `LIST`\n(an alias of --concurrency), e.g. 1,4,8")
	}
	fs.IntVar(&cfg.ChunkMs, "chunk-ms", cfg.ChunkMs, "realtime protocols: audio per frame, in `MS`")
	fs.StringVar(&cfg.Pace, "pace", cfg.Pace, "realtime protocols: `realtime` sends each frame when its audio would have been spoken\n(scheduled from the session's start, so drift does not accumulate); none sends as fast as possible")
	fs.IntVar(&cfg.Loops, "loops", cfg.Loops, "realtime protocols: play each sample's audio `K` times within its session")
	fs.StringVar(&cfg.Dialect, "realtime-dialect", cfg.Dialect, "--protocol openai-realtime: `openai` (GA, 24 kHz), vllm or sglang-omni (16 kHz)")
	fs.Func("hotwords", "--protocol funasr-ws: hotwords sent as HOTWORDS:`w1,w2`", func(v string) error {
		cfg.Hotwords = nil
		for _, w := range strings.Split(v, ",") {
			if w = strings.TrimSpace(w); w != "" {
				cfg.Hotwords = append(cfg.Hotwords, w)
			}
		}
		return nil
	})
}
