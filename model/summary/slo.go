package summary

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/model"
)

// SLO is a set of per-request limits (--slo latency=0.5s,ttft=0.2s). A
// request meets the SLO when it succeeded and every limit holds for it;
// goodput is the rate of such requests (NewAcc).
type SLO struct {
	Limits []Limit
}

// Limit is one per-request limit: the request's value of Metric must be
// at most Max (seconds, or a ratio for rtf).
type Limit struct {
	Metric string
	Max    float64
}

// sloMetric is one metric a limit may name: how to read it from a request
// (ok false when the request did not measure it) and what it needs.
type sloMetric struct {
	name     string
	ratio    bool // unitless (rtf); else seconds
	needs    string
	value    func(r *model.Request) (float64, bool)
	realtime bool // only realtime protocols measure it
	stream   bool // needs streamed output (not plain openai)
}

func ptr(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// sloMetrics are the per-request values model.Request records.
var sloMetrics = []sloMetric{
	{name: "latency", needs: "every protocol", value: func(r *model.Request) (float64, bool) { return r.LatencyS, true }},
	{name: "ttft", needs: "openai-stream", stream: true, value: func(r *model.Request) (float64, bool) {
		return r.TTFTS, r.FirstTokenUnixNs != 0
	}},
	{name: "rtf", ratio: true, needs: "every protocol (latency / audio duration)", value: func(r *model.Request) (float64, bool) {
		return r.LatencyS / r.AudioDurationS, r.AudioDurationS > 0
	}},
	{name: "chunk_gap", needs: "openai-stream (the request's largest gap between chunks)", stream: true, value: func(r *model.Request) (float64, bool) {
		if len(r.ChunkGapsS) == 0 {
			return 0, false
		}
		return slices.Max(r.ChunkGapsS), true
	}},
	{name: "first_update", needs: "realtime protocols", realtime: true, value: func(r *model.Request) (float64, bool) { return ptr(r.FirstUpdateS) }},
	{name: "final_after_stop", needs: "realtime protocols", realtime: true, value: func(r *model.Request) (float64, bool) { return ptr(r.FinalAfterStopS) }},
	{name: "lag_p95", needs: "realtime protocols (the session's p95 update lag)", realtime: true, value: func(r *model.Request) (float64, bool) { return ptr(r.LagP95S) }},
	{name: "lag_max", needs: "realtime protocols (the session's worst update lag)", realtime: true, value: func(r *model.Request) (float64, bool) { return ptr(r.LagMaxS) }},
}

func metricOf(name string) *sloMetric {
	if i := slices.IndexFunc(sloMetrics, func(m sloMetric) bool { return m.name == name }); i >= 0 {
		return &sloMetrics[i]
	}
	return nil
}

// SLOMetricsHelp lists the metrics a limit may name, one line each.
func SLOMetricsHelp() string {
	var b strings.Builder
	for _, m := range sloMetrics {
		unit := "seconds (0.5s, 500ms)"
		if m.ratio {
			unit = "a ratio (0.3)"
		}
		fmt.Fprintf(&b, "  %-17s %s; %s\n", m.name, unit, m.needs)
	}
	return b.String()
}

// ParseSLO parses "latency=0.5s,ttft=200ms,rtf=0.3". Seconds take a Go
// duration (0.5s, 200ms) or a bare number of seconds; rtf is a bare ratio.
// An empty string is the empty SLO (no goodput).
func ParseSLO(s string) (SLO, error) {
	var out SLO
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || val == "" {
			return SLO{}, fmt.Errorf("slo %q: %q: want metric=limit, such as latency=0.5s", s, part)
		}
		m := metricOf(name)
		if m == nil {
			if base, _, cut := strings.Cut(name, "_p"); cut && metricOf(base) != nil {
				return SLO{}, fmt.Errorf("slo %q: %q is a statistic of a pass, not a per-request limit: write %s=%s (goodput counts each request against it; an attainment of 95 %% or more is what a p95 limit asks)", s, name, base, val)
			}
			return SLO{}, fmt.Errorf("slo %q: unknown metric %q; the metrics are:\n%s", s, name, SLOMetricsHelp())
		}
		if slices.ContainsFunc(out.Limits, func(l Limit) bool { return l.Metric == name }) {
			return SLO{}, fmt.Errorf("slo %q: %s given twice", s, name)
		}
		x, err := parseLimit(val, m.ratio)
		if err != nil {
			return SLO{}, fmt.Errorf("slo %q: %s=%s: %v", s, name, val, err)
		}
		out.Limits = append(out.Limits, Limit{Metric: name, Max: x})
	}
	return out, nil
}

func parseLimit(v string, ratio bool) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil && !ratio {
		d, derr := time.ParseDuration(v)
		if derr != nil {
			return 0, fmt.Errorf("want a duration such as 0.5s or 200ms, or a number of seconds")
		}
		x, err = d.Seconds(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("want a number such as 0.3")
	}
	if !(x > 0) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("must be > 0")
	}
	return x, nil
}

// IsZero reports whether s has no limits.
func (s SLO) IsZero() bool { return len(s.Limits) == 0 }

// String is s in ParseSLO's syntax (seconds as Go durations).
func (s SLO) String() string {
	parts := make([]string, len(s.Limits))
	for i, l := range s.Limits {
		if metricOf(l.Metric) != nil && metricOf(l.Metric).ratio {
			parts[i] = l.Metric + "=" + strconv.FormatFloat(l.Max, 'g', -1, 64)
		} else {
			parts[i] = l.Metric + "=" + time.Duration(math.Round(l.Max*1e9)).String()
		}
	}
	return strings.Join(parts, ",")
}

// MarshalText writes s as String does (the manifest records it so).
func (s SLO) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses ParseSLO's syntax.
func (s *SLO) UnmarshalText(b []byte) error {
	v, err := ParseSLO(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Check says whether s can be measured with protocol: a limit on a value
// the protocol never records would fail every request.
func (s SLO) Check(protocol string, realtime bool) error {
	for _, l := range s.Limits {
		m := metricOf(l.Metric)
		switch {
		case m.realtime && !realtime:
			return fmt.Errorf("slo %s: %s is measured by realtime protocols only (funasr-ws, openai-realtime), not %s", s, l.Metric, protocol)
		case m.stream && (realtime || protocol != "openai-stream"):
			return fmt.Errorf("slo %s: %s needs streamed output (--protocol openai-stream), not %s", s, l.Metric, protocol)
		}
	}
	return nil
}

// Meets reports whether r meets every limit of s, and the limits it
// missed. A failed request meets none ("error"); a limit whose value the
// request did not record counts as missed.
func (s SLO) Meets(r *model.Request) (bool, []string) {
	if r.Status != model.StatusOK {
		return false, []string{"error"}
	}
	var missed []string
	for _, l := range s.Limits {
		v, ok := metricOf(l.Metric).value(r)
		if !ok || !(v <= l.Max) {
			missed = append(missed, l.Metric)
		}
	}
	return len(missed) == 0, missed
}

// Canceled reports whether r was cut off by the client's own stop (Ctrl-C,
// a pass's end): such requests say nothing about the server and are left
// out of goodput and attainment.
func Canceled(r *model.Request) bool {
	return r.Status != model.StatusOK && r.ErrorKind == model.FailCanceled
}

// sloTally counts a pass's requests against an SLO one at a time (Acc).
type sloTally struct {
	slo                     SLO
	met, counted, cancelled int
	misses                  map[string]int
}

func (t *sloTally) add(r *model.Request) {
	if t.slo.IsZero() {
		return
	}
	if Canceled(r) {
		t.cancelled++
		return
	}
	t.counted++
	ok, missed := t.slo.Meets(r)
	if ok {
		t.met++
		return
	}
	if t.misses == nil {
		t.misses = map[string]int{}
	}
	for _, k := range missed {
		t.misses[k]++
	}
}

// fill sets the SLO fields of m, a new pass's metrics (Acc.Pass's) with
// its WallS set, and nothing under a zero SLO:
//
//   - slo_counted = requests − those canceled by the client's stop
//   - slo_met = counted requests that succeeded and met every limit
//   - goodput_req_s = slo_met / wall_s
//   - slo_attainment = slo_met / slo_counted (nil when nothing counted)
//   - slo_misses: per limit (and "error"), the counted requests that missed it
func (t *sloTally) fill(m *model.PassMetrics) {
	if t.slo.IsZero() {
		return
	}
	m.SLO = t.slo.String()
	m.SLOMet, m.SLOCounted, m.SLOCanceled, m.SLOMisses = t.met, t.counted, t.cancelled, t.misses
	g := 0.0
	if m.WallS > 0 {
		g = float64(m.SLOMet) / m.WallS
	}
	m.GoodputReqS = &g
	if m.SLOCounted > 0 {
		m.SLOAttainment = new(float64(m.SLOMet) / float64(m.SLOCounted))
	}
}

// SLOOf is the SLO a capture ran under: manifest.json's config "slo"
// (empty when the capture had none).
func SLOOf(m model.Manifest) (SLO, error) {
	s, _ := m.Config["slo"].(string)
	slo, err := ParseSLO(s)
	if err != nil {
		return SLO{}, fmt.Errorf("manifest config slo: %w", err)
	}
	return slo, nil
}
