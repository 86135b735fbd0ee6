package engine

import (
	"cmp"
	"slices"

	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// The span attributes that name the worker of a request behind a router
// (refserver/router.py, docs/REFSERVER.md "The router"):
const (
	// WorkerAttr is on the router's own span: the worker it sent the
	// request to.
	WorkerAttr = "router.worker"
	// InstanceAttr is on the worker's spans: the worker's own name.
	InstanceAttr = "service.instance.id"
)

// Workers says which worker served each request.
type Workers struct {
	// Of is each request's worker ("" where no span names one): the
	// router's WorkerAttr, else the worker's own InstanceAttr.
	Of []string `star:"-"`
	// Names are the distinct workers, sorted; "" is not one.
	Names []string
	// Routed counts the requests a router span names a worker for;
	// Confirmed those whose worker spans name the same instance, and
	// Mismatched those whose worker spans name another (a broken join).
	Routed, Confirmed, Mismatched int
}

// FindWorkers reads each request's worker from the server spans of the n
// requests (s's RequestIndex joins them; s may be nil).
func FindWorkers(n int, s *columns.Spans) *Workers {
	w := &Workers{Of: make([]string, n)}
	if s == nil {
		return w
	}
	router := make([]string, n)
	inst := make([]string, n)
	client := s.Service.Code(clientService)
	for j := range s.RequestIndex {
		r := int(s.RequestIndex[j])
		if r < 0 || r >= n || s.Service.Codes[j] == client {
			continue
		}
		wk, _ := s.AttrString(j, WorkerAttr) // "" where the span has none
		id, _ := s.AttrString(j, InstanceAttr)
		router[r], inst[r] = cmp.Or(router[r], wk), cmp.Or(inst[r], id) // each request's first
	}
	for i := 0; i < n; i++ {
		switch {
		case router[i] != "":
			w.Of[i] = router[i]
			w.Routed++
			if inst[i] == router[i] {
				w.Confirmed++
			} else if inst[i] != "" {
				w.Mismatched++
			}
		case inst[i] != "":
			w.Of[i] = inst[i]
		}
	}
	w.Names = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(w.Of))), func(s string) bool { return s == "" })
	return w
}

// Share is one worker's part of one level's work, over its scored
// (non-warmup) passes.
type Share struct {
	Level, Worker string
	// Requests counts the scored requests sent to the worker (any status);
	// OK those that succeeded.
	Requests, OK int
	// BusyS is the time the worker had a request inside the server's total
	// (the union of their total stages), summed over the level's passes.
	BusyS float64
	// LatencyMeanS is the mean client latency of its OK requests, TotalMeanS
	// their mean server total (0 where none has one).
	LatencyMeanS, TotalMeanS float64
	// TotalRTF is the server total per second of audio over its OK requests
	// with a total and a known audio length (sum over sum; 0 where none):
	// what tells a slow worker from one that was sent the longer clips.
	TotalRTF float64
}

// Balance is each level's Share per worker (levels in order, workers in
// w.Names order); rows are the preset's stages (for each request's total).
func Balance(reqs *columns.RequestCols, rows *columns.StageRows, w *Workers, order []string) []Share {
	type key struct{ level, worker string }
	type passKey struct {
		level, worker string
		repeat        int32
	}
	type acc struct {
		requests, ok     int
		lat, tot         []float64
		rtfTot, rtfAudio float64
	}
	by := map[key]*acc{}
	spans := map[passKey][]interval{}
	totalCode := rows.Stage.Code(Total)
	totalOf := slices.Repeat([]int{-1}, reqs.N) // row index of each request's total, -1 for none
	for j := 0; j < rows.Len(); j++ {
		if r := int(rows.RequestIndex[j]); r < reqs.N && rows.Stage.Codes[j] == totalCode {
			totalOf[r] = j
		}
	}
	ok := reqs.Status.Code(model.StatusOK)
	for i := 0; i < reqs.N; i++ {
		if reqs.Warmup[i] || i >= len(w.Of) || w.Of[i] == "" {
			continue
		}
		k := key{reqs.Level.At(i), w.Of[i]}
		a := entry(by, k)
		a.requests++
		j := totalOf[i]
		if j >= 0 && rows.HasBounds[j] {
			pk := passKey{k.level, k.worker, repeatOf(reqs, i)}
			spans[pk] = append(spans[pk], interval{rows.StartUnixNs[j], rows.EndUnixNs[j]})
		}
		if reqs.Status.Codes[i] != ok {
			continue
		}
		a.ok++
		a.lat = append(a.lat, reqs.LatencyS[i])
		if j >= 0 && rows.HasDuration[j] {
			a.tot = append(a.tot, rows.DurationS[j])
			if i < len(reqs.AudioDurationS) && reqs.AudioDurationS[i] > 0 {
				a.rtfTot += rows.DurationS[j]
				a.rtfAudio += reqs.AudioDurationS[i]
			}
		}
	}
	busy := map[key]float64{}
	for pk, ivs := range spans {
		n := int64(0) // the length of their union
		for _, v := range merge(ivs) {
			n += v.b - v.a
		}
		busy[key{pk.level, pk.worker}] += float64(n) / 1e9
	}
	var out []Share
	for _, lv := range order {
		for _, wk := range w.Names {
			a := by[key{lv, wk}]
			if a == nil {
				continue
			}
			sh := Share{Level: lv, Worker: wk, Requests: a.requests, OK: a.ok,
				BusyS: busy[key{lv, wk}], LatencyMeanS: stats.Mean(a.lat), TotalMeanS: stats.Mean(a.tot)}
			if a.rtfAudio > 0 {
				sh.TotalRTF = a.rtfTot / a.rtfAudio
			}
			out = append(out, sh)
		}
	}
	return out
}
