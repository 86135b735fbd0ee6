package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/metrics"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/proctree"
	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/bundle"
)

// ErrBadInput means the dataset failed preflight (and --skip-bad was not given).
var ErrBadInput = errors.New("dataset has bad entries")

// ErrInterrupted means the capture was stopped (Ctrl-C) before it finished;
// the bundle was finalized with complete=false.
var ErrInterrupted = errors.New("capture interrupted")

// Outcome is what a finished (or stopped) capture produced.
type Outcome struct {
	Dir      string
	Manifest trace.Manifest
	Results  trace.Results
}

// Session is one capture. Create it with New, then call Run.
type Session struct {
	cfg    Config
	stdout io.Writer
	stderr io.Writer

	mu       sync.Mutex // guards manifest and w's manifest rewrites
	manifest trace.Manifest
	w        *bundle.Writer
	writeErr error
}

// New returns a session for cfg. Output goes to stdout (tables) and stderr
// (progress and notes).
func New(cfg Config, stdout, stderr io.Writer) *Session {
	return &Session{cfg: cfg, stdout: stdout, stderr: stderr}
}

// Run performs the capture. When ctx is cancelled (Ctrl-C) no new requests
// are sent, those in flight get cfg.Grace, the bundle is finalized with
// complete=false, and Run returns ErrInterrupted with the partial outcome.
func (s *Session) Run(ctx context.Context) (*Outcome, error) {
	cfg := &s.cfg
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	items, samples, bad, err := s.prepareDataset(ctx)
	if err != nil {
		return nil, err
	}
	items = loopItems(cfg, items)
	models, err := checkTarget(ctx, cfg, func(m string) { fmt.Fprintln(s.stderr, m) })
	if err != nil {
		return nil, err
	}
	dsSHA, err := dataset.Fingerprint(samples)
	if err != nil {
		return nil, fmt.Errorf("fingerprinting dataset: %w", err)
	}
	w, err := bundle.Create(cfg.Out, cfg.Overwrite)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	s.w = w
	start := time.Now()
	s.manifest = trace.Manifest{
		Schema:      trace.Schema,
		StartUnixNs: start.UnixNano(),
		Config:      configMap(cfg),
		Fingerprint: buildFingerprint(cfg.Target, models, dsSHA, len(samples)),
		Levels:      []trace.LevelRun{},
		Clock:       trace.Clock{StartUnixNs: start.UnixNano(), StartMonoMinusWallNs: monoMinusWall()},
		Coverage:    trace.Coverage{BadInput: len(bad)},
	}
	if len(bad) > 0 {
		s.manifest.Notes = append(s.manifest.Notes, fmt.Sprintf("%d dataset entries skipped by --skip-bad", len(bad)))
	}
	if err := s.saveManifest(); err != nil {
		return nil, err
	}

	say := func(m string) { fmt.Fprintln(s.stderr, m) }
	probes, err := buildProbes(cfg)
	if err != nil {
		return nil, err
	}
	pset := &probeSet{status: map[string]string{}}
	if len(probes) > 0 {
		pid, how := resolvePID(cfg.PID, cfg.Target)
		say("target: " + how)
		auto := len(cfg.Probes) == 0 || cfg.Probes[0] == "auto"
		pset = startProbes(ctx, probes, probe.Target{PID: pid, Children: func() []int { return proctree.Descendants(pid) }}, w, auto, cfg.ProcHz, say)
		defer pset.stop(say)
		s.mu.Lock()
		s.manifest.Extra = map[string]any{"target_pid": pid, "target_pid_how": how, "probes": pset.status}
		s.mu.Unlock()
	}

	tr, err := startTracing(ctx, cfg, w, s.manifest.Fingerprint, say)
	if err != nil {
		return nil, err
	}

	client, err := protocol.New(cfg.Protocol, realtimeOptions(cfg, protocol.Options{
		Target:     cfg.Target,
		Stream:     cfg.Protocol == "openai-stream",
		HTTPClient: newHTTPClient(cfg),
	}))
	if err != nil {
		return nil, err
	}
	prog := newProgress(s.stderr, cfg.Quiet)
	drv := &driver.Driver{
		Client:  client,
		Items:   items,
		Model:   cfg.Model,
		Lang:    cfg.Lang,
		Timeout: sessionTimeout(cfg, items),
		Tracer:  tr.client,
		OnRecord: func(r *trace.Request) {
			prog.done(r.Status == trace.StatusOK)
			if err := w.Append(bundle.RequestsFile, r); err != nil {
				s.noteWriteErr(err)
			}
		},
	}

	// Requests in flight outlive ctx by cfg.Grace.
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReq()
	go func() {
		select {
		case <-ctx.Done():
			time.AfterFunc(cfg.Grace, cancelReq)
		case <-reqCtx.Done():
		}
	}()

	var results trace.Results
	results.Schema = trace.Schema
	interrupted := false
levels:
	for _, lv := range cfg.Levels() {
		dl := driver.Level{Name: lv.Name, Concurrency: lv.Concurrency, Rate: lv.Rate, Arrivals: cfg.Arrivals, Seed: cfg.Seed}
		var passes []trace.PassMetrics
		type pass struct {
			repeat int
			warmup bool
		}
		plan := []pass{}
		if cfg.Warmup {
			plan = append(plan, pass{0, true})
		}
		for r := 1; r <= cfg.Repeats; r++ {
			plan = append(plan, pass{r, false})
		}
		for _, p := range plan {
			if ctx.Err() != nil {
				interrupted = true
				break levels
			}
			prog.begin(lv, p.repeat, cfg.Repeats, p.warmup, len(items))
			period := probe.Period{Level: lv.Name, Repeat: p.repeat, Warmup: p.warmup, StartUnixNs: time.Now().UnixNano()}
			pset.begin(period)
			res := drv.Run(ctx, reqCtx, dl, p.repeat, p.warmup)
			period.EndUnixNs = time.Now().UnixNano()
			pset.end(context.WithoutCancel(ctx), period, say)
			run := trace.LevelRun{
				Level: lv.Name, Concurrency: lv.Concurrency, Rate: lv.Rate,
				Repeat: p.repeat, Warmup: p.warmup,
				StartUnixNs: res.Start.UnixNano(), EndUnixNs: res.End.UnixNano(),
			}
			pm := metrics.Pass(res.Records, res.WallS())
			pm.Level, pm.Concurrency, pm.Rate, pm.Repeat = lv.Name, lv.Concurrency, lv.Rate, p.repeat
			prog.end(pm)
			stopped := ctx.Err() != nil
			s.mu.Lock()
			s.manifest.Levels = append(s.manifest.Levels, run)
			if !p.warmup && !stopped {
				s.manifest.Coverage.Add(pm.Coverage)
			}
			s.mu.Unlock()
			if err := s.saveManifest(); err != nil {
				return nil, err
			}
			if stopped {
				// A pass cut short is recorded in requests.jsonl but not
				// summarised as if it were complete.
				interrupted = true
				break levels
			}
			if !p.warmup {
				passes = append(passes, pm)
				if gap := coverageGap(pm); gap != "" {
					s.mu.Lock()
					s.manifest.Incomplete = append(s.manifest.Incomplete, fmt.Sprintf("%s repeat %d: %s", lv.Name, p.repeat, gap))
					s.mu.Unlock()
				}
			}
		}
		if len(passes) > 0 {
			results.Results = append(results.Results, metrics.Level(passes))
		}
	}
	if results.Results == nil {
		results.Results = []trace.LevelResult{}
	}
	if err := w.WriteJSON(bundle.ResultsFile, results); err != nil {
		return nil, err
	}
	offsets := pset.clockOffsets()
	pset.stop(say)
	pset.running = nil
	traceInfo := tr.finish(ctx, w, say)
	end := time.Now()
	s.mu.Lock()
	s.manifest.EndUnixNs = end.UnixNano()
	s.manifest.Clock.EndMonoMinusWallNs = monoMinusWall()
	s.manifest.Interrupted = interrupted
	if s.manifest.Extra == nil {
		s.manifest.Extra = map[string]any{}
	}
	for k, v := range traceInfo {
		s.manifest.Extra[k] = v
	}
	if len(offsets) > 0 {
		s.manifest.Clock.Probes = offsets
	}
	s.manifest.Finished = !interrupted
	if interrupted {
		s.manifest.Incomplete = append(s.manifest.Incomplete, "interrupted before the last pass finished")
	}
	if s.writeErr != nil {
		s.manifest.Incomplete = append(s.manifest.Incomplete, "bundle write error")
	}
	s.manifest.Complete = len(s.manifest.Incomplete) == 0
	if s.writeErr != nil {
		s.manifest.Notes = append(s.manifest.Notes, "write error: "+s.writeErr.Error())
	}
	s.mu.Unlock()
	if files, err := (&bundle.Bundle{Dir: cfg.Out}).Files(); err == nil {
		s.manifest.Files = files
	}
	if err := s.saveManifest(); err != nil {
		return nil, err
	}
	out := &Outcome{Dir: cfg.Out, Manifest: s.manifest, Results: results}
	if err := printTables(context.WithoutCancel(ctx), s.stdout, s.stderr, cfg.Format, out); err != nil {
		return out, err
	}
	fmt.Fprintf(s.stderr, "bundle: %s\n", cfg.Out)
	if interrupted {
		return out, ErrInterrupted
	}
	return out, s.writeErr
}

// coverageGap says what a scored pass is missing ("" when nothing).
func coverageGap(m trace.PassMetrics) string {
	c := m.Coverage
	if c.Evaluated == c.Total && c.Skipped == 0 && c.Failed == 0 {
		return ""
	}
	gap := fmt.Sprintf("evaluated %d of %d", c.Evaluated, c.Total)
	if c.Failed > 0 {
		kinds := make([]string, 0, len(c.FailureKinds))
		for k, v := range c.FailureKinds {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(kinds)
		gap += fmt.Sprintf(", %d failed (%s)", c.Failed, strings.Join(kinds, ", "))
	}
	if c.Skipped > 0 {
		gap += fmt.Sprintf(", %d skipped (empty normalized reference)", c.Skipped)
	}
	return gap
}

func (s *Session) noteWriteErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr == nil {
		s.writeErr = err
		fmt.Fprintf(s.stderr, "asrprof: %v (the capture goes on)\n", err)
	}
}

func (s *Session) saveManifest() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.WriteJSON(bundle.ManifestFile, s.manifest)
}

// prepareDataset loads, limits and preflights the dataset, then reads the
// audio of every good sample into memory.
func (s *Session) prepareDataset(ctx context.Context) ([]driver.Item, []dataset.Sample, []dataset.BadEntry, error) {
	cfg := &s.cfg
	ds, err := dataset.Load(cfg.Dataset, cfg.Lang)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if cfg.MaxSamples > 0 {
		ds.Limit(cfg.MaxSamples)
	}
	good, bad := dataset.Preflight(ctx, ds, runtime.NumCPU()*2)
	for _, b := range bad {
		fmt.Fprintf(s.stderr, "bad entry %s: %s: %s\n", b.ID, b.Path, b.Reason)
	}
	if len(bad) > 0 && !cfg.SkipBad {
		return nil, nil, nil, fmt.Errorf("%w: %d of %d entries failed preflight (see above); fix them or pass --skip-bad", ErrBadInput, len(bad), len(ds.Samples))
	}
	if len(good) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: %s has no usable samples", ErrBadInput, cfg.Dataset)
	}
	items := make([]driver.Item, len(good))
	for i, smp := range good {
		b, err := os.ReadFile(smp.Audio)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: reading %s: %v", ErrBadInput, smp.Audio, err)
		}
		items[i] = driver.Item{
			SampleID:    smp.ID,
			FileName:    filepath.Base(smp.Audio),
			ContentType: audio.ContentType(smp.Info.Format),
			Audio:       b,
			AudioS:      smp.Info.DurationS,
			Ref:         smp.Text,
			Lang:        smp.Lang,
		}
	}
	return items, good, bad, nil
}

func configMap(cfg *Config) map[string]any {
	return map[string]any{
		"target": cfg.Target, "dataset": cfg.Dataset, "protocol": cfg.Protocol,
		"model": cfg.Model, "lang": cfg.Lang, "concurrency": cfg.Concurrency,
		"rates": cfg.Rates, "arrivals": string(cfg.Arrivals), "seed": cfg.Seed,
		"repeats": cfg.Repeats, "warmup": cfg.Warmup, "max_samples": cfg.MaxSamples,
		"timeout_s": cfg.Timeout.Seconds(), "grace_s": cfg.Grace.Seconds(),
		"out": cfg.Out, "skip_bad": cfg.SkipBad, "probes": cfg.Probes, "pid": cfg.PID,
		"otlp_http": cfg.OTLPHTTP, "otlp_grpc": cfg.OTLPGRPC, "span_grace_s": cfg.SpanGrace.Seconds(),
		"events_dir": cfg.EventsDir, "profile_url": cfg.ProfileURL,
		"chunk_ms": cfg.ChunkMs, "pace": cfg.Pace, "loops": cfg.Loops,
		"realtime_dialect": cfg.Dialect, "hotwords": cfg.Hotwords,
	}
}

func newHTTPClient(cfg *Config) *http.Client {
	maxConns := 64
	for _, c := range cfg.Concurrency {
		maxConns = max(maxConns, c)
	}
	return &http.Client{Transport: protocol.NewTransport(maxConns)}
}
