package record_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/record"
	"github.com/asrprof/asrprof/model"
)

func TestFill(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// A streamed success, open loop (latency from the intended time).
	rec := &model.Request{Ref: "the cat sat", Lang: "en"}
	res := protocol.Result{Text: "the cat sat down", HTTPStatus: 200, ServerRequestID: "s1", UploadDone: at(2), FirstByte: at(5),
		FirstToken: at(7), ChunkTimes: []time.Time{at(7), at(9), at(12)}, End: at(20)}
	record.Fill(context.Background(), rec, at(1), t0, &res, nil)
	if rec.Status != model.StatusOK || rec.Hyp != "the cat sat down" || rec.ServerRequestID != "s1" || rec.HTTPStatus != 200 {
		t.Errorf("outcome %+v", rec)
	}
	if rec.LatencyS != 0.020 || rec.TTFTS != 0.007 || rec.IntendedUnixNs != t0.UnixNano() || rec.StartUnixNs != at(1).UnixNano() ||
		len(rec.ChunkGapsS) != 2 || rec.ChunkGapsS[1] != 0.003 || rec.UploadDoneUnixNs != at(2).UnixNano() {
		t.Errorf("timing %+v", rec)
	}
	if !rec.Scored || rec.Errors == nil || rec.Errors.Ins != 1 || rec.Errors.RefWords != 3 {
		t.Errorf("scoring %+v %+v", rec, rec.Errors)
	}
	// Warmup is not scored; closed loop records no intended time.
	w := &model.Request{Ref: "a b", Lang: "en", Warmup: true}
	record.Fill(context.Background(), w, t0, t0, &protocol.Result{Text: "a b", End: at(3)}, nil)
	if w.Scored || w.Errors != nil || w.IntendedUnixNs != 0 {
		t.Errorf("warmup %+v", w)
	}
	// A failure without a kind: the context decides.
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	f := &model.Request{Ref: "x"}
	record.Fill(ctx, f, t0, t0, &protocol.Result{Err: context.DeadlineExceeded, End: at(1)}, nil)
	if f.Status != model.StatusFailed || f.ErrorKind != model.FailTimeout || f.Scored {
		t.Errorf("timeout %+v", f)
	}
	o := &model.Request{}
	record.Fill(context.Background(), o, t0, t0, &protocol.Result{Err: errors.New("boom"), ErrKind: protocol.KindHTTP5xx}, nil)
	if o.ErrorKind != model.FailHTTP5xx || o.Error != "boom" || o.EndUnixNs == 0 {
		t.Errorf("5xx %+v", o)
	}
}
