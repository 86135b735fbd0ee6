package capture

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/asrprof/asrprof/bench/protocol"
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
	awaited  awaited // the driver's and the proxy's tracer: client, noting what to wait for
	profiler *events.Profiler
	eventDir string // where the server writes its event files (--profile-url)
}

// awaited is the client tracer, noting which requests' server spans the
// capture waits for at its end: each span id sent in a traceparent, less
// the requests the server did not answer with success (a server that turns
// a request away may trace none of it) and those whose span a received
// span names as its parent (the server's entry span, which ends after its
// children). An exporter that batches sends a request's spans up to its
// interval after the request (the OpenTelemetry SDKs' default: 5 s).
type awaited struct {
	protocol.Tracer
	mu       sync.Mutex
	ids      map[pcommon.SpanID]struct{} // nil once over maxAwaited: given up
	servers  bool                        // a server span has arrived
	answered time.Time                   // when the first awaited request was answered
}

// maxAwaited bounds the ids awaited at once: past it the server is taken
// for one whose spans do not name the client's (a new trace per request,
// or sampled), and the capture waits for a second of quiet alone.
const maxAwaited = 1 << 16

func (a *awaited) Start(ctx context.Context, rec *model.Request) (string, func(*model.Request)) {
	tp, end := a.Tracer.Start(ctx, rec)
	var id pcommon.SpanID
	if len(tp) != 55 { // 00-<trace id>-<span id>-01
		return tp, end
	}
	if _, err := hex.Decode(id[:], []byte(tp[36:52])); err != nil {
		return tp, end
	}
	a.mu.Lock()
	if a.ids != nil {
		a.ids[id] = struct{}{}
		if len(a.ids) > maxAwaited {
			a.ids = nil
		}
	}
	a.mu.Unlock()
	return tp, func(rec *model.Request) {
		a.mu.Lock()
		if rec.HTTPStatus/100 != 2 && rec.HTTPStatus != 101 { // 101: a WebSocket session
			delete(a.ids, id)
		} else if a.answered.IsZero() {
			a.answered = time.Now()
		}
		a.mu.Unlock()
		end(rec)
	}
}

// saw notes the parents of the server's spans in td.
func (a *awaited) saw(td ptrace.Traces) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.servers = true // the receiver hands over no empty td
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				delete(a.ids, sp.ParentSpanID())
			}
		}
	}
}

// done is whether the capture need not wait for more of the server's
// spans: every answered request's has come, or none came at all though
// the first answer is grace old (an exporter that batches at most every
// grace would have sent its spans by now: the server sends none). A
// capture shorter than an exporter's interval still waits for its batch.
func (a *awaited) done(grace time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids) == 0 || !a.servers && time.Since(a.answered) >= grace
}

// waiting says what the capture waits for, and how long it may, of left.
func (a *awaited) waiting(grace, left time.Duration) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.servers {
		left = min(left, grace-time.Since(a.answered))
		return fmt.Sprintf("waiting up to %s for the server's first spans: an exporter that batches sends them seconds late (--span-grace)", left.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("waiting up to %s for the server's spans of %d answered requests (--span-grace)", left.Round(100*time.Millisecond), len(a.ids))
}

func startTracing(ctx context.Context, cfg *Config, w *bundle.Writer, fp model.Fingerprint, say func(string)) (*tracing, error) {
	t := &tracing{cfg: cfg, store: spans.NewWriter(w)}
	t.client = clientspan.New(t.store, map[string]string{
		"asrprof.capture": filepath.Base(cfg.Out),
		"host.name":       fp.Hostname,
		"asrprof.target":  cfg.Target,
	})
	t.awaited = awaited{Tracer: t.client, ids: map[pcommon.SpanID]struct{}{}}
	if otlp.Enabled(cfg.OTLPHTTP) || otlp.Enabled(cfg.OTLPGRPC) {
		t.recv = otlp.NewReceiver(otlp.Config{HTTPAddr: cfg.OTLPHTTP, GRPCAddr: cfg.OTLPGRPC, AllowRemote: cfg.OTLPAllowRemote},
			func(td ptrace.Traces) error {
				t.awaited.saw(td)
				return t.store.Write(td)
			})
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
		t.waitQuiet(ctx, say)
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

// waitQuiet returns once no new server span has arrived for a second and
// every answered request's entry span has (or none came at all, the first
// answer a span grace ago: a server that sends none), or after the span
// grace. A second of quiet alone lost the last batch of an exporter that
// sends every 5 s, and all of a capture shorter than that.
// Past the second it says what it waits for, once (not with --quiet).
func (t *tracing) waitQuiet(ctx context.Context, say func(string)) {
	deadline := time.Now().Add(t.cfg.SpanGrace)
	last, lastChange := t.recv.Stats().Spans, time.Now()
	told := t.cfg.Quiet
	for time.Now().Before(deadline) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		if n := t.recv.Stats().Spans; n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= time.Second {
			if t.awaited.done(t.cfg.SpanGrace) {
				return
			}
			if !told {
				say(t.awaited.waiting(t.cfg.SpanGrace, time.Until(deadline)))
				told = true
			}
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
