// Package driver runs one pass of a workload: every sample of the dataset
// sent once (or, cycling the dataset, a number of requests or for a time;
// or on a recorded schedule: replay.go) through a protocol client, under a
// closed or open loop, each request timed, scored and turned into a
// model.Request record.
package driver

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/asrprof/asrprof/bundle"
	"math"
	mrand "math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/record"
	"github.com/asrprof/asrprof/bench/score"
	"github.com/asrprof/asrprof/model"
)

// Item is one sample ready to send: its audio is in memory.
type Item struct {
	SampleID    string
	FileName    string
	ContentType string
	Audio       []byte
	AudioS      float64
	Ref         string
	Lang        string
}

// Level is a point of the sweep.
type Level struct {
	Name        string
	Concurrency int     // closed loop when > 0
	Rate        float64 // open loop (requests/s) when > 0
	Arrivals    load.Arrivals
	Seed        uint64
	// The pass's length. Both 0: every item once. Requests > 0: that many
	// requests, cycling the items in order; Duration > 0: no request is
	// sent after Duration from the pass's start (closed loop: none is
	// handed out; open loop: the schedule ends there), those in flight
	// finish. With both, whichever ends first.
	Requests int
	Duration time.Duration
	// Replay, when set, is an open-loop pass on a recorded schedule
	// (Rate is then only the record's mean rate); Requests and Duration
	// cut it short.
	Replay *Replay
}

// Open tells whether lv is an open loop: it sends on a schedule.
func (lv *Level) Open() bool { return lv.Rate > 0 || lv.Replay != nil }

// Planned is how many requests a pass of lv over n items is expected to
// send: exact unless the pass has only a Duration, where it is the open
// loop's expectation (rate × duration) or 0 (closed loop: unknown).
func (lv *Level) Planned(n int) int {
	k := n
	switch {
	case lv.Replay != nil:
		k = len(lv.Replay.Offsets)
		if lv.Duration > 0 {
			k = sort.Search(k, func(i int) bool { return lv.Replay.Offsets[i] >= lv.Duration })
		}
	case lv.Duration > 0 && lv.Rate > 0:
		k = int(math.Ceil(lv.Rate * lv.Duration.Seconds()))
	case lv.Requests > 0:
		return lv.Requests
	case lv.Duration > 0:
		return 0 // a closed loop for a time: unknown
	}
	if lv.Requests > 0 {
		k = min(k, lv.Requests)
	}
	return k
}

// Driver sends passes. Its fields must not change while a pass runs.
type Driver struct {
	Client protocol.Client
	// Items are the samples. When Client is a protocol.Preparer, Run
	// builds each item's upload once and points the item's Audio at the
	// same bytes inside it (the slice changes, the bytes do not).
	Items   []Item
	Model   string
	Lang    string          // default when an item has none
	Timeout time.Duration   // per request
	Tracer  protocol.Tracer // nil: a random W3C traceparent per request, no spans
	// OnRecord receives every finished request, from many goroutines.
	OnRecord func(rec *model.Request)
	// OnStart is called when a request is sent (for progress), may be nil.
	OnStart func()
	// DropRecords keeps a pass's records out of Pass.Records (OnRecord
	// still sees each): a pass then holds no record, so a long pass's
	// memory does not grow with its requests (the caller summarises them
	// as they come, model/summary.Acc).
	DropRecords bool
	// OnLags receives each realtime session's update lags over session
	// time (after OnRecord of its record), from many goroutines; may be nil.
	OnLags func(s *model.LagSeries)

	prefix string
	seq    atomic.Int64
	once   sync.Once
	rngMu  sync.Mutex
	rng    *mrand.ChaCha8
	up     prepared
}

// prepared is what a pass needs of Items, built once and kept while Items,
// Model, Lang and Client stay the same: each item's upload when the client
// is a protocol.Preparer, and its normalized reference.
type prepared struct {
	items  []Item
	client protocol.Client
	model  string
	lang   string
	refs   []*score.Reference
	bodies []*protocol.Upload // nil entries unless the client is a Preparer
}

// uploadKey is what an item's upload depends on: items that name the same
// audio bytes, file name, content type and language share one upload.
type uploadKey struct {
	audio          *byte
	n              int
	file, ct, lang string
}

// prepare builds (or keeps) d.up before a pass. Each item's Audio then
// becomes the same bytes inside its upload, so the dataset's audio is held
// once.
func (d *Driver) prepare() {
	u := &d.up
	same := u.refs != nil && len(u.items) == len(d.Items) && (len(d.Items) == 0 || &u.items[0] == &d.Items[0]) &&
		u.client == d.Client && u.model == d.Model && u.lang == d.Lang
	if same {
		return
	}
	*u = prepared{items: d.Items, client: d.Client, model: d.Model, lang: d.Lang,
		refs: make([]*score.Reference, len(d.Items)), bodies: make([]*protocol.Upload, len(d.Items))}
	pr, isPr := d.Client.(protocol.Preparer)
	seen := map[uploadKey]*protocol.Upload{}
	for i := range d.Items {
		it := &d.Items[i]
		job := d.job(it)
		u.refs[i] = score.NewReference(job.Language, it.Ref)
		if !isPr {
			continue
		}
		// The key is the item's own audio, not yet pointed into an upload.
		k := uploadKey{n: len(it.Audio), file: it.FileName, ct: it.ContentType, lang: job.Language}
		if len(it.Audio) > 0 {
			k.audio = &it.Audio[0]
		}
		up, ok := seen[k]
		if !ok {
			up = pr.Prepare(&job)
			seen[k] = up
		}
		u.bodies[i] = up
		it.Audio = up.Audio()
	}
}

// job is the protocol.Job of it without the per-request fields.
func (d *Driver) job(it *Item) protocol.Job {
	return protocol.Job{
		SampleID:    it.SampleID,
		FileName:    it.FileName,
		ContentType: it.ContentType,
		Audio:       it.Audio,
		Model:       d.Model,
		Language:    cmp.Or(it.Lang, d.Lang),
	}
}

// Pass is what a pass produced.
type Pass struct {
	Records []model.Request
	Start   time.Time // first send
	End     time.Time // last completion
	Started int       // requests sent (fewer than planned if stopped)
	Done    int       // requests finished (len(Records) unless DropRecords)
	// Fidelity is how closely an open loop's sends kept their schedule
	// (nil for a closed loop).
	Fidelity *bundle.Fidelity
	// SelfCheck is whether the driver kept up (selfcheck.go).
	SelfCheck *SelfCheck
}

// WallS is the pass's wall-clock duration in seconds (monotonic).
func (p *Pass) WallS() float64 { return p.End.Sub(p.Start).Seconds() }

func (d *Driver) init() {
	d.once.Do(func() {
		var b [4]byte
		rand.Read(b[:])
		d.prefix = "asrprof-" + hex.EncodeToString(b[:])
		var seed [32]byte
		rand.Read(seed[:])
		d.rng = mrand.NewChaCha8(seed)
	})
}

// Run sends a pass at level lv: every item once, or as lv's Requests,
// Duration and Replay say. New requests stop when stop is done; requests in
// flight stop when ctx is done. Records are returned in completion order
// and also passed to OnRecord as they finish.
//
// Besides the records it returns (none with DropRecords), a pass holds no
// per-request state but a float or two: an
// open loop's schedule is produced one send at a time (load.OpenFunc),
// and its self-check keeps one float per request (an open loop's send
// lags, a closed loop's slot gaps; SelfCheck).
func (d *Driver) Run(stop, ctx context.Context, lv Level, repeat int, warmup bool) *Pass {
	d.init()
	d.prepare()
	n := len(d.Items)
	itemOf := func(i int) int { return i % n }
	limit := n
	switch {
	case lv.Replay != nil:
		itemOf = func(i int) int { return lv.Replay.Items[i] }
		limit = len(lv.Replay.Offsets)
		if lv.Requests > 0 {
			limit = min(limit, lv.Requests)
		}
	case lv.Requests > 0:
		limit = lv.Requests
	case lv.Duration > 0:
		limit = math.MaxInt
	}
	if n == 0 {
		limit = 0
	}
	open := lv.Open()
	// The records' slice is sized once for the pass (with a margin where
	// the count is an expectation: an open loop of a duration), so that a
	// long pass does not copy it as it grows.
	size := lv.Planned(n)
	if lv.Duration > 0 && lv.Rate > 0 && lv.Replay == nil {
		size += size/64 + 16
	}
	size = min(max(size, n), 1<<22)
	p := &Pass{}
	if !d.DropRecords {
		p.Records = make([]model.Request, 0, size)
	}
	var mu sync.Mutex
	var lags []float64   // open loop: each send's lag behind its schedule, seconds
	var gaps []float64   // closed loop: each slot's response end → next send, seconds
	var stalls []float64 // realtime: each session's longest read stall, seconds
	var latSum float64   // successful requests' latency, for the self-check's lag share
	var latN int
	if open {
		lags = make([]float64, 0, size)
	} else {
		gaps = make([]float64, 0, size)
	}
	// slotDone is when each closed-loop slot's last response ended; a
	// slot's tasks run one after another on one goroutine.
	slotDone := make([]time.Time, max(lv.Concurrency, 1))
	task := func(ctx context.Context, i, slot int, intended time.Time) {
		k := itemOf(i)
		rec, sent, done, rt := d.one(ctx, &d.Items[k], d.up.bodies[k], d.up.refs[k], lv, repeat, warmup, intended)
		if d.OnRecord != nil {
			d.OnRecord(rec)
		}
		if d.OnLags != nil && rt != nil && len(rt.LagsS) > 0 {
			d.OnLags(&model.LagSeries{ID: rec.ID, SampleID: rec.SampleID, Level: rec.Level, Repeat: rec.Repeat,
				Warmup: rec.Warmup, Source: rt.LagSource, AtS: rt.LagAtS, LagS: rt.LagsS})
		}
		mu.Lock()
		p.Done++
		if !d.DropRecords {
			p.Records = append(p.Records, *rec)
		}
		if open {
			lags = append(lags, sent.Sub(intended).Seconds())
		} else if last := slotDone[slot]; !last.IsZero() {
			gaps = append(gaps, sent.Sub(last).Seconds())
		}
		if rt != nil && rec.Status == model.StatusOK {
			stalls = append(stalls, rt.ReadStallMax.Seconds())
		}
		if rec.Status == model.StatusOK {
			latSum, latN = latSum+rec.LatencyS, latN+1
		}
		mu.Unlock()
		if !open {
			slotDone[slot] = done
		}
	}
	m := &meter{cpu: processCPU(), wait: threadWaits(), sched: readSched()}
	p.Start = time.Now()
	if open {
		var next load.Next
		if lv.Replay != nil {
			next = func(i int) (time.Duration, bool) { return lv.Replay.Offsets[i], true }
		} else {
			next = load.Stream(lv.Rate, lv.Arrivals, lv.Seed+uint64(repeat))
		}
		bounded := func(i int) (time.Duration, bool) {
			if i >= limit {
				return 0, false
			}
			off, ok := next(i)
			return off, ok && (lv.Duration <= 0 || off < lv.Duration)
		}
		p.Started = load.OpenFunc(stop, ctx, bounded, func(ctx context.Context, i int, intended time.Time) {
			task(ctx, i, 0, intended)
		})
	} else {
		sendStop := stop
		if lv.Duration > 0 {
			var cancel context.CancelFunc
			sendStop, cancel = context.WithDeadline(stop, p.Start.Add(lv.Duration))
			defer cancel()
		}
		p.Started = load.ClosedSlots(sendStop, ctx, limit, lv.Concurrency, task)
	}
	p.End = time.Now()
	p.Fidelity = NewFidelity(lags) // nil for a closed loop: no lags
	in := selfCheckInput{open: open, requests: p.Done, wallS: p.WallS(),
		fidelity: p.Fidelity, lags: lags, gaps: gaps, stalls: stalls}
	if latN > 0 {
		in.latencyMeanS = latSum / float64(latN)
	}
	p.SelfCheck = m.finish(in)
	return p
}

// one sends one request and returns its record, when it was sent, when
// the protocol client returned, and the realtime session's result (nil
// for a file request).
func (d *Driver) one(ctx context.Context, it *Item, up *protocol.Upload, ref *score.Reference, lv Level, repeat int, warmup bool, intended time.Time) (*model.Request, time.Time, time.Time, *protocol.RealtimeResult) {
	n := d.seq.Add(1)
	job := d.job(it)
	job.Upload = up
	rec := &model.Request{
		ID:             strconv.FormatInt(n, 10),
		SampleID:       it.SampleID,
		Level:          lv.Name,
		Repeat:         repeat,
		Warmup:         warmup,
		RequestID:      d.requestID(n),
		AudioDurationS: it.AudioS,
		Ref:            it.Ref,
		Lang:           job.Language,
	}
	var tp string
	var end func(*model.Request)
	if d.Tracer != nil {
		tp, end = d.Tracer.Start(ctx, rec)
	} else { // a random traceparent, no span
		var b [24]byte
		d.rngMu.Lock()
		_, _ = d.rng.Read(b[:]) // ChaCha8.Read never fails
		d.rngMu.Unlock()
		tp, rec.TraceID = protocol.TraceParent(b)
	}
	job.RequestID, job.TraceParent = rec.RequestID, tp
	if d.OnStart != nil {
		d.OnStart()
	}
	rctx, cancel := context.WithTimeout(ctx, d.Timeout)
	start := time.Now()
	res := d.Client.Do(rctx, &job)
	done := time.Now()
	cancel()
	from := start
	if lv.Open() {
		from = intended
	}
	record.Fill(ctx, rec, start, from, &res, ref)
	if end != nil {
		end(rec)
	}
	return rec, start, done, res.Realtime
}

// requestID is the X-Request-Id of request n: the driver's prefix, a dash
// and n with at least six digits (fmt's "%s-%06d", without fmt).
func (d *Driver) requestID(n int64) string {
	b := make([]byte, 0, len(d.prefix)+1+20)
	b = append(b, d.prefix...)
	b = append(b, '-')
	var tmp [20]byte
	digits := strconv.AppendInt(tmp[:0], n, 10)
	for i := len(digits); i < 6; i++ {
		b = append(b, '0')
	}
	return string(append(b, digits...))
}
