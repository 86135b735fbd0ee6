package diarize

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// DER is the speaker-timestamp diarization error of one sample or of a
// corpus, in seconds: Total is the reference speaker time (a second of two
// overlapping speakers counts twice). Rate is (FalseAlarm + Missed +
// Confusion) / Total, nil when Total is 0.
type DER struct {
	Rate       *float64
	Total      float64
	FalseAlarm float64
	Missed     float64
	Confusion  float64
}

func (d *DER) add(o DER) {
	d.Total += o.Total
	d.FalseAlarm += o.FalseAlarm
	d.Missed += o.Missed
	d.Confusion += o.Confusion
}

func (d *DER) rate() {
	d.Rate = nil
	if d.Total > 0 {
		d.Rate = new((d.FalseAlarm + d.Missed + d.Confusion) / d.Total)
	}
}

// speakerKey orders labels as the reference does: by speaker number.
func speakerKey(a, b string) int {
	na, ea := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(a, "[S"), "]"))
	nb, eb := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(b, "[S"), "]"))
	switch {
	case ea == nil && eb == nil && na != nb:
		return cmp.Compare(na, nb)
	case (ea == nil) != (eb == nil):
		if ea == nil {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func labels(segs []Segment) []string {
	var out []string
	for _, s := range segs {
		out = append(out, s.Speaker)
	}
	// speakerKey is 0 only for equal labels, so Compact drops duplicates.
	slices.SortFunc(out, speakerKey)
	return slices.Compact(out)
}

// Mapping maps hypothesis speakers to reference speakers one-to-one so that
// the summed overlap of the mapped pairs (over every pair of their
// segments) is largest. Speakers beyond the smaller side stay unmapped.
func Mapping(ref, hyp []Segment) map[string]string {
	rl, hl := labels(ref), labels(hyp)
	if len(rl) == 0 || len(hl) == 0 {
		return map[string]string{}
	}
	n := max(len(rl), len(hl))
	cost := make([][]float64, n)
	for i := range cost {
		cost[i] = make([]float64, n)
	}
	for _, r := range ref {
		for _, h := range hyp {
			if d := min(r.End, h.End) - max(r.Start, h.Start); d > 0 {
				cost[slices.Index(rl, r.Speaker)][slices.Index(hl, h.Speaker)] -= d
			}
		}
	}
	m := map[string]string{}
	for i, j := range assign(cost) {
		if i < len(rl) && j < len(hl) {
			m[hl[j]] = rl[i]
		}
	}
	return m
}

// active lists the speakers with a segment overlapping [start, end).
func active(segs []Segment, start, end float64) []string {
	var out []string
	for _, s := range segs {
		if s.Start < end && s.End > start && !slices.Contains(out, s.Speaker) {
			out = append(out, s.Speaker)
		}
	}
	return out
}

// SegmentDER scores hyp against ref with no collar and overlapped speech
// scored: on each elementary interval d between consecutive segment
// boundaries, with R reference and H hypothesis speakers active and C of the
// hypothesis ones mapped (Mapping) onto an active reference speaker,
// Total += R·d, FalseAlarm += max(0, H−R)·d, Missed += max(0, R−H)·d and
// Confusion += (min(R, H) − C)·d. It is NIST md-eval's formula at collar 0.
func SegmentDER(ref, hyp []Segment) DER {
	mapping := Mapping(ref, hyp)
	var bounds []float64
	for _, s := range slices.Concat(ref, hyp) {
		bounds = append(bounds, s.Start, s.End)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var d DER
	for i := 0; i+1 < len(bounds); i++ {
		start, end := bounds[i], bounds[i+1]
		dur := end - start
		if dur <= 0 {
			continue
		}
		ra, ha := active(ref, start, end), active(hyp, start, end)
		if len(ra) == 0 && len(ha) == 0 {
			continue
		}
		correct := 0
		for _, h := range ha {
			if r, ok := mapping[h]; ok && slices.Contains(ra, r) {
				correct++
			}
		}
		R, H := float64(len(ra)), float64(len(ha))
		d.Total += R * dur
		d.FalseAlarm += max(0, H-R) * dur
		d.Missed += max(0, R-H) * dur
		d.Confusion += max(0, min(R, H)-float64(correct)) * dur
	}
	d.rate()
	return d
}

// DER invalid reasons (speaker_timestamp_der_invalid_reason).
const (
	ReasonNoRefSegs  = "no_ref_timestamped_speaker_segments"
	ReasonNoPredSegs = "no_pred_timestamped_speaker_segments"
)
