package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/option"
)

const analyzeUsage = `Usage: asrprof analyze DIR [SCRIPT|NAME ...] [flags]

Runs Starlark analyses over a capture bundle and prints their tables. NAME
is a built-in analysis (see --list); SCRIPT is the path of your own .star
file, which may load() files next to it and the built-ins. Without names it
runs sweep, stages, bottleneck, buckets, and metrics_stages, gpu and cpu
when the capture has that data. docs/ANALYSIS.md explains the capture API.

metrics_stages reads the server's own Prometheus /metrics that the capture
recorded (server_metrics.jsonl): its queue, prefill, decode... times per
level, under vLLM's and SGLang's names; --metrics-map FILE names another
server's metrics (docs/ANALYSIS.md, "The server's own /metrics").

buckets splits the requests by the length of their audio (--length-buckets)
and gives each bucket its own sweep, stage means, knee and recommended
level: long audio often saturates a server at a lower level than short
clips, which one sweep over a mixed dataset averages away.

Examples:
  asrprof analyze runs/today
  asrprof analyze runs/today stages knee --format markdown
  asrprof analyze runs/today buckets --length-buckets 5,15,30
  asrprof analyze runs/today my_analysis.star --stages vllm
  asrprof analyze --list

Flags:
`

const compareUsage = `Usage: asrprof compare CURRENT BASELINE [flags]

Compares two capture bundles level by level: each metric's mean over
repeats on both sides, their ratio, and a Mann-Whitney U test over the
repeats; "~" marks a difference that is not significant at --alpha (with
3 repeats per side no difference can be: run 5 or more).

Example:
  asrprof compare runs/after runs/before --format markdown

Flags:
`

// analysisFlags defines the analyses' options called names
// (analysis.OptionTable) on fs, with their defaults.
func analysisFlags(fs *flag.FlagSet, names ...string) *analysis.Settings {
	as := analysis.DefaultSettings()
	option.DefineAll(fs, option.Pick(analysis.OptionTable(), names...), &as, nil)
	return &as
}

// checkSettings checks the settings' --stages and --format.
func checkSettings(as *analysis.Settings) error {
	return cmp.Or(checkStages(as.Stages), checkFormat(as.Format))
}

func checkStages(preset string) error {
	if !slices.Contains(analysis.Presets, preset) {
		return fmt.Errorf("%w: --stages %q: want %s", errUsage, preset, strings.Join(analysis.Presets, ", "))
	}
	return nil
}

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", analyzeUsage, stderr)
	af := analysisFlags(fs, "format", "stages", "timeout", "list", "length-buckets", "metrics-map")
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	if af.List {
		for _, n := range analysis.Scripts() {
			fmt.Fprintf(stdout, "  %-28s %s\n", n, analysis.Summary(n))
		}
		for _, a := range slices.Sorted(maps.Keys(analysis.Aliases)) {
			fmt.Fprintf(stdout, "  %-28s the same as %s\n", a, analysis.Aliases[a])
		}
		return nil
	}
	names := analysis.Dedup(pos[min(1, len(pos)):])
	if err := cmp.Or(analysis.Check(names), checkSettings(af)); err != nil { // before anything runs
		return err
	}
	lb, err := parseLengthBuckets(af.LengthBuckets)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: give the bundle directory", errUsage)
	}
	if err := checkBundle(pos[0]); err != nil {
		return err
	}
	c, err := analysis.Load(pos[0])
	if err != nil {
		return err
	}
	opts := analysis.Options{Stages: af.Stages, Timeout: af.Timeout, Print: stderr, LengthBuckets: lb, MetricsMap: af.MetricsMap}
	if len(names) == 0 {
		names = analysis.DefaultScriptsFor(c, opts)
	}
	s := analysis.NewSession(c, opts)
	tables, err := analysis.RunScripts(ctx, s, names)
	return printTables(stdout, stderr, af.Format, tables, err, c)
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", compareUsage, stderr)
	af := analysisFlags(fs, "format", "stages", "timeout", "alpha")
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	if err := checkSettings(af); err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: give two bundle directories, CURRENT and BASELINE", errUsage)
	}
	if err := checkBundle(pos...); err != nil {
		return err
	}
	cur, err := analysis.Load(pos[0])
	if err != nil {
		return err
	}
	base, err := analysis.Load(pos[1])
	if err != nil {
		return err
	}
	s := analysis.NewSession(cur, analysis.Options{
		Stages: af.Stages, Timeout: af.Timeout, Baseline: base, Print: stderr,
		Params: map[string]any{"alpha": af.Alpha},
	})
	tables, err := s.Run(ctx, "compare")
	return printTables(stdout, stderr, af.Format, tables, err, cur, base)
}

// parseLengthBuckets parses --length-buckets.
func parseLengthBuckets(s string) (analysis.LengthBuckets, error) {
	lb, err := analysis.ParseLengthBuckets(s)
	if err != nil {
		return lb, fmt.Errorf("%w: --length-buckets %q: %v", errUsage, s, err)
	}
	return lb, nil
}
