package engine

import (
	"math"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fixture"
)

// Every request's segments tile its client latency [end − latency, end)
// in time order, and give each state the time States gives it; the
// upload comes first, the delivery last, the waits before the running
// batch.
func TestAttributionSegments(t *testing.T) {
	const ms = time.Millisecond
	r := attributeSegs(t, true, fixture.AttrConfig{Levels: []fixture.AttrLevel{
		{Concurrency: 6, Upload: 5 * ms, Receive: 3 * ms, Build: 8 * ms, FirstForward: 20 * ms, Decode: 60 * ms, DecodeSpread: 10 * ms,
			Delivery: 2 * ms, BuildWorkers: 1, MaxRunning: 2, OnCPU: 0.7, Runq: 0.1, Sync: 0.2, GPUUtil: 0.5},
	}, RequestsPerPass: 24, CUDA: true, GPU: true, Seed: 4})
	order := func(s int) int {
		switch s {
		case sUpload:
			return 0
		case sBuildWait, sBuild, sAdmission:
			return 1
		case sDelivery:
			return 3
		}
		return 2
	}
	for _, q := range r.a.Requests {
		if len(q.Segments) == 0 {
			t.Fatalf("request %d has no segments", q.Index)
		}
		end := r.rc.EndUnixNs[q.Index]
		L := int64(math.Round(q.LatencyS * 1e9))
		if q.Segments[0].StartUnixNs != end-L || q.Segments[len(q.Segments)-1].EndUnixNs != end {
			t.Errorf("request %d: segments span [%d, %d), latency [%d, %d)", q.Index, q.Segments[0].StartUnixNs, q.Segments[len(q.Segments)-1].EndUnixNs, end-L, end)
		}
		var got [NumStates]float64
		last := 0
		for k, g := range q.Segments {
			if g.EndUnixNs <= g.StartUnixNs || (k > 0 && g.StartUnixNs != q.Segments[k-1].EndUnixNs) {
				t.Fatalf("request %d: segment %d %+v does not follow %+v", q.Index, k, g, q.Segments[max(k-1, 0)])
			}
			if o := order(g.State); o < last && g.State != sUnattributed {
				t.Errorf("request %d: %s after a later phase: %+v", q.Index, AttributionStates[g.State], q.Segments)
			} else if g.State != sUnattributed {
				last = o
			}
			got[g.State] += float64(g.EndUnixNs-g.StartUnixNs) / 1e9
		}
		for s := range got {
			if math.Abs(got[s]-q.States[s]) > 2e-6 {
				t.Errorf("request %d: %s %.6f s in segments, %.6f s in States", q.Index, AttributionStates[s], got[s], q.States[s])
			}
		}
	}
}

// BenchmarkAttributeSegments is BenchmarkAttribute with the segments.
func BenchmarkAttributeSegments(b *testing.B) {
	in := benchInput(100000)
	in.Segments = true
	b.ResetTimer()
	for b.Loop() {
		a := Attribute(in)
		if len(a.Requests) != 100000 || len(a.Requests[0].Segments) == 0 {
			b.Fatal(len(a.Requests))
		}
	}
}
