package capture

import (
	"context"
	"testing"

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
