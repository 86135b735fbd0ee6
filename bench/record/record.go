// Package record turns what a protocol client recorded for one request
// (a protocol.Result) into its model.Request: timings, outcome, failure
// kind, transcript and, against a reference, the WER/CER counts. It is the
// one place requests become records: the driver (requests asrprof sends)
// and the capturing proxy (requests a user's own client sends) both call
// Fill.
package record

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/score"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// Fill completes rec from res. rec carries what the caller knew before the
// request (ids, sample, level, Warmup, Ref, Lang); start is when the
// request was sent (for the proxy: its first byte arrived) and from is
// where latencies count from (start, or the intended send time of an open
// loop, which Fill then records). ctx is the request's context: it tells a
// timeout from a cancellation. A successful answer that is not warmup is
// scored against ref, rec.Ref already normalized once for all the
// requests of its sample (the driver's), or, where ref is nil, against
// rec.Ref in rec.Lang (score.Sample).
func Fill(ctx context.Context, rec *model.Request, start, from time.Time, res *protocol.Result, ref *score.Reference) {
	if res.End.IsZero() {
		res.End = time.Now()
	}
	// Durations come from the monotonic readings inside time.Time; the
	// wall clock is kept for joining with other sources.
	if !from.Equal(start) {
		rec.IntendedUnixNs = from.UnixNano()
	}
	rec.StartUnixNs = start.UnixNano()
	rec.EndUnixNs = res.End.UnixNano()
	rec.LatencyS = res.End.Sub(from).Seconds()
	if !res.Connected.IsZero() {
		rec.ConnectedUnixNs = res.Connected.UnixNano()
	}
	if !res.UploadDone.IsZero() {
		rec.UploadDoneUnixNs = res.UploadDone.UnixNano()
	}
	if !res.FirstByte.IsZero() {
		rec.FirstByteUnixNs = res.FirstByte.UnixNano()
	}
	if !res.FirstToken.IsZero() {
		rec.FirstTokenUnixNs = res.FirstToken.UnixNano()
		rec.TTFTS = res.FirstToken.Sub(from).Seconds()
	}
	for i := 1; i < len(res.ChunkTimes); i++ {
		rec.ChunkGapsS = append(rec.ChunkGapsS, res.ChunkTimes[i].Sub(res.ChunkTimes[i-1]).Seconds())
	}
	if res.Realtime != nil {
		realtimeFields(rec, res.Realtime)
	}
	rec.HTTPStatus = res.HTTPStatus
	rec.ServerRequestID = res.ServerRequestID
	if res.Err != nil {
		rec.Status = model.StatusFailed
		rec.ErrorKind = cmp.Or(res.ErrKind, classify(ctx, res.Err))
		rec.Error = res.Err.Error()
		return
	}
	rec.Status = model.StatusOK
	rec.Hyp = res.Text
	rec.Scored, rec.Errors = false, nil
	if rec.Warmup {
		return
	}
	if ref == nil {
		ref = score.NewReference(rec.Lang, rec.Ref) // score.Sample's way
	}
	if c, scored := ref.Score(rec.Hyp); scored {
		rec.Scored = true
		rec.Errors = &model.WordErrors{Sub: c.Sub, Del: c.Del, Ins: c.Ins, RefWords: c.RefWords()}
	}
}

func classify(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return model.FailTimeout
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return model.FailCanceled
	}
	return model.FailOther
}

// realtimeFields copies a WebSocket session's measurements into rec
// (definitions in docs/REALTIME.md).
func realtimeFields(rec *model.Request, rt *protocol.RealtimeResult) {
	secs := func(from, to time.Time) *float64 {
		if from.IsZero() || to.IsZero() {
			return nil
		}
		return new(to.Sub(from).Seconds())
	}
	rec.FirstUpdateS = secs(rt.AudioStart, rt.FirstUpdate)
	rec.FinalAfterStopS = secs(rt.StopSent, rt.Final)
	if n := len(rt.LagsS); n > 0 {
		rec.LagP95S = new(stats.Percentile(rt.LagsS, 95))
		rec.LagMaxS = new(slices.Max(rt.LagsS))
		if n >= 6 {
			k := n / 3
			rec.LagGrowthS = new(stats.Mean(rt.LagsS[n-k:]) - stats.Mean(rt.LagsS[:k]))
		}
	}
	rec.LagSource = rt.LagSource
	rec.Partials = rt.Partials
	rec.Finals = rt.Finals
	rec.ServerErrors = rt.ServerErrors
	rec.AudioS = rt.AudioS
	if rt.SendLateMax > 0 {
		rec.SendLateMaxS = new(rt.SendLateMax.Seconds())
	}
}
