package capture

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/bundle/events"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/otlp"
	"github.com/asrprof/asrprof/trace/spans"
)

// tracing is the capture's span and event side: the OTLP receiver that
// takes the server's spans, the client spans, and the server's
// request-profile events.
type tracing struct {
	cfg      *Config
	store    *spans.Writer
	recv     *otlp.Receiver
	client   *clientspan.Tracer
	profiler *events.Profiler
	eventDir string // where the server writes its event files (--profile-url)
}

func startTracing(ctx context.Context, cfg *Config, w *bundle.Writer, fp model.Fingerprint, say func(string)) (*tracing, error) {
	t := &tracing{cfg: cfg, store: spans.NewWriter(w)}
	t.client = clientspan.New(t.store, map[string]string{
		"asrprof.capture": filepath.Base(cfg.Out),
		"host.name":       fp.Hostname,
		"asrprof.target":  cfg.Target,
	})
	if otlp.Enabled(cfg.OTLPHTTP) || otlp.Enabled(cfg.OTLPGRPC) {
		t.recv = otlp.NewReceiver(otlp.Config{HTTPAddr: cfg.OTLPHTTP, GRPCAddr: cfg.OTLPGRPC, AllowRemote: cfg.OTLPAllowRemote},
			func(td ptrace.Traces) error { return t.store.Write(td) })
		if err := t.recv.Start(ctx); err != nil {
			t.client.Shutdown(ctx)
			return nil, fmt.Errorf("%w: OTLP receiver: %v (choose other addresses with --otlp-http/--otlp-grpc, or 'off')", ErrInvalidConfig, err)
		}
		if wmsg := t.recv.Warning(); wmsg != "" {
			say("warning: " + wmsg)
		}
		if ep := t.recv.HTTPEndpoint(); ep != "" && !cfg.Quiet {
			say("OTLP receiver: give the server OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + ep)
		}
		if ga := t.recv.GRPCAddr(); ga != "" && !cfg.Quiet {
			say("OTLP receiver (gRPC): " + ga)
		}
	}
	if cfg.ProfileURL != "" {
		dir, err := filepath.Abs(w.Path("server-events"))
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		t.eventDir = dir
		t.profiler = &events.Profiler{URL: cfg.ProfileURL}
		if err := t.profiler.Start(ctx, filepath.Base(cfg.Out), dir); err != nil {
			say(fmt.Sprintf("request profiler: could not start at %s (%v); going on without server events", cfg.ProfileURL, err))
			t.profiler = nil
		}
	}
	return t, nil
}

// finish waits for late spans (exporters batch), stops the receiver and the
// profiler, imports the server's events, and joins them to the requests.
// It returns the manifest's "join" and "otlp" sections.
func (t *tracing) finish(ctx context.Context, w *bundle.Writer, say func(string)) map[string]any {
	out := map[string]any{}
	if err := t.client.Shutdown(context.WithoutCancel(ctx)); err != nil {
		say("client spans: " + err.Error())
	}
	if t.recv != nil {
		t.waitQuiet(ctx)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		t.recv.Stop(sctx)
		cancel()
		out["otlp"] = t.recv.Stats()
	}
	if t.profiler != nil {
		if err := t.profiler.Stop(context.WithoutCancel(ctx)); err != nil {
			say("request profiler: stop: " + err.Error())
		}
	}
	for _, dir := range []string{t.eventDir, t.cfg.EventsDir} {
		if dir == "" {
			continue
		}
		st, err := events.ImportDir(dir, w)
		if err != nil {
			say(fmt.Sprintf("events: importing %s: %v", dir, err))
			continue
		}
		for _, p := range st.Problems {
			say("events: " + p)
		}
		out["events_import"] = st
	}
	// The join counts server spans only; when the receiver took none, the
	// span store holds client spans alone and is not read back.
	serverSpans := t.recv != nil && t.recv.Stats().Spans > 0
	js, err := joinBundle(w.Dir(), serverSpans)
	if err != nil {
		say("join: " + err.Error())
		return out
	}
	out["join"] = js
	if msg := js.Warning(); msg != "" {
		say("warning: " + msg)
	}
	return out
}

// waitQuiet returns once no new server span has arrived for a second, or
// after the span grace.
func (t *tracing) waitQuiet(ctx context.Context) {
	deadline := time.Now().Add(t.cfg.SpanGrace)
	last, lastChange := t.recv.Stats().Spans, time.Now()
	for time.Now().Before(deadline) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		if n := t.recv.Stats().Spans; n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= time.Second {
			return
		}
	}
}

// joinBundle joins a bundle's requests to its spans (when serverSpans:
// without server spans, the client spans change no count) and events. The
// requests are read with the tables' JSONL scanner (no reflection, on
// every core), as the bundle's tables read them.
func joinBundle(dir string, serverSpans bool) (join.Stats, error) {
	b := &bundle.Bundle{Dir: dir}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		return join.Stats{}, err
	}
	var ss []spans.Span
	if serverSpans {
		ss, err = spans.ReadAll(b.Path(bundle.SpansFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return join.Stats{}, err
		}
	}
	evs, err := bundle.ReadAll[bundle.Event](b.Path(bundle.EventsFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return join.Stats{}, err
	}
	return join.Build(reqs, ss, evs).Stats(), nil
}
