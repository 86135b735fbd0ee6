package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/report"
	"github.com/asrprof/asrprof/runbook"
)

const captureUsage = `Usage: asrprof capture --target URL --dataset PATH [flags]

Drives the server at --target with every sample of --dataset, once per level
and repeat, and writes a capture bundle to --out: manifest.json,
requests.jsonl (one line per request, warmup included and marked) and
results.json (SGLang-Omni's summary shape). Then prints the sweep table and
the default analyses (stages, dominant costs, threads, GPU).

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

func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return captureCommand(ctx, "capture", args, stdout, stderr)
}

// captureCommand parses the capture flags plus the runbook flags of the
// command called name ("capture" or "ab") and runs a capture or a runbook.
func captureCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
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
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Proxy == "" && !cfg.ProbesOnly {
		if _, err := os.Stat(cfg.Dataset); err != nil {
			return datasetError(cfg, fmt.Errorf("%w: %v", capture.ErrBadInput, err))
		}
	}
	start()
	if gc, _ := rb.gpuCoRunnerConfig(); gc != nil { // beside this one capture
		_, err = runbook.WithGPUCoRunner(ctx, gc, cfg.Out, func() error {
			_, err := capture.New(cfg, stdout, stderr).OnFinish(finisher(rb.lengths)).Run(ctx)
			return err
		})
		return datasetError(cfg, err)
	}
	_, err = capture.New(cfg, stdout, stderr).OnFinish(finisher(rb.lengths)).Run(ctx)
	return datasetError(cfg, err)
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

// finishCapture is what every capture does at its end (capture.Finish):
// the tables it prints are the default analyses of its bundle, sweep
// first (the sweep that show and analyze print), and the HTML report it
// writes into its bundle is report.html (asrprof report DIR writes the
// same). The length buckets are auto (finisher gives others).
func finishCapture(ctx context.Context, dir string, tables bool) capture.Finished {
	return finisher(analysis.LengthBuckets{})(ctx, dir, tables)
}

// finisher is finishCapture with the results by audio length in lb
// (capture --length-buckets).
func finisher(lb analysis.LengthBuckets) capture.Finish {
	return func(ctx context.Context, dir string, tables bool) capture.Finished {
		var f capture.Finished
		if tables {
			f.Tables, f.TablesErr = analysis.DefaultTables(ctx, dir, analysis.Options{LengthBuckets: lb})
		}
		f.Report, f.ReportErr = report.WriteFile(ctx, dir, "", report.Options{LengthBuckets: lb})
		return f
	}
}

// parseCapture turns the command line of `capture` (or `ab`) into the
// capture's configuration and the runbook flags. The configuration starts
// from capture.DefaultConfig, so every flag's default is the library's,
// and ends with capture's SetDefaults (levels, --out).
func parseCapture(name string, args []string, stdout, stderr io.Writer) (capture.Config, *runbookFlags, error) {
	cfg := capture.DefaultConfig()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	conc := intList{}
	rates := floatList{}
	arrivals := string(cfg.Arrivals)
	probes := strings.Join(cfg.Probes, ",")
	pid := "auto"
	var gpus intList // nil: every GPU
	var lengths *string
	// The help shows the flags in these groups, each in the order defined
	// here, the essential ones first. ab's and sensitivity's own flags
	// lead their help (addRunbookFlags fills those groups).
	g := newFlagGroups(fs)
	g.add(abGroup)
	g.add(sensitivityGroup)
	g.add("Target and data",
		func() {
			fs.StringVar(&cfg.Target, "target", cfg.Target, "server base `URL`, e.g. http://127.0.0.1:8000")
		},
		func() {
			fs.StringVar(&cfg.Dataset, "dataset", cfg.Dataset, "a JSONL manifest ({\"id\",\"audio\",\"text\",\"lang\"}), a Kaldi dir (wav.scp + text),\na folder of .wav/.flac files with sibling .txt transcripts, a SeedTTS meta.lst, a Parquet file\nor folder, a Hugging Face datasets folder (*.arrow + dataset_info.json) or hub snapshot\n(data/*.parquet) (`PATH`; docs/DATASETS.md)")
		},
		func() {
			fs.StringVar(&cfg.Protocol, "protocol", cfg.Protocol, "`openai` (multipart POST /v1/audio/transcriptions), openai-stream (same, stream=true, SSE),\nfunasr-ws (Fun-ASR realtime WebSocket) or openai-realtime (see --realtime-dialect)")
		},
		func() {
			fs.StringVar(&cfg.Model, "model", cfg.Model, "model `NAME` sent in the request's model field (omitted when empty)")
		},
		func() {
			fs.StringVar(&cfg.Lang, "lang", cfg.Lang, "default language of the samples: `en` (WER) or zh (CER); sent as the language field")
		},
		func() {
			fs.IntVar(&cfg.MaxSamples, "max-samples", cfg.MaxSamples, "use only the first `N` samples of the dataset (0: all)")
		},
		func() {
			fs.BoolVar(&cfg.SkipBad, "skip-bad", cfg.SkipBad, "skip dataset entries that fail preflight (counted as bad_input in coverage)")
		},
		func() {
			// The task (capture/diarize.go): what a request asks for, how it is scored.
			fs.StringVar(&cfg.Task, "task", cfg.Task, "`asr`: a transcript scored by WER/CER (results.json); transcribe-diarize: MOSS-Transcribe-Diarize's\n[start][Sxx]text[end] markup, sent as SGLang-Omni's client sends it (model, file,\nmax_new_tokens=65536, no language; verbose_json, or SSE with --protocol openai-stream) and scored by CER,\ncpCER and speaker-timestamp DER into transcribe_diarize_results.json and\ntranscribe_diarize_speed_results.json; the dataset's text is the reference markup")
		},
		func() { addDatasetFlags(fs, &cfg) }, // --split, --columns (dataset_flags.go)
	)
	g.add("Load",
		func() {
			fs.Var(&conc, "concurrency", "closed-loop levels: requests kept in flight, comma-separated `LIST`, e.g. 1,4,8\n(default "+
				levelList(capture.DefaultLevels)+" when neither --rate nor --arrivals replay:FILE is given; --find-max starts at 1)")
		},
		func() {
			fs.Var(&rates, "rate", "open-loop levels in requests per second, comma-separated `LIST`, e.g. 2,4.5")
		},
		func() {
			fs.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "scored passes over the dataset per level (`N`)")
		},
		func() {
			fs.BoolVar(&cfg.Warmup, "warmup", cfg.Warmup, "run one full unscored pass per level before the scored repeats")
		},
		func() {
			fs.StringVar(&arrivals, "arrivals", arrivals, "open-loop schedule: `poisson` or constant")
		},
		func() {
			fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "`N` seeding the Poisson schedule (same seed, same send times)")
		},
		func() { addPassFlags(fs, &cfg) }, // --pass-requests, --pass-duration, --replay-speed (passlen_flags.go)
		func() {
			fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout (`DURATION`, e.g. 30s)")
		},
	)
	g.add("Output",
		func() {
			fs.StringVar(&cfg.Out, "out", cfg.Out, "bundle `DIR` to write (default runs/<date>-<time>); an existing bundle there is an error\nunless --overwrite")
		},
		func() {
			fs.BoolVar(&cfg.Overwrite, "overwrite", cfg.Overwrite, "replace an existing bundle in --out")
		},
		func() { fs.StringVar(&cfg.Format, "format", cfg.Format, formatUsage) },
		func() { fs.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "no progress output") },
		func() { lengths = lengthBucketsFlag(fs) }, // the end-of-capture tables' and report's (finisher)
		func() { addRawDirFlag(fs, &cfg) },         // --save-raw-dir (dataset_flags.go)
	)
	g.add("Probes (docs/PROBES.md)",
		func() {
			fs.StringVar(&probes, "probes", probes, "probes to run, comma-separated `LIST`; auto: every probe this machine supports (a probe\nthat cannot run says why in one line; one that runs but records nothing is an error); none: no probes"+capture.ProbeHelp())
		},
		func() {
			fs.StringVar(&pid, "pid", "auto", "the server's process `PID` (with its children) for host probes; auto: the process\nlistening on --target's port")
		},
		func() {
			fs.Var(&gpus, "gpus", "NVML indices of the GPUs the gpu probe samples, comma-separated `LIST` (default: all)")
		},
		func() {
			fs.StringVar(&cfg.CPUEngine, "cpu-engine", cfg.CPUEngine, "cpu probe engine (`ENGINE`):\n  otel: OpenTelemetry eBPF profiler, Python frames named with file and line;\n        needs 'ulimit -l unlimited' or CAP_SYS_RESOURCE\n  fp:   frame-pointer sampler, native frames; Python functions too for a CPython >= 3.12\n        server started with PYTHONPERFSUPPORT=1\n  auto: otel where it can start, else fp; the capture says which ran")
		},
		func() { fs.IntVar(&cfg.CPUHz, "cpu-hz", cfg.CPUHz, "stack sampling rate of the cpu probe (`HZ`)") },
		func() {
			fs.StringVar(&cfg.ServerMetrics, "server-metrics", cfg.ServerMetrics, "the server's Prometheus /metrics `URL` that the metrics probe scrapes into server_metrics.jsonl;\nauto: --target's base URL + /metrics, when it answers with the exposition format; off: none")
		},
		func() {
			fs.DurationVar(&cfg.ServerMetricsInterval, "server-metrics-interval", cfg.ServerMetricsInterval, "time between two scrapes of --server-metrics (`DURATION`; each has a 2 s timeout)")
		},
		func() {
			fs.DurationVar(&cfg.GPMWindow, "gpm-window", cfg.GPMWindow, "window of one GPM sample (SM/tensor activity, DRAM bandwidth) on Hopper and later (`DURATION`)")
		},
		func() {
			fs.BoolVar(&cfg.GPUPCIe, "gpu-pcie", cfg.GPUPCIe, "also sample PCIe throughput (each NVML read blocks ~20 ms; polled on its own goroutine)")
		},
		func() {
			fs.Float64Var(&cfg.ProcHz, "proc-hz", cfg.ProcHz, "sampling rate of the /proc fallback probe (`HZ`)")
		},
		func() {
			fs.BoolVar(&cfg.BPFStats, "bpf-stats", cfg.BPFStats, "measure the probes' in-kernel cost: turn on the kernel's BPF run-time statistics for\nthe capture (each BPF run is timed, tens of ns more) and record each probe's BPF time\nin the manifest (extra.probe_bpf)")
		},
	)
	g.add("Traces and server events",
		func() {
			fs.StringVar(&cfg.OTLPHTTP, "otlp-http", cfg.OTLPHTTP, "OTLP/HTTP trace receiver `ADDR` for the server's spans (off: disabled); the capture prints\nthe OTEL_EXPORTER_OTLP_TRACES_ENDPOINT to give the server")
		},
		func() {
			fs.StringVar(&cfg.OTLPGRPC, "otlp-grpc", cfg.OTLPGRPC, "OTLP/gRPC trace receiver `ADDR` (off: disabled)")
		},
		func() {
			fs.StringVar(&cfg.ProfileURL, "profile-url", cfg.ProfileURL, "server base `URL` whose /start_request_profile and /stop_request_profile the capture\ncalls itself; the server writes its events into the bundle's server-events/ folder")
		},
		func() {
			fs.StringVar(&cfg.EventsDir, "events-dir", cfg.EventsDir, "import SGLang-Omni request-profile event files (events_<stage>_<pid>.jsonl) from `DIR`")
		},
		func() {
			fs.DurationVar(&cfg.SpanGrace, "span-grace", cfg.SpanGrace, "how long to wait for server spans after the last request (`DURATION`)")
		},
		func() {
			fs.BoolVar(&cfg.OTLPAllowRemote, "otlp-allow-remote", cfg.OTLPAllowRemote, "allow the OTLP receivers to bind a non-loopback address (they have no authentication)")
		},
	)
	addRealtimeFlags(g, &cfg)
	capacity := addCapacityFlags(g, &cfg)
	addProxyFlags(g, &cfg)
	addRemoteFlags(g, &cfg)
	rb := addRunbookFlags(g)
	g.add("Advanced",
		func() {
			fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "on Ctrl-C, how long requests in flight may finish (`DURATION`)")
		},
		func() {
			fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "how long to wait for a target whose /health answers but is not ready yet (`DURATION`)")
		},
	)
	fs.Usage = helpFunc(fs, rb.help, g) // capture's: its flags, then proxy mode and runbooks
	err := parse(fs, args, stdout)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Proxy != "" {
		cfg.Command = fs.Args() // the user's benchmark command, after --
	} else if fs.NArg() > 0 {
		return cfg, nil, fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, fs.Arg(0))
	}
	if cfg.AgentToken == "" {
		cfg.AgentToken = os.Getenv("ASRPROF_AGENT_TOKEN") // not a flag default: --help would show it
	}
	if cfg.Probes, err = splitList(probes); err != nil || len(cfg.Probes) == 0 {
		if err == nil {
			err = fmt.Errorf("want auto, none or probe names")
		}
		return cfg, nil, fmt.Errorf("%w: --probes %q: %v", errUsage, probes, err)
	}
	if _, err := rb.gpuCoRunnerConfig(); err != nil {
		return cfg, nil, err
	}
	if _, err := splitList(rb.provenanceEnv); err != nil {
		return cfg, nil, fmt.Errorf("%w: --provenance-env %q: %v", errUsage, rb.provenanceEnv, err)
	}
	if rb.lengths, err = parseLengthBuckets(*lengths); err != nil {
		return cfg, nil, err
	}
	cfg.GPUs = gpus
	if pid != "auto" {
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 {
			return cfg, nil, fmt.Errorf("%w: --pid %q: want a process id or auto", errUsage, pid)
		}
		cfg.PID = n
	}
	cfg.Concurrency = conc
	cfg.Rates = rates
	cfg.Arrivals = load.Arrivals(arrivals)
	if err := capacity(); err != nil {
		return cfg, nil, err
	}
	cfg.SetDefaults(time.Now())
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	rb.levels = levelsLine(&cfg, set)
	rb.warnings = inFlightWarnings(&cfg)
	return cfg, rb, nil
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
	if len(cfg.Concurrency) > 0 {
		levels = append(levels, "c="+levelList(cfg.Concurrency))
		switch {
		case set["sessions"]:
			from = append(from, "--sessions")
		case set["concurrency"]:
			from = append(from, "--concurrency")
		}
	}
	if len(cfg.Rates) > 0 {
		var r []string
		for _, x := range cfg.Rates {
			r = append(r, strconv.FormatFloat(x, 'g', -1, 64))
		}
		levels = append(levels, "rate="+strings.Join(r, ",")+"/s")
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

// levelList writes levels as a flag takes them: 1,8,16.
func levelList(levels []int) string {
	s := make([]string, len(levels))
	for i, n := range levels {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
