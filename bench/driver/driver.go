// Package driver runs one pass of a workload: every sample of the dataset
// sent once through a protocol client, under a closed or open loop, each
// request timed, scored and turned into a trace.Request record.
package driver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/record"
	"github.com/asrprof/asrprof/trace"
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
}

// Tracer starts the client-side trace of one request: it sets rec.TraceID
// and returns the traceparent header to send, and a function that ends the
// trace once rec is complete (called exactly once). It is safe for
// concurrent use.
type Tracer interface {
	Start(ctx context.Context, rec *trace.Request) (traceparent string, end func(rec *trace.Request))
}

// Driver sends passes. Its fields must not change while a pass runs.
type Driver struct {
	Client  protocol.Client
	Items   []Item
	Model   string
	Lang    string        // default when an item has none
	Timeout time.Duration // per request
	Tracer  Tracer        // nil: a random W3C traceparent per request, no spans
	// OnRecord receives every finished request, from many goroutines.
	OnRecord func(rec *trace.Request)
	// OnStart is called when a request is sent (for progress), may be nil.
	OnStart func()

	prefix string
	seq    atomic.Int64
	once   sync.Once
	rngMu  sync.Mutex
	rng    *mrand.ChaCha8
}

// Pass is what a pass produced.
type Pass struct {
	Records []trace.Request
	Start   time.Time // first send
	End     time.Time // last completion
	Started int       // requests sent (less than len(Items) if stopped)
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

// Run sends every item once at level lv. New requests stop when stop is
// done; requests in flight stop when ctx is done. Records are returned in
// completion order and also passed to OnRecord as they finish.
func (d *Driver) Run(stop, ctx context.Context, lv Level, repeat int, warmup bool) *Pass {
	d.init()
	p := &Pass{Records: make([]trace.Request, 0, len(d.Items))}
	var mu sync.Mutex
	task := func(ctx context.Context, i int, intended time.Time) {
		rec := d.one(ctx, &d.Items[i], lv, repeat, warmup, intended)
		if d.OnRecord != nil {
			d.OnRecord(rec)
		}
		mu.Lock()
		p.Records = append(p.Records, *rec)
		mu.Unlock()
	}
	p.Start = time.Now()
	if lv.Rate > 0 {
		offs := load.Schedule(len(d.Items), lv.Rate, lv.Arrivals, lv.Seed+uint64(repeat))
		p.Started = load.Open(stop, ctx, offs, task)
	} else {
		p.Started = load.Closed(stop, ctx, len(d.Items), lv.Concurrency, task)
	}
	p.End = time.Now()
	return p
}

func (d *Driver) one(ctx context.Context, it *Item, lv Level, repeat int, warmup bool, intended time.Time) *trace.Request {
	n := d.seq.Add(1)
	lang := it.Lang
	if lang == "" {
		lang = d.Lang
	}
	rec := &trace.Request{
		ID:             fmt.Sprintf("%d", n),
		SampleID:       it.SampleID,
		Level:          lv.Name,
		Repeat:         repeat,
		Warmup:         warmup,
		RequestID:      fmt.Sprintf("%s-%06d", d.prefix, n),
		AudioDurationS: it.AudioS,
		Ref:            it.Ref,
		Lang:           lang,
	}
	var tp string
	var end func(*trace.Request)
	if d.Tracer != nil {
		tp, end = d.Tracer.Start(ctx, rec)
	} else {
		tp, rec.TraceID = d.randomTraceParent()
	}
	job := &protocol.Job{
		RequestID:   rec.RequestID,
		TraceParent: tp,
		SampleID:    it.SampleID,
		FileName:    it.FileName,
		ContentType: it.ContentType,
		Audio:       it.Audio,
		Model:       d.Model,
		Language:    lang,
	}
	if d.OnStart != nil {
		d.OnStart()
	}
	rctx, cancel := context.WithTimeout(ctx, d.Timeout)
	start := time.Now()
	res := d.Client.Do(rctx, job)
	cancel()
	from := start
	if lv.Rate > 0 {
		from = intended
	}
	record.Fill(ctx, rec, start, from, &res)
	if end != nil {
		end(rec)
	}
	return rec
}

// randomTraceParent returns a sampled W3C traceparent and its trace id.
func (d *Driver) randomTraceParent() (string, string) {
	var b [24]byte
	d.rngMu.Lock()
	binary.LittleEndian.PutUint64(b[0:], d.rng.Uint64())
	binary.LittleEndian.PutUint64(b[8:], d.rng.Uint64())
	binary.LittleEndian.PutUint64(b[16:], d.rng.Uint64())
	d.rngMu.Unlock()
	tid := hex.EncodeToString(b[:16])
	sid := hex.EncodeToString(b[16:])
	return "00-" + tid + "-" + sid + "-01", tid
}
