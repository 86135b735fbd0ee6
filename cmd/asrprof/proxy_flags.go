package main

import (
	"github.com/asrprof/asrprof/capture"
)

// proxyUsage is the part of `capture --help` that teaches proxy mode.
const proxyUsage = `
With --proxy HOST:PORT asrprof drives nothing itself: it runs a reverse proxy
in front of --target and records every transcription request that your own
benchmark client sends through it (timing on the proxy's clock, traceparent
and X-Request-Id added when the client sent none, the answer's text, the
upload's audio duration; with --dataset, the upload is matched to its
reference by its audio bytes and scored). Give the command after "--": asrprof
starts it (with ASRPROF_PROXY_URL set) and the capture lasts as long as it
runs; its exit status is reported. Without a command the capture lasts until
Ctrl-C or --duration. The levels of the client's sweep are inferred from the
concurrency and pauses the proxy sees, or named with --levels (docs/PROXY.md).
With --protocol funasr-ws or openai-realtime (--realtime-dialect) the client's
WebSocket sessions are recorded too, frame by frame; --pace then says how the
client paces its audio.

  # SGLang-Omni's own client, through the proxy on port 8001:
  asrprof capture --proxy 127.0.0.1:8001 --target http://127.0.0.1:8000 \
      --dataset seedtts/manifest.jsonl --out runs/omni -- \
      python -m benchmarks.eval.benchmark_asr_seedtts --port 8001 --concurrencies 1,8,32
`

// addProxyFlags registers the flags of proxy mode in their help group,
// writing into cfg.
func addProxyFlags(g *flagGroups, cfg *capture.Config) {
	fs := g.fs
	g.add("Proxy mode (docs/PROXY.md)",
		func() {
			fs.StringVar(&cfg.Proxy, "proxy", cfg.Proxy, "listen at `HOST:PORT` (loopback when HOST is empty) and record the requests your own\nclient sends to --target through it; the command after -- is that client")
		},
		func() {
			fs.Func("levels", "the client's levels in order, comma-separated `LIST` (c1,c8,c8: a name given twice in a\nrow is a repeat; default: inferred)", func(v string) error {
				l, err := splitList(v)
				cfg.ProxyLevels = l
				return err
			})
		},
		func() {
			// 0 is proxy.DefaultGap: the help says so once.
			fs.DurationVar(&cfg.LevelGap, "level-gap", cfg.LevelGap, "an idle time (nothing in flight) this long ends a phase (`DURATION`; default 200ms)")
		},
	)
}
