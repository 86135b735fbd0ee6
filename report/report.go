package report

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
)

// File is the report's name inside a bundle (`asrprof capture` writes it).
const File = bundle.ReportFile

// Limits on what the report embeds, so that its size does not grow with
// the capture (docs/REPORT.md).
const (
	// TimelineBins is the most points a timeline series has: longer series
	// are binned (in-flight requests: the most in flight in the bin; GPU
	// samples: their mean).
	TimelineBins = 1200
	// MaxRequests is the most requests the timeline draws and keeps
	// waterfalls of: a capture with more is sampled evenly, its slowest
	// request of each level always kept.
	MaxRequests = 1500
	// CDFPoints is how many quantiles a latency CDF is drawn through.
	CDFPoints = 200
	// FlameMinShare cuts the flame graph's paths under this share of a
	// level's samples (their time stays in their parent).
	FlameMinShare = 0.004
)

// Options configure a report.
type Options struct {
	// Stages is the stage preset (analysis.Presets; "" is auto).
	Stages string
	// Timeout bounds each analysis (0: analysis.DefaultTimeout).
	Timeout time.Duration
	// Now stamps the report; zero is time.Now (tests fix it).
	Now time.Time
	// LengthBuckets groups the requests by audio length (the buckets
	// analysis; zero: auto).
	LengthBuckets analysis.LengthBuckets
}

// stamp is the report's time (Now), as it prints it.
func (o Options) stamp() string {
	return cmp.Or(o.Now, time.Now()).UTC().Format(time.RFC3339)
}

func (o Options) session(c *analysis.Capture, base *analysis.Capture) *analysis.Session {
	return analysis.NewSession(c, analysis.Options{Stages: o.Stages, Timeout: cmp.Or(o.Timeout, analysis.DefaultTimeout), Baseline: base, LengthBuckets: o.LengthBuckets})
}

// WriteFile writes the report of the bundle in dir to path (dir/report.html
// when path is ""), and returns the path written.
func WriteFile(ctx context.Context, dir, path string, o Options) (string, error) {
	path = cmp.Or(path, filepath.Join(dir, File))
	return path, bundle.WriteFileAtomic(path, func(w io.Writer) error { return Write(ctx, w, dir, o) })
}

// CompareFile writes the comparison of current with baseline to path.
func CompareFile(ctx context.Context, current, baseline, path string, o Options) (string, error) {
	path = cmp.Or(path, filepath.Join(current, "compare.html"))
	return path, bundle.WriteFileAtomic(path, func(w io.Writer) error { return Compare(ctx, w, current, baseline, o) })
}

// captureData is what the report shows of one capture: the tables of the
// built-in analyses and the capture's own series.
type captureData struct {
	name   string
	c      *analysis.Capture
	tables map[string]*table.Table
	errs   error
	levels []string // scored levels in run order
}

// load runs the analyses the report shows over the bundle in dir.
func load(ctx context.Context, dir string, o Options) (*captureData, error) {
	c, err := analysis.Load(dir)
	if err != nil {
		return nil, err
	}
	c.PlaceStates() // the waterfalls draw each request's states in time
	return run(ctx, c, dir, o.session(c, nil), append(analysis.DefaultScripts(c), "sweep_ranges", "knee", "attribution"))
}

func run(ctx context.Context, c *analysis.Capture, dir string, s *analysis.Session, names []string) (*captureData, error) {
	ts, err := analysis.RunScripts(ctx, s, names)
	d := &captureData{name: filepath.Base(filepath.Clean(dir)), c: c, tables: map[string]*table.Table{}, errs: err}
	for _, t := range ts {
		if _, dup := d.tables[t.Name]; !dup {
			d.tables[t.Name] = t
		}
	}
	for _, lv := range c.Bundle.Manifest.Levels {
		if !lv.Warmup {
			d.levels = appendNew(d.levels, lv.Level)
		}
	}
	if len(d.levels) == 0 { // a killed capture: the levels its requests name
		d.levels, _ = c.RequestLevels()
	}
	if d.tables["sweep"] == nil {
		return d, fmt.Errorf("%s: the sweep analysis gave no table: %w", dir, err)
	}
	return d, nil
}

// appendNew appends to list each of xs that it does not hold yet.
func appendNew(list []string, xs ...string) []string {
	for _, x := range xs {
		if !slices.Contains(list, x) {
			list = append(list, x)
		}
	}
	return list
}

// mapped is f of each of xs, in order (nil for none).
func mapped[T, U any](xs []T, f func(T) U) []U {
	var out []U
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

// label is the analyses' level label ("c16" → "c=16").
func label(lv string) string { return model.LevelLabel(lv) }

// rows reads the table name as rows of T (table.Decode): nil where the
// analyses gave no such table or it lacks a column T names.
func rows[T any](d *captureData, name string) []T {
	if t := d.tables[name]; t != nil {
		rs, _ := table.Decode[T](t)
		return rs
	}
	return nil
}

// rangeRow is a row of sweep_ranges.
type rangeRow struct {
	Level  string  `col:"level"`
	Metric string  `col:"metric"`
	Mean   float64 `col:"mean"`
	Min    float64 `col:"min"`
	Max    float64 `col:"max"`
}

// ranges reads sweep_ranges: metric → level → (mean, min, max).
func (d *captureData) ranges() map[string]map[string][3]float64 {
	out := map[string]map[string][3]float64{}
	for _, r := range rows[rangeRow](d, "sweep_ranges") {
		if out[r.Metric] == nil {
			out[r.Metric] = map[string][3]float64{}
		}
		out[r.Metric][r.Level] = [3]float64{r.Mean, r.Min, r.Max}
	}
	return out
}

// kneeRow is a row of the knee table.
type kneeRow struct {
	Level     string `col:"level"`
	Saturated string `col:"saturated"`
}

// knee is the knee table's level marked "knee", or "".
func (d *captureData) knee() string {
	for _, r := range rows[kneeRow](d, "knee") {
		if r.Saturated == "knee" {
			return r.Level
		}
	}
	return ""
}

// stageMeans reads the stage table: the stage columns and level → stage →
// mean ms (analysis.StageMeans), without the total.
func (d *captureData) stageMeans() ([]string, map[string][]float64) {
	stages, means := analysis.StageMeans(d.tables["stages"])
	if k := slices.Index(stages, "total"); k >= 0 {
		stages = slices.Delete(stages, k, k+1)
		for lv, ms := range means {
			means[lv] = slices.Delete(ms, k, k+1)
		}
	}
	return stages, means
}

// cdfs returns each scored level's client-latency distribution at
// CDFPoints quantiles (package stats' percentiles) of its successful
// requests.
func (d *captureData) cdfs() ([]cdfSeries, error) {
	rc, err := d.c.Tables.RequestCols()
	if err != nil {
		return nil, err
	}
	by := map[string][]float64{}
	for i := 0; i < rc.N; i++ {
		if rc.Warmup[i] || rc.Status.At(i) != "ok" {
			continue
		}
		lv := rc.Level.At(i)
		by[lv] = append(by[lv], rc.LatencyS[i])
	}
	var out []cdfSeries
	for _, lv := range d.levels {
		xs := by[lv]
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		s := cdfSeries{name: label(lv), n: len(xs)}
		for k := 0; k <= CDFPoints; k++ {
			p := 100 * float64(k) / CDFPoints
			s.xs = append(s.xs, stats.PercentileSorted(xs, p))
			s.ps = append(s.ps, p/100)
		}
		out = append(out, s)
	}
	return out, nil
}

// manifest is the capture's manifest.
func (d *captureData) manifest() *model.Manifest { return &d.c.Bundle.Manifest }
