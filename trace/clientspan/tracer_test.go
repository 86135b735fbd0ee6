package clientspan

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

func newTracer(t testing.TB) (*Tracer, string) {
	t.Helper()
	bw, err := bundle.Create(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bw.Close() })
	tr := New(spans.NewWriter(bw), map[string]string{"host.name": "box", "service.name": "ignored"})
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr, bw.Path(bundle.SpansFile)
}

func parseTraceparent(t *testing.T, tp string) oteltrace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	sc := oteltrace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("traceparent %q does not parse to a sampled span context", tp)
	}
	return sc
}

func TestStartEnd(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	tests := []struct {
		name         string
		rec          model.Request
		wantStatus   string
		wantOutcome  string
		wantChildren map[string][2]int64 // name -> start, end
		wantHTTP     bool
	}{
		{
			name: "ok with phases",
			rec: model.Request{SampleID: "s1", Level: "c8", Repeat: 2, RequestID: "asrprof-ab-000001", ServerRequestID: "transcription-42",
				AudioDurationS: 3.5, StartUnixNs: t0, UploadDoneUnixNs: t0 + 2e6, FirstByteUnixNs: t0 + 50e6, EndUnixNs: t0 + 80e6,
				HTTPStatus: 200, Status: model.StatusOK},
			wantStatus:  spans.StatusUnset,
			wantOutcome: "ok",
			wantChildren: map[string][2]int64{
				SpanUpload:        {t0, t0 + 2e6},
				SpanWaitFirstByte: {t0 + 2e6, t0 + 50e6},
			},
			wantHTTP: true,
		},
		{
			name: "timeout, no phases",
			rec: model.Request{SampleID: "s2", Level: "r2.5", Warmup: true, RequestID: "asrprof-ab-000002",
				StartUnixNs: t0, EndUnixNs: t0 + 30e9, Status: model.StatusFailed, ErrorKind: model.FailTimeout, Error: "context deadline exceeded"},
			wantStatus:   spans.StatusError,
			wantOutcome:  model.FailTimeout,
			wantChildren: map[string][2]int64{},
		},
		{
			name: "http 500, upload only",
			rec: model.Request{SampleID: "s3", RequestID: "asrprof-ab-000003", StartUnixNs: t0, UploadDoneUnixNs: t0 + 1e6, EndUnixNs: t0 + 9e6,
				HTTPStatus: 500, Status: model.StatusFailed, ErrorKind: model.FailHTTP5xx},
			wantStatus:   spans.StatusError,
			wantOutcome:  model.FailHTTP5xx,
			wantChildren: map[string][2]int64{SpanUpload: {t0, t0 + 1e6}},
			wantHTTP:     true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, path := newTracer(t)
			rec := tt.rec
			tp, end := tr.Start(context.Background(), &rec)
			sc := parseTraceparent(t, tp)
			if rec.TraceID == "" || rec.TraceID != sc.TraceID().String() {
				t.Fatalf("rec.TraceID %q, traceparent's %s", rec.TraceID, sc.TraceID())
			}
			end(&rec)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			all, err := spans.ReadAll(path)
			if err != nil {
				t.Fatal(err)
			}
			var root *spans.Span
			children := map[string]spans.Span{}
			for i, s := range all {
				if s.TraceID != rec.TraceID {
					t.Errorf("span %s in trace %s, want %s", s.Name, s.TraceID, rec.TraceID)
				}
				if !s.IsClient() {
					t.Errorf("span %s has service %q", s.Name, s.Service)
				}
				if s.Name == SpanRequest {
					root = &all[i]
				} else {
					children[s.Name] = s
				}
			}
			if root == nil {
				t.Fatalf("no %s span among %+v", SpanRequest, all)
			}
			if root.SpanID != sc.SpanID().String() || root.ParentSpanID != "" || root.Kind != spans.KindClient {
				t.Errorf("root %+v: want span id %s, no parent, kind CLIENT", root, sc.SpanID())
			}
			if root.EndUnixNs != rec.EndUnixNs {
				t.Errorf("root ends at %d, want %d", root.EndUnixNs, rec.EndUnixNs)
			}
			if root.StatusCode != tt.wantStatus {
				t.Errorf("status %s, want %s", root.StatusCode, tt.wantStatus)
			}
			// The attributes the request span has always had (model.Request's span tags).
			want := map[string]any{
				"asrprof.sample_id": rec.SampleID, "asrprof.level": rec.Level, "asrprof.repeat": int64(rec.Repeat), "asrprof.warmup": rec.Warmup,
				"asrprof.request_id": rec.RequestID, "asrprof.server_request_id": rec.ServerRequestID, "asr.audio_seconds": rec.AudioDurationS,
				AttrOutcome: tt.wantOutcome,
			}
			if tt.wantHTTP {
				want[AttrHTTPStatus] = int64(rec.HTTPStatus)
			}
			if len(root.Attrs) != len(want) {
				t.Errorf("attrs %v, want %d", root.Attrs, len(want))
			}
			for k, v := range want {
				if root.Attrs[k] != v {
					t.Errorf("attr %s = %#v, want %#v", k, root.Attrs[k], v)
				}
			}
			if _, ok := root.Attrs[AttrHTTPStatus]; ok != tt.wantHTTP {
				t.Errorf("has %s: %v, want %v", AttrHTTPStatus, ok, tt.wantHTTP)
			}
			if len(children) != len(tt.wantChildren) {
				t.Errorf("children %v, want %v", children, tt.wantChildren)
			}
			for name, se := range tt.wantChildren {
				c, ok := children[name]
				if !ok {
					t.Errorf("no %s span", name)
					continue
				}
				if c.ParentSpanID != root.SpanID || c.StartUnixNs != se[0] || c.EndUnixNs != se[1] {
					t.Errorf("%s: parent %s [%d, %d], want parent %s [%d, %d]", name, c.ParentSpanID, c.StartUnixNs, c.EndUnixNs, root.SpanID, se[0], se[1])
				}
			}
		})
	}
}

// TestWrittenWithoutFlush checks that finished spans reach the file within
// FlushInterval and a bit, with no Flush: what a killed capture keeps.
func TestWrittenWithoutFlush(t *testing.T) {
	tr, path := newTracer(t)
	rec := model.Request{RequestID: "r1", Status: model.StatusOK}
	_, end := tr.Start(context.Background(), &rec)
	rec.EndUnixNs = time.Now().UnixNano()
	end(&rec)
	deadline := time.Now().Add(FlushInterval + 2*time.Second)
	for {
		all, _ := spans.ReadAll(path)
		if len(all) == 1 && all[0].TraceID == rec.TraceID {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the file holds %d spans, want 1", FlushInterval+2*time.Second, len(all))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDistinctTraces(t *testing.T) {
	tr, _ := newTracer(t)
	seen := map[string]bool{}
	for range 100 {
		var rec model.Request
		tp, end := tr.Start(context.Background(), &rec)
		if seen[tp] || seen[rec.TraceID] {
			t.Fatalf("traceparent %s repeated", tp)
		}
		seen[tp], seen[rec.TraceID] = true, true
		end(&rec)
	}
}

type discard struct{}

func (discard) AppendRaw(string, []byte) error { return nil }

// BenchmarkStartEnd measures a request's client-span cost on the driver's
// path (Start, then end with all phases), conversion and writing included
// as they happen in the background.
func BenchmarkStartEnd(b *testing.B) {
	tr := New(spans.NewWriter(discard{}), nil)
	defer tr.Shutdown(context.Background())
	now := time.Now().UnixNano()
	b.ReportAllocs()
	for b.Loop() {
		rec := model.Request{SampleID: "s1", Level: "c8", RequestID: "asrprof-ab-000001", Status: model.StatusOK, HTTPStatus: 200,
			StartUnixNs: now, UploadDoneUnixNs: now + 1e6, FirstByteUnixNs: now + 2e6, EndUnixNs: now + 3e6}
		_, end := tr.Start(context.Background(), &rec)
		end(&rec)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
}
