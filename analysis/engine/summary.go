package engine

import (
	"math"
	"slices"

	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// Stages the summary adds to a preset's:
const (
	// ClientOverhead is client latency minus the server's total.
	ClientOverhead = "client overhead"
	// Router is the time a router in front of the server spent on the
	// request (its span less the server's): between the client and the
	// server, so outside the server's total; client overhead is then
	// client latency − total − router.
	Router = "router"
	// Unattributed is the server's total minus every other server stage
	// the request has: time no stage of the preset covers, so that the
	// stage table adds up to the total.
	Unattributed = "unattributed"
	// The client's own view of its latency, from its timestamps: sending
	// the request (to upload done), waiting for the answer's first byte,
	// and reading the answer (first byte to end).
	ClientUpload   = "client upload"
	ClientWait     = "client wait"
	ClientResponse = "client response"
)

// Stat summarizes one stage of one level, in milliseconds.
type Stat struct {
	MeanMs, P95Ms float64
	N             int
}

// LevelStages is the stage table's row of one level: over its measured
// (non-warmup) successful requests, N had the preset's telemetry and
// Missing did not; Stages has every name asked for, nil where no request
// had the stage.
type LevelStages struct {
	Level      string
	Worker     string // the group of SummarizeGroups' rows: the worker ("" for requests no span names one)
	N, Missing int
	Stages     map[string]*Stat
}

// SummarizeGroups aggregates rows (Derive's, or stages.parquet's) per
// level, for the levels in order that have measured requests, and for each
// of names (a stage of the rows, or ClientOverhead); with group not nil,
// per level and group: group[i] names request i's group ("" for none),
// groups is their order (a router's workers, w.Of and w.Names; the length
// buckets), and each row's Worker is its group.
func SummarizeGroups(reqs *columns.RequestCols, rows *columns.StageRows, order []string, names []string, worker []string, workers []string) []LevelStages {
	byLevel := map[[2]string]*levelAcc{}
	stageOf := rows.Stage.Dict
	// A slot per stage name, then the client's and the derived parts:
	// appending by code, not by name, spares a map lookup per row.
	slot := map[string]int{}
	codeSlot := make([]int, len(stageOf))
	for c, name := range stageOf {
		codeSlot[c] = ordinal(slot, name)
	}
	overheadK, unattrK := ordinal(slot, ClientOverhead), ordinal(slot, Unattributed)
	uploadK, waitK, responseK := ordinal(slot, ClientUpload), ordinal(slot, ClientWait), ordinal(slot, ClientResponse)
	slots := len(slot)
	totalCode := rows.Stage.Code(Total)
	routerCode := rows.Stage.Code(Router)
	ok := reqs.Status.Code(model.StatusOK)
	keyOf := func(i int) [2]string {
		key := [2]string{reqs.Level.At(i), ""}
		if worker != nil && i < len(worker) {
			key[1] = worker[i]
		}
		return key
	}
	// Each group's slots are sized to its request count first: most
	// stages have one value a request, and growing a slice by appends
	// was a quarter of the stage table's CPU over 100,000 requests.
	count := map[[2]string]int{}
	for i := 0; i < reqs.N; i++ {
		if !reqs.Warmup[i] && reqs.Status.Codes[i] == ok {
			count[keyOf(i)]++
		}
	}
	for key, n := range count {
		a := &levelAcc{vals: make([][]float64, slots), slot: slot}
		for j := range a.vals {
			a.vals[j] = make([]float64, 0, n)
		}
		byLevel[key] = a
	}
	k := 0 // cursor into rows, which are in request order
	for i := 0; i < reqs.N; i++ {
		from := k
		for k < rows.Len() && int(rows.RequestIndex[k]) == i {
			k++
		}
		if reqs.Warmup[i] || reqs.Status.Codes[i] != ok {
			continue
		}
		a := byLevel[keyOf(i)]
		if k == from {
			a.missing++
			continue
		}
		a.n++
		var total, parts, router float64
		hasTotal := false
		for j := from; j < k; j++ {
			if !rows.HasDuration[j] {
				continue
			}
			c := rows.Stage.Codes[j]
			a.vals[codeSlot[c]] = append(a.vals[codeSlot[c]], rows.DurationS[j])
			if c == totalCode {
				total, hasTotal = rows.DurationS[j], true
			} else if c == routerCode {
				router = rows.DurationS[j]
			} else {
				parts += rows.DurationS[j]
			}
		}
		if hasTotal {
			a.vals[overheadK] = append(a.vals[overheadK], reqs.LatencyS[i]-total-router)
			u := total - parts
			if math.Abs(u) < 1e-9 { // rounding of the stages' own subtractions
				u = 0
			}
			a.vals[unattrK] = append(a.vals[unattrK], u)
		}
		if len(reqs.StartUnixNs) == reqs.N {
			st, up, fb, end := reqs.StartUnixNs[i], reqs.UploadDoneUnixNs[i], reqs.FirstByteUnixNs[i], reqs.EndUnixNs[i]
			if st > 0 && up >= st && fb >= up && end >= fb {
				a.vals[uploadK] = append(a.vals[uploadK], float64(up-st)/1e9)
				a.vals[waitK] = append(a.vals[waitK], float64(fb-up)/1e9)
				a.vals[responseK] = append(a.vals[responseK], float64(end-fb)/1e9)
			}
		}
	}
	var out []LevelStages
	for _, lv := range order {
		for _, wk := range workers {
			out = appendLevel(out, byLevel[[2]string{lv, wk}], lv, wk, names)
		}
		if !slices.Contains(workers, "") {
			// the level's row without groups; else requests no span names a worker for
			out = appendLevel(out, byLevel[[2]string{lv, ""}], lv, "", names)
		}
	}
	return out
}

type levelAcc struct {
	n, missing int
	vals       [][]float64    // by slot
	slot       map[string]int // a stage's (or part's) slot in vals
}

func appendLevel(out []LevelStages, a *levelAcc, lv, wk string, names []string) []LevelStages {
	if a == nil {
		return out
	}
	l := LevelStages{Level: lv, Worker: wk, N: a.n, Missing: a.missing, Stages: map[string]*Stat{}}
	for _, name := range names {
		var xs []float64
		if k, ok := a.slot[name]; ok {
			xs = a.vals[k]
		}
		if len(xs) == 0 {
			l.Stages[name] = nil
			continue
		}
		// xs is the accumulator's own: the percentile may reorder it.
		l.Stages[name] = &Stat{MeanMs: 1000 * stats.Mean(xs), P95Ms: 1000 * stats.PercentileInPlace(xs, 95), N: len(xs)}
	}
	return append(out, l)
}
