package capture

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
)

// drive runs a searcher against a made-up server whose attainment is
// att(level), and returns the levels it probed.
func drive(t *testing.T, cfg Config, att func(v float64) float64) ([]float64, *searcher) {
	t.Helper()
	s := newSearcher(&cfg)
	var path []float64
	for i := 0; i < 50; i++ {
		lv, ok := s.level()
		if !ok {
			return path, s
		}
		v := float64(lv.Concurrency)
		if lv.Rate > 0 {
			v = lv.Rate
		}
		path = append(path, v)
		a := att(v)
		lr := model.LevelResult{Level: lv.Name, PerRepeat: []model.PassMetrics{{SLOAttainment: &a}, {SLOAttainment: &a}}}
		s.record(lr, 10)
	}
	t.Fatalf("the search did not stop: %v", path)
	return nil, nil
}

func TestSearcher(t *testing.T) {
	slo, _ := summary.ParseSLO("latency=1s")
	knee := func(k float64) func(float64) float64 {
		return func(v float64) float64 {
			if v <= k {
				return 1
			}
			return 0.5
		}
	}
	for _, tc := range []struct {
		name        string
		cfg         Config
		att         func(float64) float64
		path        []float64
		answer, top float64
	}{
		{"closed", Config{Concurrency: []int{1}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 1}}, knee(6),
			[]float64{1, 2, 4, 8, 6, 7}, 6, 7},
		{"closed, tolerance 2", Config{Concurrency: []int{1}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 2}}, knee(6),
			[]float64{1, 2, 4, 8, 6}, 6, 8},
		{"closed, start fails", Config{Concurrency: []int{16}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 1}}, knee(3),
			[]float64{16, 8, 4, 2, 3}, 3, 4},
		{"closed, nothing passes", Config{Concurrency: []int{2}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 1}}, knee(0),
			[]float64{2, 1}, 0, 1},
		{"closed, limit", Config{Concurrency: []int{1}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 1, Max: 5}}, knee(100),
			[]float64{1, 2, 4, 5}, 5, 0},
		{"open, 10 %", Config{Rates: []float64{1}, SLO: slo, Search: &Search{Attainment: 0.99, Tolerance: 0.1, Relative: true}}, knee(3.3),
			[]float64{1, 2, 4, 3, 3.5, 3.25}, 3.25, 3.5},
		{"attainment target", Config{Concurrency: []int{1}, SLO: slo, Search: &Search{Attainment: 0.5, Tolerance: 1}}, knee(6),
			[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, 1024, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, s := drive(t, tc.cfg, tc.att)
			if !reflect.DeepEqual(path, tc.path) {
				t.Errorf("path %v, want %v", path, tc.path)
			}
			if s.res.Answer != tc.answer || s.res.Upper != tc.top || !s.res.Done {
				t.Errorf("answer %v upper %v done %v, want %v %v", s.res.Answer, s.res.Upper, s.res.Done, tc.answer, tc.top)
			}
			if s.res.Requests != 10*len(path) {
				t.Errorf("requests %d", s.res.Requests)
			}
			var b bytes.Buffer
			PrintSearch(&b, &s.res)
			if !strings.Contains(b.String(), "Answer:") || strings.Count(b.String(), "attainment ") != len(path) {
				t.Errorf("print:\n%s", b.String())
			}
		})
	}
}

// A level passes only when every repeat meets the target.
func TestSearcherWorstRepeat(t *testing.T) {
	slo, _ := summary.ParseSLO("latency=1s")
	s := newSearcher(&Config{Concurrency: []int{4}, SLO: slo, Search: &Search{Attainment: 0.9, Tolerance: 1}})
	hi, lo := 1.0, 0.8
	s.record(model.LevelResult{Level: "c4", PerRepeat: []model.PassMetrics{{SLOAttainment: &hi}, {SLOAttainment: &lo}}}, 8)
	if p := s.res.Probes[0]; p.Pass || p.Attainment != 0.8 || s.hi != 4 {
		t.Errorf("probe %+v hi %v", p, s.hi)
	}
}

func TestSearchValidate(t *testing.T) {
	slo, _ := summary.ParseSLO("latency=1s")
	base := func() Config {
		c := DefaultConfig()
		c.Target, c.Dataset, c.Out = "http://127.0.0.1:1", "x", "o"
		c.Concurrency = []int{1}
		c.SLO = slo
		c.Search = &Search{Attainment: 0.99, Tolerance: 1}
		return c
	}
	for msg, f := range map[string]func(c *Config){
		"needs --slo":       func(c *Config) { c.SLO = summary.SLO{} },
		"one --concurrency": func(c *Config) { c.Concurrency = []int{1, 2} },
		"--attainment":      func(c *Config) { c.Search.Attainment = 1.5 },
		"needs streamed":    func(c *Config) { c.SLO, _ = summary.ParseSLO("ttft=1s") },
	} {
		c := base()
		f(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v", msg, err)
		}
	}
	c := base()
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	for in, want := range map[string][2]any{"2": {2.0, false}, "10%": {0.1, true}} {
		tol, rel, err := ParseTolerance(in)
		if err != nil || tol != want[0] || rel != want[1] {
			t.Errorf("ParseTolerance(%q) = %v %v %v", in, tol, rel, err)
		}
	}
	if _, _, err := ParseTolerance("-1"); err == nil {
		t.Error("negative tolerance accepted")
	}
}
