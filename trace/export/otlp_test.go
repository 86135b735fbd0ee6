package export

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/otlp"
	"github.com/asrprof/asrprof/trace/spans"
)

func TestTracesURL(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces", false},
		{"http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces", false},
		{"http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces", false},
		{"https://collector.example/otlp/", "https://collector.example/otlp/v1/traces", false},
		{"127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces", false},
		{"", "", true},
		{"grpc://127.0.0.1:4317", "", true},
		{"http://", "", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := TracesURL(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("TracesURL(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if got != tc.want {
				t.Errorf("TracesURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// collect runs Batches and returns the flattened spans, the batches'
// sizes and, per span id, its resource attributes.
func collect(t *testing.T, dir string, cfg PlanConfig) (Plan, []spans.Span, []int, map[string]map[string]any) {
	t.Helper()
	var all []spans.Span
	var sizes []int
	res := map[string]map[string]any{}
	p, err := newPlanner(openBundle(t, dir), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.run(func(td ptrace.Traces) error {
		sizes = append(sizes, td.SpanCount())
		forEachSpan(td, func(_, _ int, rs ptrace.ResourceSpans, _ ptrace.ScopeSpans, sp ptrace.Span) error {
			res[sp.SpanID().String()] = rs.Resource().Attributes().AsRaw()
			return nil
		})
		all = append(all, spans.Flatten(td)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p.plan, all, sizes, res
}

func TestBatches(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap-small")
	sb := writeSmallBundle(t, dir, 7)
	plan, all, sizes, res := collect(t, dir, sb.plan(10))

	want := len(sb.reqs) * sb.perTrace
	if plan.Spans != want || len(all) != want {
		t.Fatalf("plan %d spans, sent %d, want %d", plan.Spans, len(all), want)
	}
	if plan.StageSpans != len(sb.reqs)*len(sb.stages[0]) || plan.Requests != len(sb.reqs) {
		t.Errorf("plan = %+v, want %d stage spans and %d requests", plan, len(sb.reqs)*len(sb.stages[0]), len(sb.reqs))
	}
	if len(sizes) != plan.Batches || plan.Batches != (want+9)/10 {
		t.Errorf("%d batches (plan %d), want %d", len(sizes), plan.Batches, (want+9)/10)
	}
	for i, n := range sizes {
		if n > 10 || (n < 10 && i != len(sizes)-1) {
			t.Errorf("batch %d has %d spans, want 10 (less only in the last)", i, n)
		}
	}
	levels := map[string]string{}
	for _, r := range sb.reqs {
		levels[r.TraceID] = r.Level
	}
	stagesSeen := 0
	for _, s := range all {
		if got := s.Attrs[clientspan.AttrLevel]; got != levels[s.TraceID] {
			t.Errorf("span %s %q: %s = %v, want %q", s.SpanID, s.Name, clientspan.AttrLevel, got, levels[s.TraceID])
		}
		r := res[s.SpanID]
		if r[AttrCapture] != "cap-small" || r[AttrHost] != "client-box" || r[AttrTarget] != "http://127.0.0.1:18000" {
			t.Errorf("span %q resource = %v, want the capture's attributes", s.Name, r)
		}
		if s.Service == StageService {
			stagesSeen++
			if s.ParentSpanID != sb.clientID[s.TraceID] {
				t.Errorf("stage span %q parent = %s, want the client span %s", s.Name, s.ParentSpanID, sb.clientID[s.TraceID])
			}
			if s.Attrs[AttrStage] != s.Name || s.Attrs[AttrSynthesized] != true {
				t.Errorf("stage span attrs = %v", s.Attrs)
			}
		}
		if s.Name == srvRoot && s.ParentSpanID != sb.clientID[s.TraceID] {
			t.Errorf("server root parent = %s, want the client span %s", s.ParentSpanID, sb.clientID[s.TraceID])
		}
	}
	if stagesSeen != plan.StageSpans {
		t.Errorf("saw %d stage spans, planned %d", stagesSeen, plan.StageSpans)
	}
}

// TestBatchesSample checks that sampling keeps one request in N, each
// with its whole trace, on a bundle with several levels and warmup.
func TestBatchesSample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fx")
	truth, err := fixture.Write(dir, fixture.Config{
		Levels:          []fixture.SimLevel{{Concurrency: 1}, {Concurrency: 4}},
		Warmup:          true,
		RequestsPerPass: 20,
		ExtraSpans:      2,
		FailEvery:       7,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, full, _, _ := collect(t, dir, PlanConfig{})
	if len(full) != truth.Spans {
		t.Fatalf("unsampled export sent %d spans, the bundle has %d", len(full), truth.Spans)
	}
	perTrace := map[string]int{}
	for _, s := range full {
		perTrace[s.TraceID]++
	}
	plan, got, _, _ := collect(t, dir, PlanConfig{Sample: 5, BatchSpans: 64})
	if want := (truth.Requests + 4) / 5; plan.Requests != want {
		t.Errorf("sampled %d requests, want %d of %d", plan.Requests, want, truth.Requests)
	}
	kept := map[string]int{}
	for _, s := range got {
		kept[s.TraceID]++
	}
	if len(kept) == 0 || len(kept) > plan.Requests {
		t.Fatalf("%d traces sent for %d sampled requests", len(kept), plan.Requests)
	}
	for tid, n := range kept {
		if n != perTrace[tid] {
			t.Errorf("trace %s: %d of its %d spans sent, want all", tid, n, perTrace[tid])
		}
	}
	if len(got) != plan.Spans {
		t.Errorf("sent %d spans, planned %d", len(got), plan.Spans)
	}
}

// flaky serves OTLP through a real receiver, answering the first
// len(fail) requests with those status codes instead.
type flaky struct {
	mu    sync.Mutex
	fail  []int
	hits  atomic.Int64
	spans atomic.Int64
	h     http.Handler
}

func newFlaky(t *testing.T, fail ...int) (*flaky, string) {
	f := &flaky{fail: fail}
	rcv := otlp.NewReceiver(otlp.Config{}, func(td ptrace.Traces) error {
		f.spans.Add(int64(td.SpanCount()))
		return nil
	})
	f.h = rcv.Handler()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	f.mu.Lock()
	var code int
	if len(f.fail) > 0 {
		code, f.fail = f.fail[0], f.fail[1:]
	}
	f.mu.Unlock()
	if code != 0 {
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		http.Error(w, "try later", code)
		return
	}
	f.h.ServeHTTP(w, r)
}

func TestOTLPRetries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	sb := writeSmallBundle(t, dir, 4)
	f, url := newFlaky(t, 503, 429, 502)
	var progress int
	st, err := OTLP(context.Background(), openBundle(t, dir), OTLPConfig{
		URL:        url,
		PlanConfig: sb.plan(5),
		Backoff:    time.Millisecond,
		Progress:   func(OTLPStats) { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := len(sb.reqs) * sb.perTrace
	if st.SentSpans != want || int(f.spans.Load()) != want {
		t.Errorf("sent %d spans, endpoint got %d, want %d", st.SentSpans, f.spans.Load(), want)
	}
	if st.Retries != 3 || st.FailedBatches != 0 {
		t.Errorf("retries %d, failed %d; want 3 retries and no failure", st.Retries, st.FailedBatches)
	}
	if st.SentBatches != st.Plan.Batches || progress != st.Plan.Batches || int(f.hits.Load()) != st.Plan.Batches+3 {
		t.Errorf("batches sent %d, planned %d, progress calls %d, POSTs %d", st.SentBatches, st.Plan.Batches, progress, f.hits.Load())
	}
}

func TestOTLPNeverAccepted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	writeSmallBundle(t, dir, 2)
	b := openBundle(t, dir)

	t.Run("5xx", func(t *testing.T) {
		f, url := newFlaky(t, 500, 500, 500, 500, 500, 500, 500, 500)
		st, err := OTLP(context.Background(), b, OTLPConfig{URL: url, Backoff: time.Millisecond})
		if !errors.Is(err, ErrNeverAccepted) {
			t.Fatalf("err = %v, want ErrNeverAccepted", err)
		}
		if f.hits.Load() != DefaultMaxTries || st.Retries != DefaultMaxTries-1 || st.FailedBatches != 1 {
			t.Errorf("%d POSTs, %d retries, %d failed batches; want %d tries of one batch", f.hits.Load(), st.Retries, st.FailedBatches, DefaultMaxTries)
		}
	})
	t.Run("400 is not retried", func(t *testing.T) {
		f, url := newFlaky(t, 400, 400)
		_, err := OTLP(context.Background(), b, OTLPConfig{URL: url, Backoff: time.Millisecond})
		if !errors.Is(err, ErrNeverAccepted) || f.hits.Load() != 1 {
			t.Errorf("err = %v after %d POSTs, want ErrNeverAccepted after 1", err, f.hits.Load())
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		addr := "127.0.0.1:" + strconv.Itoa(fakeasr.FreePort(t)) // reserved, and nothing listens
		st, err := OTLP(context.Background(), b, OTLPConfig{URL: "http://" + addr, Backoff: time.Millisecond})
		if !errors.Is(err, ErrNeverAccepted) || st.Retries != DefaultMaxTries-1 {
			t.Errorf("err = %v, retries %d; want ErrNeverAccepted after %d retries", err, st.Retries, DefaultMaxTries-1)
		}
	})
}

// TestOTLPPartialFailure: once the endpoint has accepted a batch, a batch
// it refuses is counted and the export goes on.
func TestOTLPPartialFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	writeSmallBundle(t, dir, 3)
	f, url := newFlaky(t, 0, 400)
	st, err := OTLP(context.Background(), openBundle(t, dir), OTLPConfig{URL: url, PlanConfig: PlanConfig{BatchSpans: 4}, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if st.FailedBatches != 1 || st.FailedSpans != 4 || st.SentBatches != st.Plan.Batches-1 || int(f.spans.Load()) != st.SentSpans {
		t.Errorf("stats %+v, endpoint got %d spans; want the second batch failed and the rest sent", st, f.spans.Load())
	}
}

func TestOTLPRateLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	sb := writeSmallBundle(t, dir, 5) // 40 spans
	_, url := newFlaky(t)
	// 40 spans in batches of 10 at 200 spans/s: the first batch goes at
	// once, each later one waits 50 ms.
	t0 := time.Now()
	st, err := OTLP(context.Background(), openBundle(t, dir), OTLPConfig{URL: url, PlanConfig: sb.plan(10), RateLimit: 200})
	if err != nil {
		t.Fatal(err)
	}
	if st.SentSpans != len(sb.reqs)*sb.perTrace {
		t.Fatalf("sent %d spans", st.SentSpans)
	}
	if el := time.Since(t0); el < 140*time.Millisecond {
		t.Errorf("40 spans at 200 spans/s took %v, want ≥ 150 ms", el)
	}
}

func TestOTLPCanceled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	writeSmallBundle(t, dir, 2)
	_, url := newFlaky(t, 503, 503, 503, 503)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := OTLP(ctx, openBundle(t, dir), OTLPConfig{URL: url, Backoff: time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
	if el := time.Since(t0); el > time.Second {
		t.Errorf("canceled export took %v", el)
	}
}

// The same bundle exports to the same bytes every time: the capture's
// resource attributes come from a map, and must not follow its order.
func TestBatchesSameBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap-small")
	sb := writeSmallBundle(t, dir, 3)
	body := func() []byte {
		p, err := newPlanner(openBundle(t, dir), sb.plan(100))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		var m ptrace.ProtoMarshaler
		if err := p.run(func(td ptrace.Traces) error {
			b, err := m.MarshalTraces(td)
			out = append(out, b...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := body()
	for range 10 {
		if !bytes.Equal(body(), first) {
			t.Fatal("the same bundle exported to different bytes")
		}
	}
}
