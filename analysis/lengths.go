package analysis

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/stats"
)

// AutoLengthBuckets is how many quantile buckets "auto" cuts the requests'
// audio lengths into (terciles).
const AutoLengthBuckets = 3

// LengthBuckets is how the buckets analysis groups a capture's requests by
// the length of their audio (asrprof analyze --length-buckets): auto
// (quantile buckets of the requests' lengths), off, or edges in seconds.
// Its String is what ParseLengthBuckets reads.
type LengthBuckets struct {
	Off bool
	// Edges are the given edges in seconds, ascending; nil (and not Off)
	// is auto.
	Edges []float64
}

// ParseLengthBuckets parses "auto" (or ""), "off", or comma-separated
// edges in seconds, ascending and above zero ("5,15,30": the buckets ≤ 5 s,
// 5–15 s, 15–30 s and > 30 s).
func ParseLengthBuckets(s string) (LengthBuckets, error) {
	switch strings.TrimSpace(s) {
	case "", "auto":
		return LengthBuckets{}, nil
	case "off":
		return LengthBuckets{Off: true}, nil
	}
	var b LengthBuckets
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return LengthBuckets{}, fmt.Errorf("element %d is empty", i+1)
		}
		x, err := strconv.ParseFloat(e, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return LengthBuckets{}, fmt.Errorf("element %d, %q, is not a number of seconds (want auto, off, or edges such as 5,15,30)", i+1, e)
		}
		if x <= 0 {
			return LengthBuckets{}, fmt.Errorf("element %d, %q, must be > 0 seconds", i+1, e)
		}
		if n := len(b.Edges); n > 0 && x <= b.Edges[n-1] {
			return LengthBuckets{}, fmt.Errorf("element %d, %q, is not above the edge before it (%s): give the edges in ascending order", i+1, e, secs(b.Edges[n-1]))
		}
		b.Edges = append(b.Edges, x)
	}
	return b, nil
}

func (b LengthBuckets) String() string {
	if b.Off {
		return "off"
	}
	if b.Edges == nil {
		return "auto"
	}
	return strings.Join(valuesOf(b.Edges, secs), ",")
}

func secs(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// Bucket is one audio-length bucket: the requests whose audio duration d
// has Lo < d ≤ Hi (Lo 0 for the first bucket, Hi +Inf for the last).
type Bucket struct {
	Name       string // "≤ 5 s", "5–15 s", "> 30 s"
	Lo, Hi     float64
	Requests   int     // scored (non-warmup) requests in it
	MinS, MaxS float64 // the shortest and the longest audio among them
}

// LengthSplit is a capture's scored requests in their length buckets.
type LengthSplit struct {
	Auto  bool
	Edges []float64 // the edges used (auto: the quantiles, rounded to two significant digits)
	// Buckets are those that hold scored requests, shortest first.
	Buckets []Bucket
	// Empty names the buckets of the given edges that hold none.
	Empty []string
	// Requests counts the scored requests, Unknown those of them that
	// record no audio duration (in no bucket).
	Requests, Unknown int
	// Of is each request's index in Buckets (every request, warmup
	// included, in requests.jsonl order); -1 for none.
	Of []int `star:"-"`
}

// Split puts requests with audio durations durs (0: unknown) into b's
// buckets; warmup[i] marks the requests the counts leave out. Auto edges
// are the AutoLengthBuckets-quantiles of the scored requests' known
// durations, rounded to two significant digits, keeping those that split
// them (an edge at or above the longest, or below the shortest, would
// leave a bucket empty).
func (b LengthBuckets) Split(durs []float64, warmup []bool) LengthSplit {
	var sp LengthSplit
	var known []float64 // the scored requests' known durations
	for i, d := range durs {
		if i < len(warmup) && warmup[i] {
			continue
		}
		sp.Requests++
		if d > 0 {
			known = append(known, d)
		}
	}
	sp.Unknown = sp.Requests - len(known)
	sort.Float64s(known)
	edges := b.Edges
	if edges == nil && len(known) > 0 {
		sp.Auto = true
		lo, hi := known[0], known[len(known)-1]
		for k := 1; k < AutoLengthBuckets; k++ {
			e := round2(stats.PercentileSorted(known, 100*float64(k)/AutoLengthBuckets))
			if e >= lo && e < hi && (len(edges) == 0 || e > edges[len(edges)-1]) {
				edges = append(edges, e)
			}
		}
	}
	sp.Edges = edges
	bounds := slices.Concat([]float64{0}, edges, []float64{math.Inf(1)})
	all := make([]Bucket, len(edges)+1)
	for i := range all {
		all[i] = Bucket{Name: bucketName(bounds[i], bounds[i+1]), Lo: bounds[i], Hi: bounds[i+1]}
	}
	for _, d := range known { // ascending: a bucket's first is its shortest, its last its longest
		bk := &all[sort.SearchFloat64s(edges, d)] // the first edge ≥ d
		if bk.Requests == 0 {
			bk.MinS = d
		}
		bk.MaxS = d
		bk.Requests++
	}
	// Keep the buckets that hold scored requests; Of indexes them.
	idx := make([]int, len(all))
	for i, bk := range all {
		idx[i] = -1
		if bk.Requests > 0 {
			idx[i] = len(sp.Buckets)
			sp.Buckets = append(sp.Buckets, bk)
		} else if !sp.Auto {
			sp.Empty = append(sp.Empty, bk.Name)
		}
	}
	sp.Of = valuesOf(durs, func(d float64) int {
		if d > 0 {
			return idx[sort.SearchFloat64s(edges, d)]
		}
		return -1
	})
	return sp
}

// round2 rounds x to two significant digits (2.347 → 2.3, 47.2 → 47),
// to the float nearest the decimal (7.1, not 7.1000000000000005).
func round2(x float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 2, 64), 64)
	if err != nil {
		return x
	}
	return r
}

func bucketName(lo, hi float64) string {
	switch {
	case lo == 0 && math.IsInf(hi, 1):
		return "all"
	case lo == 0:
		return "≤ " + secs(hi) + " s"
	case math.IsInf(hi, 1):
		return "> " + secs(lo) + " s"
	}
	return secs(lo) + "–" + secs(hi) + " s"
}

// LengthSplit returns the capture's requests split by b, once per b.
func (c *Capture) LengthSplit(b LengthBuckets) (*LengthSplit, error) {
	return c.lengths.get(b.String(), func() (*LengthSplit, error) {
		rc, err := c.Tables.RequestCols()
		if err != nil {
			return nil, fmt.Errorf("reading requests: %w", err)
		}
		sp := b.Split(rc.AudioDurationS, rc.Warmup)
		return &sp, nil
	})
}

// BucketPasses returns the metrics of every pass over only the requests
// of bucket k of sp (model/summary.Passes under the capture's SLO,
// each pass timed by its whole run: a bucket's req/s is its requests over
// the pass's wall time). Every bucket's are computed at the first call and
// kept with the tables (tables/length_passes.json), as Passes keeps the
// capture's.
func (c *Capture) BucketPasses(sp *LengthSplit, k int) ([]model.PassMetrics, error) {
	all, err := c.splitPasses.get(sp, func() ([][]model.PassMetrics, error) {
		slo, err := summary.SLOOf(c.Bundle.Manifest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Bundle.Dir, err)
		}
		key, _ := json.Marshal(struct {
			Levels  []model.LevelRun `json:"levels"`
			SLO     string           `json:"slo,omitempty"`
			Edges   []float64        `json:"edges"`
			Buckets int              `json:"buckets"`
		}{c.Bundle.Manifest.Levels, slo.String(), sp.Edges, len(sp.Buckets)})
		var all [][]model.PassMetrics
		if c.Tables.Derived("length_passes", string(key), &all) && len(all) == len(sp.Buckets) {
			return all, nil
		}
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		groups := make([][]model.Request, len(sp.Buckets))
		for i := range reqs {
			if i < len(sp.Of) && sp.Of[i] >= 0 {
				groups[sp.Of[i]] = append(groups[sp.Of[i]], reqs[i])
			}
		}
		all = valuesOf(groups, func(g []model.Request) []model.PassMetrics { return summary.Passes(g, c.Bundle.Manifest.Levels, slo) })
		c.Tables.SaveDerived("length_passes", string(key), all)
		return all, nil
	})
	if err != nil {
		return nil, err
	}
	if k < 0 || k >= len(all) {
		return nil, fmt.Errorf("length bucket %d: there are %d", k, len(all))
	}
	return all[k], nil
}
