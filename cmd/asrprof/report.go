package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/report"
)

const reportUsage = `Usage: asrprof report DIR [--out FILE.html]
       asrprof report CURRENT BASELINE [--out FILE.html]

Writes a capture bundle as one self-contained HTML file that opens from
disk with no network: the sweep (req/s, RTFx, latency mean/p95/p99 against
the level, min–max whiskers, the knee), the stages per level, the results
by audio length (--length-buckets), the latency CDF, a timeline of the
capture (requests in flight, GPU utilization, SM activity and power, the
busiest thread's CPU, CUDA launches/s; passes shaded; click a request for
its waterfall), the diagnosis per level, the hottest functions and a flame
graph, realtime panels, and provenance. The numbers are the built-in
analyses' (asrprof analyze). Without --out it writes DIR/report.html
(asrprof capture writes it too).

With two bundles it draws the comparison: both sweeps on one plot, the
ratio per level with its significance (~: not significant, as asrprof
compare), the stages side by side; default file CURRENT/compare.html.
docs/REPORT.md describes every plot.

Examples:
  asrprof report runs/demo
  asrprof report runs/after runs/before --out after-vs-before.html

Flags:
`

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", reportUsage, stderr)
	ro := report.DefaultSettings()
	option.DefineAll(fs, report.OptionTable(), &ro, nil)
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	if err := checkStages(ro.Stages); err != nil {
		return err
	}
	if len(pos) == 1 || len(pos) == 2 {
		if err := checkBundle(pos...); err != nil {
			return err
		}
	}
	lb, err := parseLengthBuckets(ro.LengthBuckets)
	if err != nil {
		return err
	}
	o := report.Options{Stages: ro.Stages, Timeout: ro.Timeout, LengthBuckets: lb}
	var path string
	switch len(pos) {
	case 1:
		path, err = report.WriteFile(ctx, pos[0], ro.Out, o)
	case 2:
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "length-buckets" })
		if set {
			return fmt.Errorf("%w: --length-buckets: the comparison of two bundles has no results by audio length; give one bundle", errUsage)
		}
		path, err = report.CompareFile(ctx, pos[0], pos[1], ro.Out, o)
	default:
		return fmt.Errorf("%w: give one bundle directory, or two to compare (CURRENT BASELINE)", errUsage)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	return nil
}
