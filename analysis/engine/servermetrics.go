package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/scripts"
	"github.com/asrprof/asrprof/stats"
)

// The server's own /metrics as evidence (docs/ANALYSIS.md, "The server's
// own /metrics"): server_metrics.jsonl, which the metrics probe writes
// (bundle.ServerMetricsRecord), read under a metrics map that says which
// of the server's metrics plays which role.

// MetricsHistogramRoles are the roles of a server's request-time
// histograms, in table order: queue (waiting before the model runs the
// request), prefill, decode, inference (prefill and decode), e2e (arrival
// to answer), ttft (time to the first token).
var MetricsHistogramRoles = []string{"queue", "prefill", "decode", "inference", "e2e", "ttft"}

// MetricsGaugeRoles are the roles of a server's gauges: the requests
// running (in the model's batches) and waiting (queued).
var MetricsGaugeRoles = []string{"running", "waiting"}

// BuiltinMetricsMap is the built-in metrics map's path in package scripts'
// files: vLLM's and SGLang's names.
const BuiltinMetricsMap = "metrics/roles.json"

// MetricsServer is one server's names in a metrics map.
type MetricsServer struct {
	// Server names the server ("vllm", "sglang"; "custom" when a user's map
	// leaves it out).
	Server string `json:"server"`
	// Source says where the names were taken from (a file of the server's
	// code, with its version).
	Source string `json:"source,omitempty"`
	// Unit of the histograms' observations: "s" (the default, as
	// Prometheus' conventions want) or "ms".
	Unit string `json:"unit,omitempty"`
	// Histograms maps a role of MetricsHistogramRoles to the histogram's
	// name (without _bucket, _sum or _count).
	Histograms map[string]string `json:"histograms,omitempty"`
	// Gauges maps a role of MetricsGaugeRoles to the gauge's name.
	Gauges map[string]string `json:"gauges,omitempty"`

	builtin bool // of the built-in map: tried after a user's servers
}

// MetricsMap is a metrics map file: servers, tried in order.
type MetricsMap struct {
	About   string          `json:"about,omitempty"`
	Servers []MetricsServer `json:"servers"`
}

// scale is the seconds of one unit of the server's histograms.
func (s *MetricsServer) scale() float64 {
	if s.Unit == "ms" {
		return 1e-3
	}
	return 1
}

// ParseMetricsMap reads a metrics map file's contents; name (the file)
// starts every error, which names the field that is wrong.
func ParseMetricsMap(name string, data []byte) (*MetricsMap, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("metrics map %s: %s", name, fmt.Sprintf(format, a...))
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var m MetricsMap
	if err := d.Decode(&m); err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return nil, bad("line %d: %v", line, se)
		}
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return nil, bad("field %s: %s, want %s", te.Field, te.Value, te.Type)
		}
		return nil, bad("%v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(m.Servers) == 0 {
		return nil, bad(`field servers: no server (want [{"server": ..., "histograms": {role: name}, "gauges": {role: name}}])`)
	}
	for i := range m.Servers {
		s := &m.Servers[i]
		at := fmt.Sprintf("servers[%d]", i)
		s.Server = cmp.Or(strings.TrimSpace(s.Server), "custom")
		switch s.Unit {
		case "", "s", "seconds":
			s.Unit = "s"
		case "ms", "milliseconds":
			s.Unit = "ms"
		default:
			return nil, bad("field %s.unit: %q, want s or ms", at, s.Unit)
		}
		if len(s.Histograms)+len(s.Gauges) == 0 {
			return nil, bad("%s (%s): no histograms and no gauges", at, s.Server)
		}
		for _, kind := range []struct {
			field string
			names map[string]string
			roles []string
		}{{"histograms", s.Histograms, MetricsHistogramRoles}, {"gauges", s.Gauges, MetricsGaugeRoles}} {
			for _, role := range slices.Sorted(maps.Keys(kind.names)) {
				metric := kind.names[role]
				_, series := histogramFamily(metric)
				switch {
				case !slices.Contains(kind.roles, role):
					return nil, bad("field %s.%s: unknown role %q (roles: %s)", at, kind.field, role, strings.Join(kind.roles, ", "))
				case strings.TrimSpace(metric) == "":
					return nil, bad("field %s.%s.%s: no metric name", at, kind.field, role)
				case kind.field == "histograms" && series:
					return nil, bad("field %s.%s.%s: %q: give the histogram's name, without _bucket, _sum or _count", at, kind.field, role, metric)
				}
			}
		}
	}
	return &m, nil
}

// LoadMetricsMap returns the metrics map to read a bundle with: the
// servers of the map file at path, then the built-in ones (which
// ReadServerMetrics tries only when the file holds none of the user's
// names); only the built-in ones when path is "".
func LoadMetricsMap(path string) (*MetricsMap, error) {
	data, err := fs.ReadFile(scripts.FS, BuiltinMetricsMap)
	if err != nil {
		return nil, err
	}
	m, err := ParseMetricsMap("scripts/"+BuiltinMetricsMap, data)
	if err != nil {
		return nil, err
	}
	for i := range m.Servers {
		m.Servers[i].builtin = true
	}
	if path == "" {
		return m, nil
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("metrics map: %w", err)
	}
	u, err := ParseMetricsMap(path, data)
	if err != nil {
		return nil, err
	}
	u.Servers = append(u.Servers, m.Servers...)
	return u, nil
}

// HistStats is a histogram over a pass (or a level's passes): Count
// observations, their mean (ΔSum/ΔCount) and the quantiles of the buckets'
// increases (stats.BucketQuantile), in seconds; P50S and P95S are NaN
// when the series has no buckets (a summary's _sum and _count).
type HistStats struct {
	Count, SumS, MeanS, P50S, P95S float64
}

// GaugeStats is a gauge over the Scrapes sent inside a pass (or a level's
// passes): its mean and max, the label sets summed in each scrape.
type GaugeStats struct {
	Mean, Max float64
	Scrapes   int
}

// MetricsPass is one pass's numbers of the server's roles: histogram
// roles with observations in the pass, gauge roles with a scrape inside
// it.
type MetricsPass struct {
	Level                  string
	Repeat                 int
	Warmup                 bool
	StartUnixNs, EndUnixNs int64
	// FromUnixNs and ToUnixNs are the scrapes that bracket the pass: the
	// histograms' increases count from the first to the second.
	FromUnixNs, ToUnixNs int64
	Roles                map[string]HistStats
	Gauges               map[string]GaugeStats
}

// MetricsLevel is a level's numbers over its scored passes: per histogram
// role the observations of all of them (Count, SumS, MeanS = ΣSum/ΣCount)
// and the mean of their quantiles weighted by their counts; per gauge role
// the mean over all their scrapes and the max.
type MetricsLevel struct {
	Level  string
	Passes int // scored passes of the level in the file
	Roles  map[string]HistStats
	Gauges map[string]GaugeStats
}

// ServerMetrics is what a bundle's server_metrics.jsonl says under a
// metrics map.
type ServerMetrics struct {
	// File says whether the bundle has server_metrics.jsonl.
	File bool
	// Server is the map's server whose names the file holds most of (the
	// first such; a user's server before the built-in ones); "" when it
	// holds none. Source is its entry's source, Unit its unit.
	Server, Source, Unit string
	// Names maps each role of Server whose metric the file holds to that
	// metric's name.
	Names map[string]string
	// Passes are the passes the probe summarised, in the order they began.
	Passes []MetricsPass `star:"-"`
}

// HasRoles reports whether the file holds a metric of the map.
func (sm *ServerMetrics) HasRoles() bool { return sm != nil && len(sm.Names) > 0 }

// gaugePoint is a gauge's value (its label sets summed) in one scrape.
type gaugePoint struct {
	ts int64
	v  float64
}

// gaugeTrack follows gauges through the sample lines (written when a
// series changed) and gives each its value in every scrape.
type gaugeTrack struct {
	cur    map[string]map[string]float64 // name → label set → newest value
	points map[string][]gaugePoint
}

// add takes one line of the file, in file order.
func (g *gaugeTrack) add(r *bundle.ServerMetricsRecord) {
	switch r.Kind {
	case bundle.MetricsKindSample:
		if m, ok := g.cur[r.Name]; ok && r.Value != nil {
			set, _ := json.Marshal(r.Labels.Map) // its keys sorted
			m[string(set)] = float64(*r.Value)
		}
	case bundle.MetricsKindScrape:
		for name, m := range g.cur {
			sum, n := 0.0, 0
			for _, v := range m {
				if !math.IsNaN(v) {
					sum += v
					n++
				}
			}
			if n > 0 {
				g.points[name] = append(g.points[name], gaugePoint{r.TsUnixNs, sum})
			}
		}
	}
}

// gaugeOver is a gauge over the scrapes sent in [start, end]; false when
// none was.
func gaugeOver(pts []gaugePoint, start, end int64) (GaugeStats, bool) {
	var g GaugeStats
	for _, p := range pts {
		if p.ts < start || p.ts > end {
			continue
		}
		if g.Scrapes == 0 || p.v > g.Max {
			g.Max = p.v
		}
		g.Mean += p.v // the sum, until divided
		g.Scrapes++
	}
	if g.Scrapes == 0 {
		return g, false
	}
	g.Mean /= float64(g.Scrapes)
	return g, true
}

// HistogramOver is the histogram name over one pass, from the pass's
// period lines (recs; others are skipped): the increases of name_count,
// name_sum and of each name_bucket (by le), each summed over the label
// sets; observations are scaled to seconds by scale. False when the pass
// had no observation.
func HistogramOver(recs []bundle.ServerMetricsRecord, name string, scale float64) (HistStats, bool) {
	var count, sum float64
	hasCount := false
	byLe := map[float64]float64{}
	for i := range recs {
		r := &recs[i]
		if r.Kind != bundle.MetricsKindPeriod || r.Delta == nil || !strings.HasPrefix(r.Name, name) {
			continue
		}
		d := float64(*r.Delta)
		switch r.Name[len(name):] {
		case "_count":
			count += d
			hasCount = true
		case "_sum":
			sum += d
		case "_bucket":
			if le, err := strconv.ParseFloat(r.Labels.Map["le"], 64); err == nil { // "+Inf" included
				byLe[le] += d
			}
		}
	}
	if !hasCount {
		count = byLe[math.Inf(1)]
	}
	if count <= 0 {
		return HistStats{}, false
	}
	bs := make([]stats.Bucket, 0, len(byLe))
	for le, c := range byLe {
		bs = append(bs, stats.Bucket{UpperBound: le * scale, Count: c})
	}
	return HistStats{Count: count, SumS: sum * scale, MeanS: sum * scale / count,
		P50S: stats.BucketQuantile(0.5, bs), P95S: stats.BucketQuantile(0.95, bs)}, true
}

// metricsPassKey identifies a pass in the period lines.
type metricsPassKey struct {
	level      string
	repeat     int
	warmup     bool
	start, end int64
}

// ReadServerMetrics reads the bundle file at path (server_metrics.jsonl)
// under m: which server's names it holds, and each pass's numbers of that
// server's roles. A missing file is no error: File is false.
func ReadServerMetrics(path string, m *MetricsMap) (*ServerMetrics, error) {
	sm := &ServerMetrics{File: true}
	// What the map could ask for: the histograms' series and the gauges.
	hist := map[string]bool{}
	track := &gaugeTrack{cur: map[string]map[string]float64{}, points: map[string][]gaugePoint{}}
	for _, s := range m.Servers {
		for _, n := range s.Histograms {
			hist[n] = true
		}
		for _, n := range s.Gauges {
			track.cur[n] = map[string]float64{}
		}
	}
	seen := map[string]bool{} // the names the file holds (histograms by their family's name)
	var order []metricsPassKey
	periods := map[metricsPassKey][]bundle.ServerMetricsRecord{}
	_, err := bundle.ReadJSONL(path, func(r bundle.ServerMetricsRecord) error {
		name := r.Name
		if base, ok := histogramFamily(name); ok && hist[base] {
			name = base
		}
		seen[name] = true
		switch r.Kind {
		case bundle.MetricsKindPeriod:
			k := metricsPassKey{r.Level, r.Repeat, r.Warmup, r.StartUnixNs, r.EndUnixNs}
			if _, ok := periods[k]; !ok {
				order = append(order, k)
				periods[k] = nil
			}
			if name != r.Name { // a series of a histogram of the map
				periods[k] = append(periods[k], r)
			}
		default:
			track.add(&r)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return &ServerMetrics{}, nil
	}
	if err != nil {
		return nil, err
	}
	// The server whose names the file holds most of: of the user's
	// servers, else of the built-in ones.
	// held is {role: name} of the roles of s whose names the file holds
	// (ParseMetricsMap keeps the histograms' and the gauges' roles apart).
	held := func(s MetricsServer) map[string]string {
		out := map[string]string{}
		for _, names := range []map[string]string{s.Histograms, s.Gauges} {
			for role, name := range names {
				if seen[name] {
					out[role] = name
				}
			}
		}
		return out
	}
	best, bestN := -1, 0
	for i, s := range m.Servers {
		if s.builtin && best >= 0 {
			break
		}
		if n := len(held(s)); n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return sm, nil
	}
	srv := m.Servers[best]
	sm.Server, sm.Source, sm.Unit, sm.Names = srv.Server, srv.Source, srv.Unit, held(srv)
	slices.SortStableFunc(order, func(a, b metricsPassKey) int { return cmp.Compare(a.start, b.start) })
	for _, k := range order {
		p := MetricsPass{Level: k.level, Repeat: k.repeat, Warmup: k.warmup, StartUnixNs: k.start, EndUnixNs: k.end,
			Roles: map[string]HistStats{}, Gauges: map[string]GaugeStats{}}
		recs := periods[k]
		for _, r := range recs {
			if p.FromUnixNs == 0 || r.FromUnixNs < p.FromUnixNs {
				p.FromUnixNs = r.FromUnixNs
			}
			p.ToUnixNs = max(p.ToUnixNs, r.ToUnixNs)
		}
		for role, name := range srv.Histograms {
			if h, ok := HistogramOver(recs, name, srv.scale()); ok {
				p.Roles[role] = h
			}
		}
		for role, name := range srv.Gauges {
			if g, ok := gaugeOver(track.points[name], k.start, k.end); ok {
				p.Gauges[role] = g
			}
		}
		sm.Passes = append(sm.Passes, p)
	}
	return sm, nil
}

// histogramFamily returns the family of a histogram's series (name_bucket,
// name_sum, name_count → name).
func histogramFamily(name string) (string, bool) {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			return base, true
		}
	}
	return name, false
}

// Levels aggregates the scored passes per level: the levels of order
// first, in that order, then any other in the order their passes began.
func (sm *ServerMetrics) Levels(order []string) []MetricsLevel {
	type hist struct{ n, sum, q50, q95, qn float64 } // Σ count, Σ sum; Σ count·p50, Σ count·p95, Σ count of the passes with quantiles
	type acc struct {
		passes int
		roles  map[string]*hist
		gauges map[string]GaugeStats // Mean: Σ mean·scrapes
	}
	lvs := slices.Clone(order)
	by := map[string]*acc{}
	for _, p := range sm.Passes {
		if p.Warmup {
			continue
		}
		a := by[p.Level]
		if a == nil {
			a = &acc{roles: map[string]*hist{}, gauges: map[string]GaugeStats{}}
			by[p.Level] = a
			if !slices.Contains(lvs, p.Level) {
				lvs = append(lvs, p.Level)
			}
		}
		a.passes++
		for role, h := range p.Roles {
			x := entry(a.roles, role)
			x.n, x.sum = x.n+h.Count, x.sum+h.SumS
			if !math.IsNaN(h.P50S) && !math.IsNaN(h.P95S) {
				x.q50, x.q95, x.qn = x.q50+h.Count*h.P50S, x.q95+h.Count*h.P95S, x.qn+h.Count
			}
		}
		for role, g := range p.Gauges {
			x, had := a.gauges[role]
			if !had {
				x.Max = g.Max
			}
			a.gauges[role] = GaugeStats{Mean: x.Mean + g.Mean*float64(g.Scrapes), Max: max(x.Max, g.Max), Scrapes: x.Scrapes + g.Scrapes}
		}
	}
	var out []MetricsLevel
	for _, lv := range lvs {
		a := by[lv]
		if a == nil {
			continue
		}
		l := MetricsLevel{Level: lv, Passes: a.passes, Roles: map[string]HistStats{}, Gauges: map[string]GaugeStats{}}
		for role, x := range a.roles {
			h := HistStats{Count: x.n, SumS: x.sum, MeanS: x.sum / x.n, P50S: math.NaN(), P95S: math.NaN()}
			if x.qn > 0 {
				h.P50S, h.P95S = x.q50/x.qn, x.q95/x.qn
			}
			l.Roles[role] = h
		}
		for role, x := range a.gauges {
			x.Mean /= float64(x.Scrapes)
			l.Gauges[role] = x
		}
		out = append(out, l)
	}
	return out
}
