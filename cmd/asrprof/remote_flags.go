package main

import (
	"strings"

	"github.com/asrprof/asrprof/capture"
)

// urlList is a repeatable flag of URLs.
type urlList []string

func (l *urlList) String() string     { return strings.Join(*l, ",") }
func (l *urlList) Set(v string) error { *l = append(*l, v); return nil }

// addRemoteFlags adds the flags of probes-only captures and remote probes
// (asrprof serve, docs/SCALE.md) to the capture flags.
func addRemoteFlags(g *flagGroups, cfg *capture.Config) {
	fs := g.fs
	g.add("Probes-only captures and remote probes (docs/SCALE.md)",
		func() {
			fs.BoolVar(&cfg.ProbesOnly, "probes-only", cfg.ProbesOnly, "run the probes without sending requests (no --dataset): periods of --period until --duration\nor Ctrl-C; the server's load comes from elsewhere")
		},
		func() {
			fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "with --probes-only or --proxy: how long the capture lasts (`DURATION`; 0: until Ctrl-C,\nor with --proxy and a command, until the command exits)")
		},
		func() {
			fs.DurationVar(&cfg.Period, "period", cfg.Period, "with --probes-only: the length of one probe period, one row per thread in sched.jsonl (`DURATION`)")
		},
		func() {
			fs.Var((*urlList)(&cfg.Agents), "agent", "run the probes in the asrprof serve at `URL` (e.g. http://10.0.0.2:7070) on the server's host\ninstead of here; repeatable, one per host. The first agent's probe files land at the bundle's\nroot, the others' under agents/<host_port>/; each agent's clock offset is in manifest.json")
		},
		func() {
			fs.StringVar(&cfg.AgentToken, "agent-token", cfg.AgentToken, "bearer `TOKEN` of the agents' asrprof serve --token (default $ASRPROF_AGENT_TOKEN)")
		},
	)
}
