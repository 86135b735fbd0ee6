package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/report"
	"github.com/asrprof/asrprof/runbook"
	"github.com/asrprof/asrprof/table"
)

const captureUsage = `Usage: asrprof capture --target URL --dataset PATH [flags]

Drives the server at --target with every sample of --dataset, once per level
and repeat, and writes a capture bundle to --out: manifest.json,
requests.jsonl (one line per request, warmup included and marked) and
results.json (SGLang-Omni's summary shape). Then prints the run's checks on
itself and a summary per level (throughput, latency, verdict, advice); with
--verbose the detail follows: the sweep table and the default analyses
(stages, diagnosis, advice, threads, GPU), which 'asrprof analyze DIR' prints.

With --protocol funasr-ws or openai-realtime each request is a realtime
WebSocket session: audio paced at real time (--pace), --sessions N at once,
with first-update latency, lag behind the speech and final-after-STOP per
session (docs/REALTIME.md).

With --server-cmd asrprof starts the server itself, a fresh one for each of
--runs (default warm,1,2,3), and prints a mean/min/max verdict over the
scored runs (docs/RUNBOOK.md).

Closed loop (--concurrency) keeps exactly N requests in flight. Open loop
(--rate) sends on a schedule and measures latency from the intended send
time, so server-side queueing shows instead of slowing the client down.

Before any request is sent, every dataset entry is checked (file present,
header valid, format supported); the run stops on bad entries unless
--skip-bad is given. A target that does not answer is an error (exit 2).
Ctrl-C lets requests in flight finish for --grace, finalizes the bundle with
complete=false and exits 130.

Examples:
  asrprof capture --target http://127.0.0.1:8000 --dataset refserver/data/refset/manifest.jsonl \
      --concurrency 1,4,8 --repeats 3 --warmup --out runs/refset

  # Realtime sessions against a Fun-ASR-style WebSocket server, 1, 4 and 8 at once:
  asrprof capture --target ws://127.0.0.1:10095 --dataset data/manifest.jsonl --protocol funasr-ws \
      --sessions 1,4,8 --pace realtime --out runs/realtime

  # The whole runbook: a fresh server per run, warm run discarded, 3 scored runs:
  asrprof capture --server-cmd "/usr/bin/python3 refserver/refserver.py --port 18000" \
      --target http://127.0.0.1:18000 --dataset refserver/data/refset/manifest.jsonl --concurrency 1,4 --out runs/rb

  # MOSS-Transcribe-Diarize scored as SGLang-Omni scores it (one level, one pass: its file names);
  # the reference server's diarization mode (refserver.py --diarize refserver/data/diarset/manifest.jsonl)
  # takes the same line with --model pocketsphinx-en-us-diarize:
  asrprof capture --target http://127.0.0.1:8000 --dataset data/movies800/manifest.jsonl \
      --task transcribe-diarize --concurrency 16 --repeats 1 --out runs/diar

  # Open loop at 2 and 4 requests/s with Poisson arrivals, streaming:
  asrprof capture --target http://127.0.0.1:8000 --dataset data/wavs --protocol openai-stream \
      --rate 2,4 --arrivals poisson --out runs/open

Flags:
`

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

// captureCommand runs the command called name ("capture", or "ab": the capture flags
// plus the A/B flags): it parses the capture and runbook flags and runs a capture or a runbook.
func captureCommand(name string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		cfg, rb, err := parseCapture(name, args, stdout, stderr)
		if err != nil {
			return err
		}
		start := func() { // no default is silent: the levels and why, before anything runs
			if rb.levels != "" && !cfg.Quiet {
				fmt.Fprintln(stderr, rb.levels)
			}
			for _, w := range rb.warnings {
				fmt.Fprintln(stderr, w)
			}
		}
		if rb.enabled() {
			if cfg.Proxy != "" {
				return fmt.Errorf("%w: --proxy records your own client's load; it does not combine with --server-cmd, --runs or ab", errUsage)
			}
			start()
			return datasetError(cfg, rb.run(ctx, cfg, stdout, stderr))
		}
		// Before the levels line: a command line in error prints only the error.
		if err := checkCapture(cfg); err != nil {
			return err
		}
		start()
		run := func() error {
			o, err := capture.New(cfg, stdout, stderr).OnFinish(finisher(rb.lengths)).Run(ctx)
			if err == nil && o != nil && o.Manifest.Extra["probe_empty"] != nil {
				// said above as an ERROR line; a script sees it too (exitFailed)
				return fmt.Errorf("a probe was on but recorded nothing in scored passes (the ERROR line above); the bundle in %s is written, marked incomplete", cfg.Out)
			}
			return err
		}
		if gc, _ := rb.gpuCoRunnerConfig(); gc != nil { // beside this one capture
			_, err = runbook.WithGPUCoRunner(ctx, gc, cfg.Out, run)
			return datasetError(cfg, err)
		}
		return datasetError(cfg, run())
	}
}

// checkCapture is what a capture's configuration must pass before it
// starts, on the command line and over serve's API alike: the flags
// together (capture.Config.Validate) and a dataset that is there.
func checkCapture(cfg capture.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Proxy == "" && !cfg.ProbesOnly {
		if _, err := os.Stat(cfg.Dataset); err != nil {
			return datasetError(cfg, fmt.Errorf("%w: %v", capture.ErrBadInput, err))
		}
	}
	return nil
}

// datasetError rewords capture's errors about the dataset ("bad dataset:
// loading dataset: ...") to name the flag and the file once: "--dataset
// PATH: ...". Other errors pass as they are.
func datasetError(cfg capture.Config, err error) error {
	if err == nil || !errors.Is(err, capture.ErrBadInput) || !strings.HasPrefix(err.Error(), capture.ErrBadInput.Error()+": ") {
		return err
	}
	msg := err.Error()
	for _, p := range []string{capture.ErrBadInput.Error() + ": ", "loading dataset: ", "loading dataset " + cfg.Dataset + ": ",
		"stat " + cfg.Dataset + ": ", "open " + cfg.Dataset + ": ", cfg.Dataset + ": ", cfg.Dataset + " "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return &reworded{msg: "--dataset " + cfg.Dataset + ": " + msg, err: err}
}

// reworded is err with another message.
type reworded struct {
	msg string
	err error
}

func (r *reworded) Error() string { return r.msg }
func (r *reworded) Unwrap() error { return r.err }

// finisher is what every capture does at its end (capture.Finish):
// the tables it prints are the default analyses of its bundle, sweep
// first (the sweep that show and analyze print), and the HTML report it
// writes into its bundle is report.html (asrprof report DIR writes the
// same), with the results by audio length in lb (capture
// --length-buckets; zero: auto).
func finisher(lb analysis.LengthBuckets) capture.Finish {
	return func(ctx context.Context, dir string, tables bool) capture.Finished {
		var f capture.Finished
		if tables {
			f.Tables, f.Detail, f.DetailHint, f.TablesErr = captureTables(ctx, dir, analysis.Options{LengthBuckets: lb})
			var err error
			if f.Validity, f.Failed, err = validity(dir); err != nil {
				f.TablesErr = errors.Join(f.TablesErr, err)
			}
		}
		f.Report, f.ReportErr = report.WriteFile(ctx, dir, "", report.Options{LengthBuckets: lb})
		return f
	}
}

// answerScripts are the analyses a capture prints by default, in this
// order: the run's checks on itself (docs/VALIDITY.md), the driver's
// self-check where the load generator lagged (it may have set the pace),
// then the answer (the summary analysis: per level throughput, latency,
// verdict and advice). The rest of the default analyses are the detail.
var answerScripts = []string{"validity", "driver", "summary"}

// captureTables are the tables a capture prints at its end: the answer
// (answerScripts) and the detail: a heading that says where it comes from
// again, then the other default analyses, the sweep first (capture
// --verbose prints them), and the line printed in their place without
// --verbose: the analyses the detail holds and how to print them.
func captureTables(ctx context.Context, dir string, o analysis.Options) (answer, detail []*table.Table, hint *table.Table, err error) {
	c, err := analysis.Load(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	o.Timeout = cmp.Or(o.Timeout, analysis.DefaultTimeout)
	defaults := analysis.DefaultScriptsFor(c, o)
	head := slices.DeleteFunc(slices.Clone(answerScripts), func(n string) bool {
		return n != "summary" && !slices.Contains(defaults, n)
	})
	rest := slices.DeleteFunc(defaults, func(n string) bool { return slices.Contains(head, n) })
	tabs, err := analysis.RunScripts(ctx, analysis.NewSession(c, o), append(head, rest...))
	i := slices.IndexFunc(tabs, func(t *table.Table) bool { return t.Name == "summary" })
	if i < 0 || i == len(tabs)-1 { // the summary failed (err says why), or nothing follows it
		return tabs, nil, nil, err
	}
	heading := &table.Table{Name: "details", Title: "The detail ('asrprof analyze " + dir + "' prints it again):"}
	hint = &table.Table{Name: "details", Title: fmt.Sprintf("The detail (%s): capture --verbose prints it, and so does 'asrprof analyze %s [NAME]'.",
		strings.Join(rest, ", "), dir)}
	return tabs[:i+1], append([]*table.Table{heading}, tabs[i+1:]...), hint, err
}

// parseCapture turns the command line of `capture` (or `ab`) into the
// capture's configuration and the runbook flags. The configuration starts
// from capture.DefaultConfig, so every flag's default is the library's,
// and ends with capture's SetDefaults (levels, --out).
func parseCapture(name string, args []string, stdout, stderr io.Writer) (capture.Config, *runbookFlags, error) {
	cfg := capture.DefaultConfig()
	fs := newFlagSet(name, "", stderr) // its help: captureFlags
	opts, rb, lengths := captureFlags(fs, &cfg)
	err := parse(fs, args, stdout)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Proxy != "" {
		cfg.Command = fs.Args() // the user's benchmark command, after --
	} else if fs.NArg() > 0 {
		return cfg, nil, fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, fs.Arg(0))
	}
	cfg.AgentToken = cmp.Or(cfg.AgentToken, os.Getenv("ASRPROF_AGENT_TOKEN")) // not a flag default: --help would show it
	if err := opts.Finish(); err != nil {                                     // --probes, --pid, --slo, --find-max
		return cfg, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if _, err := rb.gpuCoRunnerConfig(); err != nil {
		return cfg, nil, err
	}
	if rb.lengths, err = parseLengthBuckets(*lengths); err != nil {
		return cfg, nil, err
	}
	cfg.SetDefaults(time.Now())
	rb.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { rb.set[f.Name] = true })
	rb.levels = levelsLine(&cfg, rb.set)
	rb.warnings = inFlightWarnings(&cfg)
	if cfg.TargetGiven != "" {
		rb.warnings = append(rb.warnings, fmt.Sprintf("note: --target %s ends in the API's path, which asrprof adds itself: the target is %s (requests go to %s)",
			cfg.TargetGiven, cfg.Target, cfg.EndpointURL()))
	}
	return cfg, rb, nil
}

// captureFlags defines the flags of capture (and of ab and sensitivity)
// on fs, writing into cfg: capture's options (capture.Options) and the
// command's own: the runbook's and --length-buckets. Its help shows ab's
// and sensitivity's own groups first and capture's Advanced group, the
// table's last, after the runbook's.
func captureFlags(fs *flag.FlagSet, cfg *capture.Config) (*capture.Flags, *runbookFlags, *string) {
	rb, rbOpts := addRunbookFlags(fs)
	opts := capture.NewFlags(cfg)
	as := analysis.DefaultSettings()
	lead := func(o option.Option) bool { return o.Group == runbook.GroupAB || o.Group == runbook.GroupSensitivity }
	groups := option.Groups(capture.Options())
	advanced := groups[len(groups)-1]
	shown := slices.DeleteFunc(slices.Clone(rbOpts), func(o option.Option) bool { return !lead(o) })
	var last []option.Option
	for _, o := range capture.Options() {
		if o.Name == "save-raw-dir" { // the end-of-capture tables' and report's (finisher), before it
			lb := option.Named(analysis.OptionTable(), "length-buckets").In(o.Group)
			lb.Define(fs, &as, nil)
			shown = append(shown, lb)
		}
		o.Define(fs, cfg, opts)
		if o.Group == advanced {
			last = append(last, o)
		} else {
			shown = append(shown, o)
		}
	}
	shown = append(shown, slices.DeleteFunc(rbOpts, lead)...)
	head, tail := rb.help()
	fs.Usage = helpFunc(fs, head, tail, append(shown, last...)) // capture's: its flags, then proxy mode and runbooks
	return opts, rb, &as.LengthBuckets
}

// levelsLine is the line a capture starts with: the levels it will run
// and where they come from (the flags in set, or the default), so that a
// default is never silent. Proxy and probes-only captures run no levels
// of their own, and a replay (--arrivals replay:FILE) only the one its
// flag names: "".
func levelsLine(cfg *capture.Config, set map[string]bool) string {
	if cfg.Proxy != "" || cfg.ProbesOnly || cfg.ReplayFile() != "" {
		return ""
	}
	var levels, from []string
	if len(cfg.Concurrency) > 0 || cfg.SoloAdded() {
		cs := cfg.Concurrency
		if cfg.SoloAdded() {
			cs = append([]int{1}, cs...)
			from = append(from, "c=1 added by --solo")
		}
		levels = append(levels, "c="+option.IntList(cs).String())
		switch {
		case set["sessions"]:
			from = append(from, "--sessions")
		case set["concurrency"]:
			from = append(from, "--concurrency")
		}
	}

	if len(cfg.Rates) > 0 {
		levels = append(levels, "rate="+option.FloatList(cfg.Rates).String()+"/s")
		from = append(from, "--rate")
	}
	what := strings.Join(levels, " then ")
	if cfg.Search != nil {
		what = "--find-max from " + what
	}
	why := strings.Join(from, ", ")
	if why == "" {
		why = "the default; set --concurrency"
		if cfg.Search != nil {
			why = "the default start; set --concurrency"
		}
	}
	return "levels: " + what + " (" + why + ")"
}

// inFlightWarnings warns of closed-loop levels that cannot keep their
// concurrency in flight because a pass has fewer requests than that: at
// most --max-samples samples, or --pass-requests requests. (A dataset
// smaller than a level is known only once the capture has loaded it.)
func inFlightWarnings(cfg *capture.Config) []string {
	if cfg.Proxy != "" || cfg.ProbesOnly || cfg.Search != nil {
		return nil
	}
	n, what := 0, ""
	switch {
	case cfg.PassRequests > 0:
		n, what = cfg.PassRequests, "requests per pass (--pass-requests)"
	case cfg.PassDuration > 0: // the dataset is cycled for the pass's duration
		return nil
	case cfg.MaxSamples > 0:
		n, what = cfg.MaxSamples, "samples per pass (--max-samples)"
	default:
		return nil
	}
	var out []string
	for _, c := range cfg.Concurrency {
		if c > n {
			out = append(out, fmt.Sprintf("warning: c=%d with %d %s: at most %d requests in flight", c, n, what, n))
		}
	}
	return out
}

// errNoSuccess: a scored level of the capture had no successful request
// (exit status exitNoSuccess).
var errNoSuccess = errors.New("no successful request")

// validity is the capture's validity checks in dir (docs/VALIDITY.md), for
// its manifest and results.json, and errNoSuccess when a scored level
// measured nothing; err when the checks could not run (the bundle then has
// none, and the capture says why beside the analyses' errors).
func validity(dir string) (v any, failed, err error) {
	res, err := analysis.Validity(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("validity checks: %w", err)
	}
	if len(res.FailedLevels) > 0 {
		labels := make([]string, len(res.FailedLevels))
		for i, l := range res.FailedLevels {
			labels[i] = model.LevelLabel(l)
		}
		return res, fmt.Errorf("%w at %s: every request failed (the validity table counts them by cause)", errNoSuccess, strings.Join(labels, ", ")), nil
	}
	return res, nil, nil
}
