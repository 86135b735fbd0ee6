package main

import (
	"fmt"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model/summary"
)

// addCapacityFlags registers --slo and the --find-max search flags in
// their help group (docs/CAPACITY.md). The returned function, called after
// parsing, writes them into cfg.
func addCapacityFlags(g *flagGroups, cfg *capture.Config) func() error {
	fs := g.fs
	slo := cfg.SLO.String()
	def := capture.DefaultSearch()
	findMax := false
	attainment := def.Attainment
	tolerance := ""
	limit := 0.0
	g.add("SLO and capacity search (docs/CAPACITY.md)",
		func() {
			fs.StringVar(&slo, "slo", slo, "per-request limits for goodput, comma-separated metric=limit `LIST`, e.g.\nlatency=1s,rtf=0.3 or ttft=200ms (openai-stream) or first_update=1s,final_after_stop=2s (realtime).\nA request meets the SLO when it succeeded and every limit holds; goodput (req/s meeting it)\nand attainment (their share; requests the client's stop canceled are left out) go to the\nsweep, results.json and compare. Metrics:\n"+summary.SLOMetricsHelp())
		},
		func() {
			fs.BoolVar(&findMax, "find-max", false, "search for the highest --concurrency (closed loop; the one given is the start, default 1)\nor --rate (open loop) whose attainment stays ≥ --attainment in every repeat: double until a\nlevel fails, then bisect until within --tolerance; prints the path and the answer (search.json)")
		},
		func() {
			fs.Float64Var(&attainment, "attainment", attainment, "--find-max: the share of requests (`SHARE`, 0..1) that must meet --slo at a passing level")
		},
		func() {
			fs.StringVar(&tolerance, "tolerance", tolerance, "--find-max: stop when the passing and failing levels are this close (`TOL`): requests in flight\nor req/s, or a percentage of the passing level such as 10% (default 1 closed loop, 10% open loop)")
		},
		func() {
			fs.Float64Var(&limit, "find-max-limit", limit, "--find-max: the highest level to try (`N`; default 1024 in flight, 1000 req/s)")
		},
	)
	return func() error {
		s, err := summary.ParseSLO(slo)
		if err != nil {
			return fmt.Errorf("%w: --%v", errUsage, err)
		}
		cfg.SLO = s
		if !findMax {
			return nil
		}
		sc := capture.Search{Attainment: attainment, Max: limit, Tolerance: def.Tolerance}
		switch {
		case tolerance != "":
			if sc.Tolerance, sc.Relative, err = capture.ParseTolerance(tolerance); err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
		case len(cfg.Rates) > 0:
			sc.Tolerance, sc.Relative = 0.1, true
		}
		cfg.Search = &sc
		return nil
	}
}
