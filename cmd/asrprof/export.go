package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/trace/export"
)

const exportUsage = `Usage: asrprof export DIR [--otlp URL] [--perfetto FILE.json] [flags]

Sends a capture bundle's per-request traces to a trace viewer.

--otlp posts them to an OTLP/HTTP endpoint (Jaeger, an OpenTelemetry
Collector...) as protobuf, in batches, with retries: each request's client
span is the root of the server's spans, its stage decomposition adds one
span per stage, and where its latency went (the attribution analysis) one
span per state under a "where the time went" span. --perfetto writes
Chrome trace-event JSON for ui.perfetto.dev: a track per in-flight client
slot, the server's spans, arrows from requests to server spans, the
stages, the states, GPU and CPU counters. The stages and states are
derived here, with the stage preset of --stages (the boundaries of the
bundle's tables/stages.parquet). See docs/JAEGER.md.

Examples:
  asrprof export runs/demo --otlp http://127.0.0.1:4318
  asrprof export runs/demo --otlp http://127.0.0.1:4318 --sample 10
  asrprof export runs/demo --perfetto runs/demo.perfetto.json

Flags:
`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", exportUsage, stderr)
	es := export.DefaultSettings()
	option.DefineAll(fs, export.Options(), &es, nil)
	af := analysisFlags(fs, "stages")
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || pos[0] == "":
		return fmt.Errorf("%w: give the bundle directory", errUsage)
	case es.OTLP == "" && es.Perfetto == "":
		return fmt.Errorf("%w: give --otlp URL, --perfetto FILE, or both", errUsage)
	case es.Sample < 1:
		return fmt.Errorf("%w: --sample must be at least 1", errUsage)
	case es.RateLimit < 0:
		return fmt.Errorf("%w: --rate-limit must not be negative", errUsage)
	case es.Batch < 1:
		return fmt.Errorf("%w: --batch must be at least 1", errUsage)
	}
	dir := pos[0]
	if err := checkStages(af.Stages); err != nil {
		return err
	}
	if es.OTLP != "" {
		if _, err := export.TracesURL(es.OTLP); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if err := checkBundle(dir); err != nil {
		return err
	}
	b, err := bundle.Open(dir)
	if err != nil {
		return err
	}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		return fmt.Errorf("%s: reading requests: %w", dir, err)
	}
	derived, err := exportDerived(ctx, dir, af.Stages, len(reqs))
	if err != nil {
		return err
	}
	if es.Perfetto != "" {
		if err := exportPerfetto(b, es.Perfetto, derived, stdout); err != nil {
			return err
		}
	}
	if es.OTLP == "" {
		return nil
	}
	cfg := export.OTLPConfig{
		URL:        es.OTLP,
		PlanConfig: export.PlanConfig{BatchSpans: es.Batch, Sample: es.Sample, Stages: derived.stages, States: derived.states},
		RateLimit:  es.RateLimit,
		Timeout:    es.Timeout,
	}
	if !es.Quiet {
		var last time.Time
		cfg.Progress = func(st export.OTLPStats) {
			done := st.SentBatches + st.FailedBatches
			if time.Since(last) < time.Second && done < st.Plan.Batches {
				return
			}
			last = time.Now()
			fmt.Fprintf(stderr, "otlp: %d/%d spans sent, batch %d/%d, %d retries, %d failed\n",
				st.SentSpans, st.Plan.Spans, done, st.Plan.Batches, st.Retries, st.FailedBatches)
		}
	}
	st, err := export.OTLP(ctx, b, cfg)
	out := stdout
	if es.Perfetto == "-" {
		out = stderr // keep stdout valid JSON
	}
	printOTLP(out, st)
	if err != nil {
		return err
	}
	if st.FailedBatches > 0 {
		fmt.Fprintf(stderr, "asrprof export: warning: %d of %d batches (%d spans) were not accepted: %s\n",
			st.FailedBatches, st.Plan.Batches, st.FailedSpans, st.LastError)
	}
	return nil
}

// derived is what the exporters draw that the analyses compute (trace/
// export may not import analysis): each request's stages and its states
// (where its latency went), indexed like requests.jsonl.
type derived struct {
	stages, states [][]export.Stage
}

// exportDerived computes the stages and the states of a bundle of n
// requests with the stage preset stages.
func exportDerived(ctx context.Context, dir, stages string, n int) (derived, error) {
	d := derived{stages: make([][]export.Stage, n), states: make([][]export.Stage, n)}
	c, err := analysis.Load(dir)
	if err != nil {
		return d, err
	}
	s := analysis.NewSession(c, analysis.Options{Stages: stages, Timeout: analysis.DefaultTimeout})
	recs, err := analysis.StageRecords(ctx, s)
	if err != nil {
		return d, fmt.Errorf("deriving the stages: %w", err)
	}
	for _, r := range recs {
		if r.Request >= n {
			return d, fmt.Errorf("%s: the stages name request %d of %d", dir, r.Request, n)
		}
		d.stages[r.Request] = append(d.stages[r.Request], export.Stage{Name: r.Stage, StartUnixNs: r.StartUnixNs, EndUnixNs: r.EndUnixNs})
	}
	a, err := analysis.Attribution(ctx, s)
	if err != nil {
		return d, fmt.Errorf("computing where the time went: %w", err)
	}
	telemetry := false
	for _, r := range a.Requests {
		if r.Index >= n {
			return d, fmt.Errorf("%s: the attribution names request %d of %d", dir, r.Index, n)
		}
		telemetry = telemetry || r.Telemetry
		ss := make([]export.Stage, len(r.Segments))
		for k, g := range r.Segments {
			ss[k] = export.Stage{Name: engine.AttributionStates[g.State], StartUnixNs: g.StartUnixNs, EndUnixNs: g.EndUnixNs}
		}
		d.states[r.Index] = ss
	}
	if telemetry {
		return d, nil
	}
	// No server telemetry: the states seen from outside, as the diagnosis
	// does (docs/ANALYSIS.md, "Seen from outside").
	bb, err := c.BlackBox()
	if err != nil {
		return d, fmt.Errorf("computing where the time went, seen from outside: %w", err)
	}
	for _, r := range bb.Requests {
		if r.Index >= n {
			return d, fmt.Errorf("%s: the black box names request %d of %d", dir, r.Index, n)
		}
		ss := make([]export.Stage, len(r.Segments))
		for k, g := range r.Segments {
			ss[k] = export.Stage{Name: engine.BlackBoxStates[g.State], StartUnixNs: g.StartUnixNs, EndUnixNs: g.EndUnixNs}
		}
		d.states[r.Index] = ss
	}
	return d, nil
}

func exportPerfetto(b *bundle.Bundle, path string, d derived, stdout io.Writer) error {
	in, err := export.ReadPerfettoInput(b)
	if err != nil {
		return err
	}
	in.Stages, in.States = d.stages, d.states
	tf, st := export.BuildPerfetto(in)
	if path == "-" {
		return export.WriteTraceFile(stdout, tf)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := export.WriteTraceFile(f, tf); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	var slots []string
	for _, l := range slices.Sorted(maps.Keys(st.ClientSlots)) {
		slots = append(slots, fmt.Sprintf("%s: %d", l, st.ClientSlots[l]))
	}
	fmt.Fprintf(stdout, "perfetto: wrote %s: %d requests (client tracks %s), %d server spans, %d stage slices, %d state slices, %d flows, %d counter points; open it at https://ui.perfetto.dev\n",
		path, st.Requests, strings.Join(slots, ", "), st.ServerSpans, st.StageSlices, st.StateSlices, st.Flows, st.Counters)
	if st.SchedSkip > 0 {
		fmt.Fprintf(stdout, "perfetto: %d rows of %s left out: their pass is not in the manifest or did not end (a capture stopped mid-pass)\n", st.SchedSkip, bundle.SchedFile)
	}
	return nil
}

func printOTLP(w io.Writer, st export.OTLPStats) {
	rate := 0.0
	if s := st.Elapsed.Seconds(); s > 0 {
		rate = float64(st.SentSpans) / s
	}
	fmt.Fprintf(w, "otlp: %d spans sent to %s (%d requests, %d stage spans, %d state spans) in %d batches, %.1fs (%.0f spans/s); retries %d, failed batches %d (%d spans), rejected spans %d\n",
		st.SentSpans, st.URL, st.Plan.Requests, st.Plan.StageSpans, st.Plan.StateSpans, st.SentBatches, st.Elapsed.Seconds(), rate,
		st.Retries, st.FailedBatches, st.FailedSpans, st.Rejected)
	if st.Plan.Truncated {
		fmt.Fprintln(w, "otlp: note: the last record of spans.otlp was cut short (a killed capture) and was skipped")
	}
}
