package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/probe"
)

// ErrBadInput means the dataset could not be loaded or failed preflight
// (and --skip-bad was not given).
var ErrBadInput = errors.New("bad dataset")

// ErrInterrupted means the capture was stopped (Ctrl-C) before it finished;
// the bundle was finalized with complete=false.
var ErrInterrupted = errors.New("capture interrupted")

// Outcome is what a finished (or stopped) capture produced.
type Outcome struct {
	Manifest model.Manifest
	Results  model.Results
}

// Session is one capture. Create it with New, then call Run. Its life
// cycle is the skeleton's (capture/skeleton.go); the driver's passes
// (runPasses), the proxy (capture/proxy.go) or a timer (probes only,
// capture/probesonly.go) are what feed it.
type Session struct {
	skeleton

	extra  []probe.Probe // AddProbes
	search *searcher     // --find-max: the search runPasses ran

	diarize *diarizeRun // --task transcribe-diarize: its passes (capture/diarize.go)
	replay  *replayPlan // --arrivals replay:FILE: the trace matched to the dataset (capture/replay.go)

	accMu sync.Mutex
	acc   *summary.Acc // the summary of the pass that runs, fed by the driver's OnRecord
}

// New returns a session for cfg. Output goes to stdout (tables) and stderr
// (progress and notes).
func New(cfg Config, stdout, stderr io.Writer) *Session {
	return &Session{skeleton: skeleton{cfg: cfg, stdout: stdout, stderr: stderr}}
}

// AddProbes runs ps beside the probes --probes asks for (a library user's
// own data source, or a test's fake). Call it before Run.
func (s *Session) AddProbes(ps ...probe.Probe) *Session {
	s.extra = append(s.extra, ps...)
	return s
}

// Run performs the capture. When ctx is cancelled (Ctrl-C) no new requests
// are sent, those in flight get cfg.Grace, the bundle is finalized with
// complete=false, and Run returns ErrInterrupted with the partial outcome.
func (s *Session) Run(ctx context.Context) (*Outcome, error) {
	cfg, say := &s.cfg, s.say
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Proxy != "" {
		return s.runProxy(ctx) // capture/proxy.go
	}
	if cfg.ProbesOnly {
		return s.runProbesOnly(ctx)
	}
	// Check everything before the target sees a request or a file is written.
	items, samples, bad, err := s.prepareDataset(ctx)
	if err != nil {
		return nil, err
	}
	if err := prepareRawDir(cfg.SaveRawDir); err != nil {
		return nil, err
	}
	items = loopItems(cfg, items)
	if s.replay, err = loadReplay(cfg, items); err != nil {
		return nil, err
	}
	s.diarize = newDiarizeRun(cfg, samples)
	models, err := checkTarget(ctx, cfg, say)
	if err != nil {
		return nil, err
	}
	if err := s.pickModel(models); err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.open(ctx, models, samples, len(bad)); err != nil {
		return nil, err
	}
	client, err := newClient(cfg, newHTTPClient(cfg, items))
	if err != nil {
		return nil, err
	}
	prog := newProgress(s.stderr, cfg.Quiet)
	// Each pass is summarised as its records come (summary.Acc, s.acc), so
	// the driver keeps none unless a pass's records are needed whole after
	// it: --save-raw-dir, transcribe-diarize's scoring.
	drv := &driver.Driver{
		DropRecords: cfg.SaveRawDir == "" && s.diarize == nil,
		Client:      client,
		Items:       items,
		Model:       cfg.Model,
		Lang:        cfg.Lang,
		Timeout:     sessionTimeout(cfg, items),
		Tracer:      &s.tr.awaited,
		OnRecord: func(r *model.Request) {
			if s.obs != nil {
				s.obs.RequestDone(r)
			}
			prog.done(r.Status == model.StatusOK)
			// The summary takes the records in requests.jsonl's order, so
			// that summary.Passes over the file gives the same numbers to
			// the last digit.
			s.accMu.Lock()
			err := s.w.Append(bundle.RequestsFile, r)
			if s.acc != nil {
				s.acc.Add(r)
			}
			s.accMu.Unlock()
			if err != nil {
				s.noteWriteErr(err)
			}
		},
		OnLags: func(l *model.LagSeries) {
			if err := s.w.Append(bundle.RealtimeLagsFile, l); err != nil {
				s.noteWriteErr(err)
			}
		},
	}
	if s.obs != nil {
		drv.OnStart = s.obs.RequestStarted
	}

	// Requests in flight outlive ctx by cfg.Grace.
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReq()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(cfg.Grace, cancelReq) })()

	results, interrupted, err := s.runPasses(ctx, reqCtx, drv, prog, say)
	if err != nil {
		return nil, err
	}
	var search *bundle.SearchResult
	if s.search != nil {
		// A search runs its levels out of order (1, 2, 4, 3): the
		// manifest's passes and results.json list them in order of load,
		// so every table and the knee read them so; search.json keeps the
		// order they ran in, and each pass its own times.
		slices.SortStableFunc(results.Results, func(a, b model.LevelResult) int { return model.CompareLevels(a.Level, b.Level) })
		slices.SortStableFunc(s.manifest.Levels, func(a, b model.LevelRun) int { return model.CompareLevels(a.Level, b.Level) })
		if err := s.w.WriteJSON(bundle.SearchFile, s.search.res); err != nil {
			return nil, err
		}
		search = &s.search.res
	}
	if err := s.diarize.write(s.w, say); err != nil {
		s.noteWriteErr(err) // the bundle is still finalized, marked incomplete
	}
	return s.finalize(ctx, &results, interrupted, search)
}

// open is the skeleton of a driven or a proxy capture: the bundle and its
// manifest (the target's models, the dataset's fingerprint, the entries
// skipped), the probes (here, or on the agents), the tracing side.
func (s *Session) open(ctx context.Context, models any, samples []dataset.Sample, bad int) (err error) {
	cfg, dsSHA := &s.cfg, ""
	if len(samples) > 0 {
		if dsSHA, err = dataset.Fingerprint(samples); err != nil {
			return fmt.Errorf("fingerprinting dataset: %w", err)
		}
	}
	if err := s.skeleton.open(ctx, buildFingerprint(cfg.Target, models, dsSHA, len(samples)), bad, s.extra); err != nil {
		return err
	}
	s.tr, err = startTracing(ctx, cfg, s.w, s.manifest.Fingerprint, s.say)
	return err
}

// pickModel names the server's one model in the requests when --model is
// empty, as vLLM's own benchmark does (it takes the first): an
// OpenAI-style server may refuse a request that names no model. With
// several listed it picks none, and says so; vLLM's realtime session,
// which must name one, is then an error. The manifest records the model
// sent.
func (s *Session) pickModel(models any) error {
	cfg := &s.cfg
	if cfg.Model != "" || cfg.Protocol == "funasr-ws" {
		return nil
	}
	ids := (model.Fingerprint{TargetModels: models}).ModelIDs()
	switch {
	case len(ids) == 1:
		cfg.Model = ids[0]
		s.note(fmt.Sprintf("model: %s (the one model the server lists at /v1/models; --model names another)", ids[0]))
	case cfg.Protocol == "openai-realtime" && cfg.Dialect == protocol.DialectVLLM:
		listed := "none"
		if len(ids) > 0 {
			listed = fmt.Sprintf("%d (%s)", len(ids), strings.Join(ids, ", "))
		}
		return fmt.Errorf("%w: --realtime-dialect vllm needs --model: vLLM's session.update names one, and the server's /v1/models lists %s", ErrInvalidConfig, listed)
	case len(ids) > 1:
		s.note(fmt.Sprintf("model: none named (the server lists %d at /v1/models: %s; --model picks one)", len(ids), strings.Join(ids, ", ")))
	}
	return nil
}

// SyntheticWeightsNote is said wherever a capture's WER is shown when the
// server answered with random weights.
const SyntheticWeightsNote = "synthetic weights (the server's /v1/models says synthetic_weights): WER is not a measurement"

// syntheticWeights tells whether a /v1/models answer says the server runs
// random weights ({"data":[{"synthetic_weights":true,...}]}).
func syntheticWeights(models any) bool {
	m, _ := models.(map[string]any)
	data, _ := m["data"].([]any)
	return slices.ContainsFunc(data, func(d any) bool {
		e, ok := d.(map[string]any)
		return ok && e["synthetic_weights"] == true
	})
}

// runPasses runs every level: the warmup pass if asked, then the scored
// repeats, each a probe period. It stops after the pass in which ctx was
// cancelled (interrupted), and summarises only passes that ran whole.
func (s *Session) runPasses(ctx, reqCtx context.Context, drv *driver.Driver, prog *progress, say func(string)) (model.Results, bool, error) {
	cfg := &s.cfg
	results := model.Results{Schema: model.Schema, Results: []model.LevelResult{}}
	if cfg.Search != nil {
		s.search = newSearcher(cfg)
	}
	if cfg.SoloAdded() {
		s.note("adding a c=1 level first (--solo): each sample's service alone, the baseline of the diagnosis seen from outside")
	}
	for lv := range s.levels() {
		sent := 0
		lv, dl := s.passLevel(lv) // the pass's length, a replayed schedule (capture/passlen.go)
		var passes []model.PassMetrics
		first := 1
		if cfg.Warmup {
			first = 0 // repeat 0 is the warmup pass
		}
		for repeat := first; repeat <= cfg.Repeats; repeat++ {
			warmup := repeat == 0
			if ctx.Err() != nil {
				return results, true, nil
			}
			prog.begin(lv, repeat, cfg.Repeats, warmup, dl.Planned(len(drv.Items)))
			period := probe.Period{Level: lv.Name, Repeat: repeat, Warmup: warmup, StartUnixNs: time.Now().UnixNano()}
			s.pset.begin(period)
			acc := summary.NewAcc(cfg.SLO)
			s.accMu.Lock()
			s.acc = acc
			s.accMu.Unlock()
			res := drv.Run(ctx, reqCtx, dl, repeat, warmup)
			period.EndUnixNs = time.Now().UnixNano()
			s.end(context.WithoutCancel(ctx), period)
			sent += res.Done
			pm := acc.Pass(res.WallS()) // the pass's metrics and goodput (summary.Acc) from its records, as they came
			pm.Level, pm.Concurrency, pm.Rate, pm.Repeat = lv.Name, lv.Concurrency, lv.Rate, repeat
			prog.end(pm)
			s.recordDriver(lv, repeat, warmup, res, say) // did the driver keep up, and its schedule (capture/selfcheck.go)
			// A pass cut short is recorded in requests.jsonl but not
			// summarised as if it were complete.
			stopped := ctx.Err() != nil
			s.mu.Lock()
			s.manifest.Levels = append(s.manifest.Levels, model.LevelRun{
				Level: lv.Name, Concurrency: lv.Concurrency, Rate: lv.Rate,
				Repeat: repeat, Warmup: warmup,
				StartUnixNs: res.Start.UnixNano(), EndUnixNs: res.End.UnixNano(), WallS: res.WallS(),
			})
			if !warmup && !stopped {
				s.manifest.Coverage.Add(pm.Coverage)
				if gap := CoverageGap(pm.Coverage); gap != "" {
					s.manifest.Incomplete = append(s.manifest.Incomplete, fmt.Sprintf("%s repeat %d: %s", lv.Name, repeat, gap))
				}
			}
			s.mu.Unlock()
			if err := s.saveManifest(); err != nil {
				return results, false, err
			}
			if !warmup && !stopped && cfg.SaveRawDir != "" {
				if err := writeRaw(cfg.SaveRawDir, lv, repeat, drv.Items, res.Records); err != nil {
					return results, false, err
				}
			}
			if stopped {
				return results, true, nil
			}
			if !warmup {
				passes = append(passes, pm)
				s.diarize.add(lv, repeat, res)
			}
		}
		if len(passes) > 0 {
			results.Results = append(results.Results, summary.Level(passes))
			if s.search != nil {
				s.search.record(results.Results[len(results.Results)-1], sent)
			}
		}
	}
	return results, false, nil
}

// prepareDataset loads, limits and preflights the dataset, then reads the
// audio of every good sample into memory.
func (s *Session) prepareDataset(ctx context.Context) ([]driver.Item, []dataset.Sample, []dataset.BadEntry, error) {
	cfg := &s.cfg
	ds, err := dataset.LoadWith(cfg.Dataset, dataset.Options{Lang: cfg.Lang, Split: cfg.Split, Columns: cfg.Columns})
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
	files := audioFiles{}
	for i, smp := range good {
		var b []byte
		var err error
		if smp.Inline != nil {
			b, err = smp.ReadAudio() // inline audio: its bytes, no copy
		} else {
			b, err = files.read(smp.Audio) // each distinct file once
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: reading %s: %v", ErrBadInput, smp.Where(), err)
		}
		items[i] = driver.Item{
			SampleID:    smp.ID,
			FileName:    smp.FileName(),
			ContentType: audio.ContentType(smp.Info.Format),
			Audio:       b,
			AudioS:      smp.Info.DurationS,
			Ref:         smp.Text,
			Lang:        smp.Lang,
		}
	}
	return items, good, bad, nil
}

func newHTTPClient(cfg *Config, items []driver.Item) *http.Client {
	maxConns := slices.Max(append([]int{64}, cfg.Concurrency...))
	if cfg.Search != nil && len(cfg.Concurrency) > 0 {
		maxConns = max(maxConns, int(cfg.Search.limit(false)))
	}
	// http:// targets go through the driver's own HTTP/1.1 client; https
	// through net/http's transport, its write buffer sized for the uploads
	tr := protocol.NewH1Transport(maxConns)
	fb := tr.Fallback.(*http.Transport)
	largest := 0
	for _, it := range items {
		largest = max(largest, len(it.Audio))
	}
	fb.WriteBufferSize = protocol.WriteBufferFor(largest)
	return &http.Client{Transport: tr}
}
