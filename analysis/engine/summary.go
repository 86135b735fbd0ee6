package engine

import (
	"math"

	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/tables"
)

// Stages the summary adds to a preset's:
const (
	// ClientOverhead is client latency minus the server's total.
	ClientOverhead = "client overhead"
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

// Level is the stage table's row of one level: over its measured
// (non-warmup) successful requests, N had the preset's telemetry and
// Missing did not; Stages has every name asked for, nil where no request
// had the stage.
type Level struct {
	Level      string
	N, Missing int
	Stages     map[string]*Stat
}

// Summarize aggregates rows (Derive's, or stages.parquet's) per level,
// for the levels in order that have measured requests, and for each of
// names: a stage of the rows, or ClientOverhead.
func Summarize(reqs *tables.RequestCols, rows *tables.StageRows, order []string, names []string) []Level {
	type acc struct {
		n, missing int
		vals       map[string][]float64
	}
	byLevel := map[string]*acc{}
	stageOf := make([]string, len(rows.Stage.Dict))
	copy(stageOf, rows.Stage.Dict)
	totalCode := rows.Stage.Code(Total)
	ok := reqs.Status.Code(trace.StatusOK)
	k := 0 // cursor into rows, which are in request order
	for i := 0; i < reqs.N; i++ {
		from := k
		for k < rows.Len() && int(rows.RequestIndex[k]) == i {
			k++
		}
		if reqs.Warmup[i] || reqs.Status.Codes[i] != ok {
			continue
		}
		level := reqs.Level.At(i)
		a := byLevel[level]
		if a == nil {
			a = &acc{vals: map[string][]float64{}}
			byLevel[level] = a
		}
		if k == from {
			a.missing++
			continue
		}
		a.n++
		var total, parts float64
		hasTotal := false
		for j := from; j < k; j++ {
			if !rows.HasDuration[j] {
				continue
			}
			c := rows.Stage.Codes[j]
			a.vals[stageOf[c]] = append(a.vals[stageOf[c]], rows.DurationS[j])
			if c == totalCode {
				total, hasTotal = rows.DurationS[j], true
			} else {
				parts += rows.DurationS[j]
			}
		}
		if hasTotal {
			a.vals[ClientOverhead] = append(a.vals[ClientOverhead], reqs.LatencyS[i]-total)
			u := total - parts
			if math.Abs(u) < 1e-9 { // rounding of the stages' own subtractions
				u = 0
			}
			a.vals[Unattributed] = append(a.vals[Unattributed], u)
		}
		if len(reqs.StartUnixNs) == reqs.N {
			st, up, fb, end := reqs.StartUnixNs[i], reqs.UploadDoneUnixNs[i], reqs.FirstByteUnixNs[i], reqs.EndUnixNs[i]
			if st > 0 && up >= st && fb >= up && end >= fb {
				a.vals[ClientUpload] = append(a.vals[ClientUpload], float64(up-st)/1e9)
				a.vals[ClientWait] = append(a.vals[ClientWait], float64(fb-up)/1e9)
				a.vals[ClientResponse] = append(a.vals[ClientResponse], float64(end-fb)/1e9)
			}
		}
	}
	var out []Level
	for _, lv := range order {
		a := byLevel[lv]
		if a == nil {
			continue
		}
		l := Level{Level: lv, N: a.n, Missing: a.missing, Stages: map[string]*Stat{}}
		for _, name := range names {
			xs := a.vals[name]
			if len(xs) == 0 {
				l.Stages[name] = nil
				continue
			}
			l.Stages[name] = &Stat{MeanMs: 1000 * stats.Mean(xs), P95Ms: 1000 * stats.Percentile(xs, 95), N: len(xs)}
		}
		out = append(out, l)
	}
	return out
}
