package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/spans"
)

// smallBundle is what writeSmallBundle wrote.
type smallBundle struct {
	dir      string
	reqs     []model.Request
	clientID map[string]string // trace id → client root span id
	// perTrace is the number of spans of each trace: client root, upload,
	// wait_first_byte, 3 server spans, and the stages.
	perTrace int
	// stages are two stages per request, what an analysis would derive.
	stages [][]Stage
}

// plan is a PlanConfig that exports sb's stages in batches of batch spans.
func (sb smallBundle) plan(batch int) PlanConfig {
	return PlanConfig{BatchSpans: batch, Stages: sb.stages}
}

// Server span names writeSmallBundle uses.
const (
	srvRoot   = "transcription"
	srvBuild  = "build"
	srvDecode = "decode"
)

// writeSmallBundle writes a capture of n requests at level "c2" (two in
// flight at a time) into dir: client spans through trace/clientspan (the
// real tracer), server spans parented by the traceparent the tracer gave
// (transcription, with build and decode children; decode carries a
// thread.name); and two stages per request in sb.stages.
func writeSmallBundle(t testing.TB, dir string, n int) smallBundle {
	t.Helper()
	bw, err := bundle.Create(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Close()
	sw := spans.NewWriter(bw)
	tr := clientspan.New(sw, map[string]string{"host.name": "client-box"})
	ctx := context.Background()
	sb := smallBundle{dir: dir, clientID: map[string]string{}, perTrace: 8}
	base := time.Now().UnixNano()
	srv := ptrace.NewTraces()
	rs := srv.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "asrprof-refserver")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	for i := 0; i < n; i++ {
		rec := model.Request{
			ID:             fmt.Sprint(i + 1),
			SampleID:       fmt.Sprintf("sample-%d", i),
			Level:          "c2",
			Repeat:         1,
			RequestID:      fmt.Sprintf("asrprof-test-%06d", i+1),
			AudioDurationS: 2,
			HTTPStatus:     200,
			Status:         model.StatusOK,
		}
		tp, end := tr.Start(ctx, &rec)
		sc := oteltrace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp}))
		sb.clientID[rec.TraceID] = sc.SpanID().String()
		// Two requests in flight at a time: 40 ms each, sent 20 ms apart
		// (the tracer starts the client span at the real time).
		t0 := time.Now().UnixNano()
		rec.StartUnixNs = t0
		rec.UploadDoneUnixNs = t0 + int64(2*time.Millisecond)
		if i == 0 { // the first opened its connection: 1 ms
			rec.ConnectedUnixNs = t0 + int64(time.Millisecond)
		}
		rec.FirstByteUnixNs = t0 + int64(38*time.Millisecond)
		rec.EndUnixNs = t0 + int64(40*time.Millisecond)
		rec.LatencyS = 0.040
		end(&rec)

		tid := pcommon.TraceID(sc.TraceID())
		mk := func(name string, id byte, parent pcommon.SpanID, from, to time.Duration) ptrace.Span {
			sp := ss.AppendEmpty()
			sp.SetTraceID(tid)
			sp.SetSpanID(pcommon.SpanID{0xa0, byte(i >> 8), byte(i), 0, 0, 0, 0, id})
			sp.SetParentSpanID(parent)
			sp.SetName(name)
			sp.SetStartTimestamp(pcommon.Timestamp(t0 + int64(from)))
			sp.SetEndTimestamp(pcommon.Timestamp(t0 + int64(to)))
			return sp
		}
		root := mk(srvRoot, 1, pcommon.SpanID(sc.SpanID()), 3*time.Millisecond, 37*time.Millisecond)
		root.SetKind(ptrace.SpanKindServer)
		root.Attributes().PutStr("asrprof.request_id", rec.RequestID)
		mk(srvBuild, 2, root.SpanID(), 3*time.Millisecond, 10*time.Millisecond)
		dec := mk(srvDecode, 3, root.SpanID(), 12*time.Millisecond, 37*time.Millisecond)
		dec.Attributes().PutStr(AttrThreadName, "scheduler")

		sb.stages = append(sb.stages, []Stage{
			{Name: "build", StartUnixNs: t0 + int64(3*time.Millisecond), EndUnixNs: t0 + int64(10*time.Millisecond)},
			{Name: "decode tail", StartUnixNs: t0 + int64(12*time.Millisecond), EndUnixNs: t0 + int64(37*time.Millisecond)},
		})
		if err := bw.Append(bundle.RequestsFile, rec); err != nil {
			t.Fatal(err)
		}
		sb.reqs = append(sb.reqs, rec)
		time.Sleep(20 * time.Millisecond)
	}
	last := time.Now().UnixNano() + int64(40*time.Millisecond)
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sw.Write(srv); err != nil {
		t.Fatal(err)
	}
	man := model.Manifest{
		Schema:      model.Schema,
		Complete:    true,
		StartUnixNs: base,
		EndUnixNs:   last,
		Config:      map[string]any{"target": "http://127.0.0.1:18000"},
		Fingerprint: model.Fingerprint{Hostname: "client-box", TargetURL: "http://127.0.0.1:18000"},
		Levels: []model.LevelRun{{Level: "c2", Concurrency: 2, Repeat: 1,
			StartUnixNs: base, EndUnixNs: last}},
	}
	if err := bw.WriteJSON(bundle.ManifestFile, man); err != nil {
		t.Fatal(err)
	}
	return sb
}

func openBundle(t testing.TB, dir string) *bundle.Bundle {
	t.Helper()
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
