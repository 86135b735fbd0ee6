package capture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/spans"
)

// TestJoinWithoutServerSpans: a bundle whose span store holds client spans
// only joins to the same counts whether the store is read or not (the
// capture skips it when the receiver took no span).
func TestJoinWithoutServerSpans(t *testing.T) {
	dir := t.TempDir()
	w, err := bundle.Create(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tr := clientspan.New(spans.NewWriter(w), nil)
	const t0 = int64(1_800_000_000_000_000_000)
	for i, id := range []string{"1", "2", "3"} {
		rec := &model.Request{ID: id, SampleID: "s" + id, Level: "c1", Repeat: 1, Status: model.StatusOK, HTTPStatus: 200,
			StartUnixNs: t0 + int64(i)*1e6, UploadDoneUnixNs: t0 + int64(i)*1e6 + 1e5, FirstByteUnixNs: t0 + int64(i)*1e6 + 2e5, EndUnixNs: t0 + int64(i)*1e6 + 3e5}
		_, end := tr.Start(context.Background(), rec)
		end(rec)
		if err := w.Append(bundle.RequestsFile, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ss, err := spans.ReadAll(w.Path(bundle.SpansFile))
	if err != nil || len(ss) != 9 {
		t.Fatalf("span store: %d spans, %v; want the 9 client spans", len(ss), err)
	}
	read, err1 := joinBundle(dir, true)
	skipped, err2 := joinBundle(dir, false)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if read != skipped || read.Requests != 3 || read.WithSpans != 0 || read.ServerSpans != 0 {
		t.Errorf("join with the span store read: %+v; skipped: %+v; want equal, 3 requests, no server spans", read, skipped)
	}
}

// The capture's end waits for the server's spans of the requests it
// answered with success, until a span names each one's client span as
// its parent; while none has come, until the first answer is a span
// grace old; past maxAwaited at once it gives up and waits for quiet.
func TestAwaitedSpans(t *testing.T) {
	var sent int
	fake := tracerFunc(func(context.Context, *model.Request) (string, func(*model.Request)) {
		sent++ // what clientspan sends: its span id in a traceparent
		return fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-%016x-01", sent), func(*model.Request) {}
	})
	a := awaited{Tracer: fake, ids: map[pcommon.SpanID]struct{}{}}
	answer := func(status int) {
		_, end := a.Start(context.Background(), &model.Request{})
		end(&model.Request{HTTPStatus: status})
	}
	child := func(parent byte) ptrace.Traces {
		td := ptrace.NewTraces()
		sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetParentSpanID(pcommon.SpanID{7: parent})
		return td
	}
	answer(200) // span 01
	answer(503) // 02: turned away, not awaited
	answer(0)   // 03: no answer
	answer(101) // 04: a WebSocket session
	if a.done(time.Hour) {
		t.Error("no server span yet, the first answer newer than the grace: done, though a batch may still come")
	}
	if !a.done(0) {
		t.Error("no server span, the first answer a grace old: a server that sends none is waited for")
	}
	if w := a.waiting(time.Hour, 5*time.Second); !strings.HasPrefix(w, "waiting up to 5s for the server's first spans") {
		t.Errorf("the wait before any span: %q", w)
	}
	a.saw(child(1))
	if a.done(0) {
		t.Error("done with session 04's span still to come")
	}
	if w := a.waiting(0, 5*time.Second); !strings.HasPrefix(w, "waiting up to 5s for the server's spans of 1 answered requests") {
		t.Errorf("the wait for session 04's span: %q", w)
	}
	a.saw(child(4))
	if !a.done(time.Hour) {
		t.Errorf("still waiting for %d spans", len(a.ids))
	}
	for range maxAwaited + 1 {
		_, _ = a.Start(context.Background(), &model.Request{})
	}
	if !a.done(time.Hour) || a.ids != nil {
		t.Errorf("%d awaited past the bound, want none (given up)", len(a.ids))
	}
}

type tracerFunc func(context.Context, *model.Request) (string, func(*model.Request))

func (f tracerFunc) Start(ctx context.Context, rec *model.Request) (string, func(*model.Request)) {
	return f(ctx, rec)
}
