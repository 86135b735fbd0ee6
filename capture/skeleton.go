package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
)

// skeleton is the life cycle every capture shares, whatever its source of
// requests (the driver's passes, the proxy's window, or none: probes
// only): the bundle and its manifest, the probes, the tracing receiver,
// the probe periods, and one finalize that ends it all and runs the one
// end-of-capture hook. Session and ProbeRun embed it; its methods may be
// called from several goroutines (mu guards the manifest and writeErr).
type skeleton struct {
	cfg      Config // the capture's
	stdout   io.Writer
	stderr   io.Writer
	obs      Observer // Session.Observe; nil: nobody
	onFinish Finish   // Session.OnFinish; nil: no tables, no report

	mu       sync.Mutex // guards manifest, writeErr and w's manifest rewrites
	w        *bundle.Writer
	manifest model.Manifest
	writeErr error
	pset     *probeSet
	tr       *tracing // the receiver and client spans; nil in a probe run
}

func (k *skeleton) say(m string) { fmt.Fprintln(k.stderr, m) }

// note says m unless --quiet: what the capture found and where it wrote
// it, not a problem (--quiet leaves errors, warnings and the tables).
func (k *skeleton) note(m string) {
	if !k.cfg.Quiet {
		k.say(m)
	}
}

// open creates the bundle, writes its manifest (complete: false) and
// starts the probes --probes asks for (on the agents with --agent), and
// extra, on the target. What it opened is released by close, or by
// finalize.
func (k *skeleton) open(ctx context.Context, fp model.Fingerprint, bad int, extra []probe.Probe) error {
	probes, err := buildProbes(&k.cfg)
	if err != nil {
		return err
	}
	if len(k.cfg.Agents) > 0 {
		probes = agentProbes(&k.cfg) // the probes run on the agents, not here
	}
	if k.w, err = bundle.Create(k.cfg.Out, k.cfg.Overwrite); err != nil {
		return err
	}
	if k.manifest, err = newManifest(&k.cfg, fp, bad); err != nil {
		return err
	}
	if err := k.saveManifest(); err != nil {
		return err
	}
	k.pset = k.startProbes(ctx, append(probes, extra...))
	return k.saveManifest()
}

// newManifest is the manifest written before the first request: complete
// and finished stay false until the capture ends cleanly.
func newManifest(cfg *Config, fp model.Fingerprint, bad int) (model.Manifest, error) {
	rec, err := cfg.Record()
	if err != nil {
		return model.Manifest{}, err
	}
	start := time.Now()
	m := model.Manifest{
		Schema:      model.Schema,
		StartUnixNs: start.UnixNano(),
		Config:      rec,
		Fingerprint: fp,
		Levels:      []model.LevelRun{},
		Clock:       model.Clock{StartUnixNs: start.UnixNano(), StartMonoMinusWallNs: monoMinusWall()},
		Coverage:    model.Coverage{BadInput: bad},
	}
	if bad > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("%d dataset entries skipped by --skip-bad", bad))
	}
	if syntheticWeights(fp.TargetModels) {
		m.Notes = append(m.Notes, SyntheticWeightsNote)
	}
	return m, nil
}

// monoMinusWall returns CLOCK_MONOTONIC minus CLOCK_REALTIME in ns, the
// offset that converts monotonic (and BPF) timestamps to wall time.
func monoMinusWall() int64 {
	var mono unix.Timespec
	wall := time.Now().UnixNano()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0
	}
	return mono.Nano() - wall
}

// close stops the probes and closes the bundle's files when the capture
// failed before finalize; after finalize it does nothing.
func (k *skeleton) close() {
	if k.pset != nil {
		k.pset.stop(k.say)
	}
	if k.w != nil {
		k.w.Close()
	}
}

// end ends the period p: the probes write its records, and the observer
// hears of it.
func (k *skeleton) end(ctx context.Context, p probe.Period) {
	k.pset.end(ctx, p, k.say)
	if k.obs != nil {
		k.obs.PeriodEnded(p)
	}
}

// finalize ends a capture, once: it writes results.json (nil: none, a
// probe run), stops the probes and the tracing side, finalizes the
// manifest with its verdict, builds the bundle's tables (bundle/columns),
// and runs the end hook (Finish), whose tables it prints when the capture
// had requests, then search (--find-max).
func (k *skeleton) finalize(ctx context.Context, results *model.Results, interrupted bool, search *bundle.SearchResult) (*Outcome, error) {
	cfg, say := &k.cfg, k.say
	if results != nil {
		if err := k.w.WriteJSON(bundle.ResultsFile, results); err != nil {
			return nil, err
		}
	}
	pset := k.pset
	offsets := pset.clockOffsets()
	losses := pset.losses(say)
	pset.emptyReport(scoredPasses(k.manifest.Levels), say)
	bpfCost := pset.bpfReport(say)
	agents := pset.agents()
	pset.stop(say)
	for _, a := range agents { // what their probes lost, known once stopped
		if l := a.Losses(); l != "" {
			losses[a.Name()] = l
		}
	}
	var traceInfo map[string]any
	if k.tr != nil {
		traceInfo = k.tr.finish(ctx, k.w, say)
	}
	k.mu.Lock()
	m := &k.manifest
	m.EndUnixNs = time.Now().UnixNano()
	m.Clock.EndMonoMinusWallNs = monoMinusWall()
	if len(offsets) > 0 {
		m.Clock.Probes = offsets
	}
	maps.Copy(extra(m), traceInfo)
	if len(losses) > 0 {
		m.Extra["probe_losses"] = losses
	}
	if len(bpfCost) > 0 {
		m.Extra["probe_bpf"] = bpfCost
	}
	pset.recordGaps(m)
	recordAgents(m, agents)
	m.Interrupted = interrupted
	m.Finished = !interrupted
	if interrupted {
		m.Incomplete = append(m.Incomplete, "interrupted before the last pass finished")
	}
	if k.writeErr != nil {
		m.Incomplete = append(m.Incomplete, "bundle write error")
		m.Notes = append(m.Notes, "write error: "+k.writeErr.Error())
	}
	m.Complete = len(m.Incomplete) == 0
	k.mu.Unlock()
	if files, err := (&bundle.Bundle{Dir: cfg.Out}).Files(); err == nil {
		k.manifest.Files = files
	}
	out := &Outcome{Manifest: k.manifest}
	if results != nil {
		out.Results = *results
	}
	err := k.saveManifest()
	k.w.Close()
	if err != nil {
		return out, err
	}
	// The bundle's tables (trace/tables: Parquet, for the analysis engine
	// and users' own tools), derived from the files just finished. Not
	// being able to build them is said, not fatal: the JSONL files are the
	// record, and the first analyze builds the tables again.
	if ts, err := columns.Open(cfg.Out); err != nil {
		say("tables: " + err.Error())
	} else if err := ts.Wait(); err != nil {
		say("tables: " + err.Error())
	}
	f, err := k.runFinish(context.WithoutCancel(ctx), results != nil, search)
	if err != nil {
		return out, err
	}
	if f.Validity != nil {
		out.Manifest.Extra = maps.Clone(out.Manifest.Extra)
		extra(&out.Manifest)["validity"] = f.Validity
	}
	k.note("bundle: " + cfg.Out)
	if interrupted {
		return out, ErrInterrupted
	}
	return out, errors.Join(k.writeErr, f.Failed)
}

// scoredPasses counts the scored passes that ran.
func scoredPasses(levels []model.LevelRun) int {
	n := 0
	for _, l := range levels {
		if !l.Warmup {
			n++
		}
	}
	return n
}

func (k *skeleton) noteWriteErr(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.writeErr == nil {
		k.writeErr = err
		fmt.Fprintf(k.stderr, "asrprof: %v (the capture goes on)\n", err)
	}
}

// extra is m.Extra, made when nil.
func extra(m *model.Manifest) map[string]any {
	if m.Extra == nil {
		m.Extra = map[string]any{}
	}
	return m.Extra
}

func (k *skeleton) saveManifest() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.w.WriteJSON(bundle.ManifestFile, k.manifest)
}
