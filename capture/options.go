package capture

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/option"
)

// Option is one capture option (option.Option): the flag of `asrprof
// capture` (its default is DefaultConfig's value of the field), the
// Config field it sets, whether an agent's half of a remote capture gets
// it (agentArgs), and, through the field's json tag, the name the
// manifest's config records it under. Value, where set, is given the
// *Flags that Define binds.
type Option = option.Option

// flags is a Value of the *Flags that Define binds.
func flags(get func(f *Flags) any) func(any) any { return func(b any) any { return get(b.(*Flags)) } }

// The help groups, in the order --help shows them.
const (
	groupData     = "Target and data"
	groupLoad     = "Load"
	groupOutput   = "Output"
	groupProbes   = "Probes (docs/PROBES.md)"
	groupTraces   = "Traces and server events"
	groupRealtime = "Realtime protocols (--protocol funasr-ws or openai-realtime; docs/REALTIME.md)"
	groupCapacity = "SLO and capacity search (docs/CAPACITY.md)"
	groupProxy    = "Proxy mode (docs/PROXY.md)"
	groupRemote   = "Probes-only captures and remote probes (docs/SCALE.md)"
	groupAdvanced = "Advanced"
)

// Options lists the options of a capture in the order --help shows them,
// the essential ones first.
func Options() []Option {
	return []Option{
		{Name: "target", Group: groupData, Field: "Target", Agent: true, Usage: "server base `URL`, e.g. http://127.0.0.1:8000 (an OpenAI client's base_url, ending in /v1, is taken as its base)"},
		{Name: "dataset", Group: groupData, Field: "Dataset", Usage: "a JSONL manifest ({\"id\",\"audio\",\"text\",\"lang\"}), a Kaldi dir (wav.scp + text),\na folder of .wav/.flac files with sibling .txt transcripts, a SeedTTS meta.lst, a Parquet file\nor folder, a Hugging Face datasets folder (*.arrow + dataset_info.json) or hub snapshot\n(data/*.parquet) (`PATH`; docs/DATASETS.md)"},
		{Name: "protocol", Group: groupData, Field: "Protocol", Usage: "`openai` (multipart POST /v1/audio/transcriptions), openai-stream (same, stream=true, SSE),\nfunasr-ws (Fun-ASR realtime WebSocket) or openai-realtime (see --realtime-dialect)"},
		{Name: "endpoint", Group: groupData, Field: "Endpoint", Usage: "the transcription `PATH` of --protocol openai and openai-stream (default " + protocol.TranscriptionsPath + "),\ne.g. /inference for whisper.cpp's server"},
		{Name: "model", Group: groupData, Field: "Model", Usage: "model `NAME` sent in the request's model field (default: the one model the server's /v1/models lists; with several, none is sent)"},
		{Name: "header", Group: groupData, Field: "Headers", Value: flags(func(f *Flags) any { return (*option.Repeated)(&f.c.Headers) }),
			Usage: "send `\"NAME: VALUE\"` with every request and target check, once per header, e.g.\n\"Authorization: Bearer $VLLM_API_KEY\" for a server started with --api-key; @FILE reads a header a line\nfrom FILE (out of the command line); not recorded in the bundle"},
		{Name: "lang", Group: groupData, Field: "Lang", Usage: "default language of the samples: `en` (WER) or zh (CER); sent as the language field"},
		{Name: "max-samples", Group: groupData, Field: "MaxSamples", Usage: "use only the first `N` samples of the dataset (0: all)"},
		{Name: "skip-bad", Group: groupData, Field: "SkipBad", Usage: "skip dataset entries that fail preflight (counted as bad_input in coverage)"},
		{Name: "task", Group: groupData, Field: "Task", Usage: "`asr`: a transcript scored by WER/CER (results.json); transcribe-diarize: MOSS-Transcribe-Diarize's\n[start][Sxx]text[end] markup, sent as SGLang-Omni's client sends it (model, file,\nmax_new_tokens=65536, no language; verbose_json, or SSE with --protocol openai-stream) and scored by CER,\ncpCER and speaker-timestamp DER into transcribe_diarize_results.json and\ntranscribe_diarize_speed_results.json; the dataset's text is the reference markup"},
		{Name: "columns", Group: groupData, Field: "Columns", Value: flags(func(f *Flags) any { return (*columnsValue)(&f.c.Columns) }),
			Usage: "the columns of a Parquet or Hugging Face dataset, where not the known names\n(id: sample_id, id; audio: ref_audio, audio; text: ref_text, text, transcription, sentence;\nlang: lang, language), as `id=NAME,audio=NAME,text=NAME,lang=NAME` (any of them)"},
		{Name: "split", Group: groupData, Field: "Split", Usage: "the split of a Parquet or Hugging Face dataset to send (`NAME`, e.g. test); needed when it has\nseveral, and the error lists them"},

		{Name: "concurrency", Group: groupLoad, Field: "Concurrency", Usage: "closed-loop levels: requests kept in flight, comma-separated `LIST`, e.g. 1,4,8\n(default " +
			option.IntList(DefaultLevels).String() + " when neither --rate nor --arrivals replay:FILE is given; --find-max starts at 1)"},
		{Name: "rate", Group: groupLoad, Field: "Rates", Usage: "open-loop levels in requests per second, comma-separated `LIST`, e.g. 2,4.5"},
		{Name: "repeats", Group: groupLoad, Field: "Repeats", Usage: "scored passes over the dataset per level (`N`)"},
		{Name: "warmup", Group: groupLoad, Field: "Warmup", Usage: "run one full unscored pass per level before the scored repeats"},
		{Name: "solo", Group: groupLoad, Field: "Solo", Usage: "add a c=1 level first when the sweep has none: each sample's service alone, which the diagnosis\nof a server that sends no events or spans needs to tell its own service from waiting behind others"},
		{Name: "arrivals", Group: groupLoad, Field: "Arrivals", Value: flags(func(f *Flags) any { return (*string)(&f.c.Arrivals) }), Usage: "open-loop schedule: `poisson` or constant;\nreplay:FILE sends at the arrival times of a trace (JSONL or CSV: timestamp in ms as Mooncake's,\ntimestamp_ms or timestamp_s; sample_id or audio_duration_s picks the sample), one level named\nreplay, its times divided by --replay-speed (docs/REPLAY.md)"},
		{Name: "seed", Group: groupLoad, Field: "Seed", Usage: "`N` seeding the Poisson schedule (same seed, same send times)"},
		{Name: "pass-duration", Group: groupLoad, Field: "PassDuration", Usage: "send for `DURATION` a pass, cycling the dataset (0: every sample once); requests in flight\nthen finish. Closed loop: none is handed out after it; open loop: the schedule ends there"},
		{Name: "pass-requests", Group: groupLoad, Field: "PassRequests", Usage: "send `N` requests a pass, cycling the dataset (0: every sample once); with --pass-duration,\nwhichever ends first"},
		// Its help says the default: a flag.Func's, it shows none of its own.
		{Name: "replay-speed", Group: groupLoad, Field: "ReplaySpeed", Value: flags(func(f *Flags) any { return (*speedValue)(&f.c.ReplaySpeed) }),
			Usage: "--arrivals replay:FILE: divide the trace's times by `X` (2: twice as fast) (default 1)"},
		{Name: "timeout", Group: groupLoad, Field: "Timeout", Usage: "per-request timeout (`DURATION`, e.g. 30s)"},

		{Name: "out", Group: groupOutput, Field: "Out", Local: true, Usage: "bundle `DIR` to write (default runs/<date>-<time>); an existing bundle there is an error\nunless --overwrite"},
		{Name: "overwrite", Group: groupOutput, Field: "Overwrite", Local: true, Usage: "replace an existing bundle in --out"},
		option.Format(groupOutput),
		option.Quiet(groupOutput),
		{Name: "verbose", Group: groupOutput, Field: "Verbose", Usage: "print the detail after the checks and the summary: the sweep, stages, client view, diagnosis,\nadvice, results by audio length, threads and hot code (asrprof analyze DIR prints them too)"},
		{Name: "save-raw-dir", Group: groupOutput, Field: "SaveRawDir", Usage: "also write each scored pass's per-sample records into `DIR` as SGLang-Omni's benchmark does:\nconc{N}_rep{R}.jsonl (rate{R}_rep{R}.jsonl for --rate), one JSON object per sample with their field names"},

		{Name: "probes", Group: groupProbes, Field: "Probes", Agent: true, Value: flags(func(f *Flags) any { return &f.probes }),
			Usage: "probes to run, comma-separated `LIST`; auto: every probe this machine supports (a probe\nthat cannot run says why in one line; one that runs but records nothing is an error); none: no probes" + ProbeHelp()},
		{Name: "pid", Group: groupProbes, Field: "PID", Agent: true, Value: flags(func(f *Flags) any { return &f.pid }),
			Usage: "the server's process `PID` (with its children) for host probes; auto: the process\nlistening on --target's port"},
		{Name: "gpus", Group: groupProbes, Field: "GPUs", Agent: true, Usage: "NVML indices of the GPUs the gpu probe samples, comma-separated `LIST` (default: all)"},
		{Name: "cpu-engine", Group: groupProbes, Field: "CPUEngine", Agent: true, Usage: "cpu probe engine (`ENGINE`):\n  otel: OpenTelemetry eBPF profiler, Python frames named with file and line;\n        needs 'ulimit -l unlimited' or CAP_SYS_RESOURCE\n  fp:   frame-pointer sampler, native frames; Python functions too for a CPython >= 3.12\n        server started with PYTHONPERFSUPPORT=1\n  perf: perf events without root (kernel.perf_event_paranoid <= 2): the user's own server's\n        user-space stacks, frame pointers\n  auto: otel where it can start, else fp, else perf; the capture says which ran"},
		{Name: "cpu-hz", Group: groupProbes, Field: "CPUHz", Agent: true, Usage: "stack sampling rate of the cpu probe (`HZ`)"},
		{Name: "server-metrics", Group: groupProbes, Field: "ServerMetrics", Agent: true, Usage: "the server's Prometheus /metrics `URL` that the metrics probe scrapes into server_metrics.jsonl;\nauto: --target's base URL + /metrics, when it answers with the exposition format; off: none"},
		{Name: "server-metrics-interval", Group: groupProbes, Field: "ServerMetricsInterval", Agent: true, Usage: "time between two scrapes of --server-metrics (`DURATION`; each has a 2 s timeout)"},
		{Name: "gpm-window", Group: groupProbes, Field: "GPMWindow", Agent: true, Usage: "window of one GPM sample (SM/tensor activity, DRAM bandwidth) on Hopper and later (`DURATION`)"},
		{Name: "gpu-pcie", Group: groupProbes, Field: "GPUPCIe", Agent: true, Usage: "also sample PCIe throughput (each NVML read blocks ~20 ms; polled on its own goroutine)"},
		{Name: "proc-hz", Group: groupProbes, Field: "ProcHz", Agent: true, Usage: "sampling rate of the /proc fallback probe (`HZ`)"},
		{Name: "bpf-stats", Group: groupProbes, Field: "BPFStats", Agent: true, Usage: "measure the probes' in-kernel cost: turn on the kernel's BPF run-time statistics for\nthe capture (each BPF run is timed, tens of ns more) and record each probe's BPF time\nin the manifest (extra.probe_bpf)"},

		{Name: "otlp-http", Group: groupTraces, Field: "OTLPHTTP", Usage: "OTLP/HTTP trace receiver `ADDR` for the server's spans (off: disabled); the capture prints\nthe OTEL_EXPORTER_OTLP_TRACES_ENDPOINT to give the server"},
		{Name: "otlp-grpc", Group: groupTraces, Field: "OTLPGRPC", Usage: "OTLP/gRPC trace receiver `ADDR` (off: disabled)"},
		{Name: "profile-url", Group: groupTraces, Field: "ProfileURL", Usage: "server base `URL` whose /start_request_profile and /stop_request_profile the capture\ncalls itself; the server writes its events into the bundle's server-events/ folder"},
		{Name: "events-dir", Group: groupTraces, Field: "EventsDir", Usage: "import SGLang-Omni request-profile event files (events_<stage>_<pid>.jsonl) from `DIR`"},
		{Name: "span-grace", Group: groupTraces, Field: "SpanGrace", Usage: "how long to wait for server spans after the last request (`DURATION`)"},
		{Name: "otlp-allow-remote", Group: groupTraces, Field: "OTLPAllowRemote", Usage: "allow the OTLP receivers to bind a non-loopback address (they have no authentication)"},

		// --sessions is --concurrency under the name realtime users know.
		{Name: "sessions", Group: groupRealtime, Field: "Concurrency", Usage: "concurrent WebSocket sessions per level, comma-separated `LIST` (an alias of --concurrency),\ne.g. 1,4,8"},
		{Name: "pace", Group: groupRealtime, Field: "Pace", Usage: "`realtime` sends each frame when its audio would have been spoken (scheduled from the\nsession's start, so drift does not accumulate); none sends as fast as possible"},
		{Name: "chunk-ms", Group: groupRealtime, Field: "ChunkMs", Usage: "audio per frame, in `MS`"},
		{Name: "loops", Group: groupRealtime, Field: "Loops", Usage: "play each sample's audio `K` times within its session"},
		{Name: "realtime-dialect", Group: groupRealtime, Field: "Dialect", Usage: "--protocol openai-realtime: `openai` (GA, 24 kHz), vllm or sglang-omni (16 kHz)"},
		{Name: "hotwords", Group: groupRealtime, Field: "Hotwords", Usage: "--protocol funasr-ws: hotwords sent as HOTWORDS:`w1,w2`"},

		{Name: "slo", Group: groupCapacity, Field: "SLO", Value: flags(func(f *Flags) any { return &f.slo }),
			Usage: "per-request limits for goodput, comma-separated metric=limit `LIST`, e.g.\nlatency=1s,rtf=0.3 or ttft=200ms (openai-stream) or first_update=1s,final_after_stop=2s (realtime).\nA request meets the SLO when it succeeded and every limit holds; goodput (req/s meeting it)\nand attainment (their share; requests the client's stop canceled are left out) go to the\nsweep, results.json and compare. Metrics:\n" + summary.SLOMetricsHelp()},
		{Name: "find-max", Group: groupCapacity, Field: "Search", Value: flags(func(f *Flags) any { return &f.findMax }),
			Usage: "search for the highest --concurrency (closed loop; the one given is the start, default 1)\nor --rate (open loop) whose attainment stays ≥ --attainment in every repeat: double until a\nlevel fails, then bisect until within --tolerance; prints the path and the answer (search.json)"},
		{Name: "attainment", Group: groupCapacity, Value: flags(func(f *Flags) any { return &f.search.Attainment }),
			Usage: "--find-max: the share of requests (`SHARE`, 0..1) that must meet --slo at a passing level"},
		{Name: "tolerance", Group: groupCapacity, Value: flags(func(f *Flags) any { return &f.tolerance }),
			Usage: "--find-max: stop when the passing and failing levels are this close (`TOL`): requests in flight\nor req/s, or a percentage of the passing level such as 10% (default 1 closed loop, 10% open loop)"},
		{Name: "find-max-limit", Group: groupCapacity, Value: flags(func(f *Flags) any { return &f.search.Max }),
			Usage: "--find-max: the highest level to try (`N`; default 1024 in flight, 1000 req/s)"},

		{Name: "proxy", Group: groupProxy, Field: "Proxy", Usage: "listen at `HOST:PORT` (loopback when HOST is empty) and record the requests your own\nclient sends to --target through it; the command after -- is that client"},
		{Name: "levels", Group: groupProxy, Field: "ProxyLevels", Usage: "the client's levels in order, comma-separated `LIST` (c1,c8,c8: a name given twice in a\nrow is a repeat; default: inferred)"},
		// 0 is proxy.DefaultGap: the help says so once.
		{Name: "level-gap", Group: groupProxy, Field: "LevelGap", Usage: "an idle time (nothing in flight) this long ends a phase (`DURATION`; default 200ms)"},

		{Name: "probes-only", Group: groupRemote, Field: "ProbesOnly", Agent: true, Usage: "run the probes without sending requests (no --dataset): periods of --period until --duration\nor Ctrl-C; the server's load comes from elsewhere"},
		{Name: "duration", Group: groupRemote, Field: "Duration", Usage: "with --probes-only or --proxy: how long the capture lasts (`DURATION`; 0: until Ctrl-C,\nor with --proxy and a command, until the command exits)"},
		{Name: "period", Group: groupRemote, Field: "Period", Usage: "with --probes-only: the length of one probe period, one row per thread in sched.jsonl (`DURATION`)"},
		{Name: "agent", Group: groupRemote, Field: "Agents", Value: flags(func(f *Flags) any { return (*option.Repeated)(&f.c.Agents) }),
			Usage: "run the probes in the asrprof serve at `URL` (e.g. http://10.0.0.2:7070) on the server's host\ninstead of here; repeatable, one per host. The first agent's probe files land at the bundle's\nroot, the others' under agents/<host_port>/; each agent's clock offset is in manifest.json"},
		{Name: "agent-token", Group: groupRemote, Field: "AgentToken", Usage: "bearer `TOKEN` of the agents' asrprof serve --token (default $ASRPROF_AGENT_TOKEN)"},

		{Name: "grace", Group: groupAdvanced, Field: "Grace", Usage: "on Ctrl-C, how long requests in flight may finish (`DURATION`)"},
		{Name: "ready-timeout", Group: groupAdvanced, Field: "ReadyTimeout", Usage: "how long to wait for a target whose /health answers but is not ready yet (`DURATION`)"},
	}
}

// Flags binds the options to one Config: Option.Define, given the Config
// and the Flags, puts an option on a flag set, writing into them; Finish,
// after parsing, sets what a flag's text does not give by itself (the
// probes, the pid, the SLO and the --find-max search).
type Flags struct {
	c                           *Config
	probes, pid, slo, tolerance string
	findMax                     bool
	search                      Search
}

// NewFlags binds the options to c; c's values are the flags' defaults.
func NewFlags(c *Config) *Flags {
	f := &Flags{c: c, probes: strings.Join(c.Probes, ","), pid: "auto", slo: c.SLO.String(), search: DefaultSearch()}
	if c.PID != 0 {
		f.pid = strconv.Itoa(c.PID)
	}
	return f
}

// Finish completes the Config from the flags that fs.Parse left in f.
// Its errors name the flag.
func (f *Flags) Finish() error {
	c := f.c
	var err error
	if c.Probes, err = option.SplitList(f.probes); err != nil || len(c.Probes) == 0 {
		return fmt.Errorf("--probes %q: %v", f.probes, cmp.Or(err, errors.New("want auto, none or probe names")))
	}
	c.PID = 0
	if f.pid != "auto" {
		if c.PID, err = strconv.Atoi(f.pid); err != nil || c.PID <= 0 {
			return fmt.Errorf("--pid %q: want a process id or auto", f.pid)
		}
	}
	if c.SLO, err = summary.ParseSLO(f.slo); err != nil {
		return fmt.Errorf("--%v", err)
	}
	if !f.findMax {
		return nil
	}
	s := Search{Attainment: f.search.Attainment, Max: f.search.Max, Tolerance: DefaultSearch().Tolerance}
	switch {
	case f.tolerance != "":
		if s.Tolerance, s.Relative, err = ParseTolerance(f.tolerance); err != nil {
			return err
		}
	case len(c.Rates) > 0:
		s.Tolerance, s.Relative = 0.1, true
	}
	c.Search = &s
	return nil
}

// agentArgs are the capture flags an agent gets: the Agent options whose
// values are not the defaults, and --probes-only=true (an agent runs the
// probes and drives nothing). Booleans are written --name=true.
func agentArgs(cfg *Config) []string {
	c := *cfg
	c.ProbesOnly = true
	def := DefaultConfig()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	f := NewFlags(&c)
	var a []string
	for _, o := range Options() {
		if !o.Agent || sameValue(reflect.ValueOf(c).FieldByName(o.Field), reflect.ValueOf(def).FieldByName(o.Field)) {
			continue
		}
		o.Define(fs, &c, f)
		v := fs.Lookup(o.Name).Value
		if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			a = append(a, "--"+o.Name+"="+v.String())
		} else {
			a = append(a, "--"+o.Name, v.String())
		}
	}
	return a
}

// sameValue says whether two values of a field are the same setting (an
// empty list is no list).
func sameValue(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// columnsValue is --columns: dataset.ParseColumns' syntax.
type columnsValue dataset.Columns

func (c *columnsValue) String() string { return dataset.Columns(*c).String() }
func (c *columnsValue) Set(v string) error {
	p, err := dataset.ParseColumns(v)
	if err == nil {
		*c = columnsValue(p)
	}
	return err
}

// speedValue is --replay-speed: a number > 0. Like a flag.Func's, its
// String is empty: the help says the default.
type speedValue float64

func (s *speedValue) String() string { return "" }
func (s *speedValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x > 0) || math.IsInf(x, 0) {
		return errors.New("want a number > 0, such as 2")
	}
	*s = speedValue(x)
	return nil
}
