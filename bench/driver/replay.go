package driver

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/asrprof/asrprof/bench/load"
)

// Replay is an open-loop pass on a recorded schedule: the send offset of
// each request from the pass's start, and the item it sends.
type Replay struct {
	Offsets []time.Duration // non-decreasing
	Items   []int           // indices into the driver's Items
}

// NewReplay turns a trace (load.ParseTrace) into a replay of items: an
// arrival with a sample id sends that sample; one with an audio duration
// the item of the closest AudioS (items of the same length in turn); one
// with neither the next item in turn (round-robin over the dataset, in its
// order). speed divides the trace's times (2: twice as fast; 0 counts as
// 1). file names the trace in errors.
func NewReplay(items []Item, arr []load.Arrival, speed float64, file string) (*Replay, error) {
	if len(items) == 0 {
		return nil, &load.TraceError{File: file, Msg: "no samples to replay the trace with"}
	}
	speed = cmp.Or(speed, 1)
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, fmt.Errorf("replay speed %g: want a number > 0", speed)
	}
	byID := make(map[string]int, len(items))
	near := &nearest{groups: map[float64][]int{}, next: map[float64]int{}}
	for i := range items {
		if _, dup := byID[items[i].SampleID]; !dup {
			byID[items[i].SampleID] = i
		}
		near.groups[items[i].AudioS] = append(near.groups[items[i].AudioS], i)
	}
	near.lens = slices.Sorted(maps.Keys(near.groups))
	r := &Replay{Offsets: make([]time.Duration, len(arr)), Items: make([]int, len(arr))}
	turn := 0
	for k, a := range arr {
		r.Offsets[k] = time.Duration(math.Round(float64(a.At) / speed))
		switch {
		case a.SampleID != "":
			i, ok := byID[a.SampleID]
			if !ok {
				return nil, &load.TraceError{File: file, Line: a.Line,
					Msg: fmt.Sprintf("sample_id %q is not in the dataset (%d samples, the first %q)", a.SampleID, len(items), items[0].SampleID)}
			}
			r.Items[k] = i
		case a.AudioS > 0:
			r.Items[k] = near.pick(a.AudioS)
		default:
			r.Items[k] = turn % len(items)
			turn++
		}
	}
	return r, nil
}

// Span is the time from the first send to the last.
func (r *Replay) Span() time.Duration {
	if len(r.Offsets) == 0 {
		return 0
	}
	return r.Offsets[len(r.Offsets)-1] - r.Offsets[0]
}

// MeanRate is the replay's average rate, requests per second: the gaps
// between its sends averaged (0 for fewer than two sends or no span).
func (r *Replay) MeanRate() float64 {
	if s := r.Span(); s > 0 {
		return float64(len(r.Offsets)-1) / s.Seconds()
	}
	return 0
}

// nearest finds the item of the closest audio duration; items of one
// duration take turns.
type nearest struct {
	lens   []float64         // distinct durations, ascending
	groups map[float64][]int // the items of each, in order
	next   map[float64]int   // each group's turn
}

// pick returns the item closest to d seconds (the shorter one on a tie).
func (n *nearest) pick(d float64) int {
	g, _ := slices.BinarySearch(n.lens, d)
	if g == len(n.lens) || (g > 0 && d-n.lens[g-1] <= n.lens[g]-d) {
		g--
	}
	l := n.lens[g]
	i := n.groups[l][n.next[l]%len(n.groups[l])]
	n.next[l]++
	return i
}
