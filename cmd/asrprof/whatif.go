package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/runbook"
	"github.com/asrprof/asrprof/table"
)

const whatIfUsage = `Usage: asrprof what-if BUNDLE --server-cmd COMMAND [--level c8] [--knob NAME=FLAG ...] [--rounds N] [flags]

Tests the diagnosis's advice by acting on it. The bottleneck analysis of
BUNDLE (asrprof analyze BUNDLE bottleneck) gives a table named advice, a row
per level and verdict: the knob to turn (max_running, build_workers,
prefill_batch, host_work, cuda_graphs), from what to what, and the metric it
predicts with an interval. what-if takes the row of --level (default: the
highest level whose verdict has a knob), turns the knob into the server's
flag, and reruns BUNDLE's capture (its dataset, that level, its repeats, from
its manifest) with a fresh server a run, as asrprof ab does: side A the
command as it is (--server-cmd, the server that BUNDLE measured), side B
the command changed, in --order (default ABBAAB, as ab's: each side three
times, interleaved, so that the ratio B/A is measured within one
experiment, drift bracketed and the A/A spread measured; ABA is the
least that measures it). Then it prints, a row a round: the verdict, the
change, the metric, predicted [lo–hi], before (A) and after (B) as measured
now, the predicted ratio (predicted / the bundle's value) with the interval
it is judged against (the advice's, widened to the A/A spread where that is
wider), the measured ratio B/A, whether it lies in the interval, and the
error of the predicted ratio in percent.

Knobs and flags. The reference server's flags are built in:
  max_running    --max-running-requests  (set to the advice's to)
  build_workers  --build-workers         (set to to)
  prefill_batch  --prefill-batch         (set to to)
  host_work      --host-step-ms          (scaled: its value × to / from)
  cuda_graphs    --cuda-graphs           (a switch: there when to ≠ 0)
They are used where the command runs refserver/refserver.py or already
has the flag; for another server name its flag: --knob
max_running=--max-num-seqs. A flag the command has gets its value
replaced (--flag V or --flag=V), else it is appended.

--rounds N repeats: each round starts from the last round's changed
command and the advice of its last B run's bundle (the same analysis), and
the rounds stop early where that verdict suggests no knob, or after a round
whose change made its metric worse (the next would start from the loss).

--dry-run prints the runs of round 1 and their commands, and runs nothing.
--advice SCRIPT reads the advice from another analysis (a built-in name or a
.star file, as asrprof analyze takes it) that emits a table named advice.

Output: the what-if table on stdout in --format; a few lines a round on
stderr (the runs' full progress in whatif.log); whatif.json (the rounds,
the advice, the edits, every run's value) and a runbook per round
(round-1/: runbook.json, A-1/, B-1/ ...) in --out.

Example (the reference server with one decoder, the advice read from a
bundle it recorded):
  asrprof what-if runs/ref-c4 \
      --server-cmd "/usr/bin/python3 refserver/refserver.py --port 18000 --max-running-requests 1" \
      --level c4 --out runs/ref-c4-whatif

Flags:
`

func runWhatIf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("what-if", "", stderr) // its help: below, in groups
	rb, shown := addRunbookFlags(fs)
	// Its output is a capture's (--out, --overwrite, --format: capture's
	// options, their help saying what what-if writes) and its advice an
	// analysis's (--stages).
	out := capture.DefaultConfig()
	outOpts := option.Pick(capture.Options(), "out", "overwrite", "format", "header")
	outOpts[0].Usage = "`DIR` for whatif.json, whatif.log and the rounds' runbooks (default runs/<date>-<time>-whatif)"
	outOpts[1].Usage = "replace a what-if already in --out"
	outOpts[3].Usage = "send `\"NAME: VALUE\"` with every request of the reruns, once per header (or @FILE's lines; a bundle keeps\nno headers: repeat the capture's --header, e.g. an API key)"
	outOpts[3].Value = func(any) any { return (*option.Repeated)(&out.Headers) } // capture's binds its Flags
	option.DefineAll(fs, outOpts, &out, nil)
	as := analysis.DefaultSettings()
	stages := option.Pick(analysis.OptionTable(), "stages")
	option.DefineAll(fs, stages, &as, nil)
	fs.Usage = helpFunc(fs, whatIfUsage, "", append(append(shown, outOpts...), stages...))
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	if err := checkSettings(&analysis.Settings{Format: out.Format, Stages: as.Stages}); err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: give one bundle directory, the capture whose advice to test", errUsage)
	}
	if err := checkBundle(pos[0]); err != nil {
		return err
	}
	if rb.Rounds < 1 {
		return fmt.Errorf("%w: --rounds %d: want 1 or more", errUsage, rb.Rounds)
	}
	km := map[string]string{}
	for _, k := range rb.Knobs {
		name, fl, err := runbook.ParseKnobFlag(k)
		if err != nil {
			return err
		}
		km[name] = fl
	}
	srv, err := serverCommand("server-cmd", rb.ServerCmd, rb.ServerCmdFile)
	if err != nil {
		return err
	}
	if len(srv.Argv) == 0 {
		return fmt.Errorf("%w: what-if needs --server-cmd (or --server-cmd-file): the command of the server that %s measured", errUsage, pos[0])
	}
	out.Out = cmp.Or(out.Out, "runs/"+time.Now().Format("20060102-150405")+"-whatif")
	_, err = runbook.WhatIf(ctx, runbook.WhatIfConfig{
		Runbook: rb.config(out), Bundle: pos[0], Server: srv, Level: rb.Level, Knobs: km, Rounds: rb.Rounds,
		Order: rb.Order, Warm: rb.Warm, DryRun: rb.DryRun, Advice: adviceOf(rb.Advice, as.Stages),
	}, stdout, stderr)
	return err
}

// adviceOf reads the advice table of a bundle: the table named advice of
// the analysis script (a built-in name or a .star file), run as
// `asrprof analyze DIR SCRIPT` runs it.
func adviceOf(script, stages string) func(ctx context.Context, dir string) (*table.Table, error) {
	return func(ctx context.Context, dir string) (*table.Table, error) {
		c, err := analysis.Load(dir)
		if err != nil {
			return nil, err
		}
		tabs, err := analysis.RunScripts(ctx, analysis.NewSession(c, analysis.Options{Stages: stages, Timeout: analysis.DefaultTimeout}), []string{script})
		if err != nil {
			return nil, fmt.Errorf("--advice %s: %w", script, err)
		}
		var names []string
		for _, t := range tabs {
			if t.Name == "advice" {
				return t, nil
			}
			names = append(names, t.Name)
		}
		return nil, fmt.Errorf("%w: the analysis %s emitted no table named advice (its tables: %s); the diagnosis's advice is asrprof analyze DIR bottleneck's, or name a script that emits one with --advice",
			runbook.ErrNoAdvice, script, strings.Join(names, ", "))
	}
}
