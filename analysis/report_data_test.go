package analysis

import (
	"context"
	"fmt"
	"github.com/asrprof/asrprof/internal/bundletest"
	"math"
	"testing"
)

// sweep_ranges: each level's mean, min and max over repeats are those of
// the scored passes (model/summary, capture.passes).
func TestSweepRanges(t *testing.T) {
	dir, _ := writeFixture(t, "refserver_random")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := NewSession(c, Options{}).Run(context.Background(), "sweep_ranges")
	if err != nil {
		t.Fatal(err)
	}
	passes, err := c.Passes()
	if err != nil {
		t.Fatal(err)
	}
	pick := map[string]func(i int) float64{
		"req/s":            func(i int) float64 { return passes[i].RequestsPerS },
		"latency mean (s)": func(i int) float64 { return passes[i].LatencyMeanS },
		"latency p99 (s)":  func(i int) float64 { return passes[i].LatencyP99S },
	}
	checked := 0
	for _, row := range tabs[0].Values {
		lv, metric := row[0].(string), row[1].(string)
		f, ok := pick[metric]
		if !ok {
			continue
		}
		var xs []float64
		for i, p := range passes {
			if p.Level == lv && !p.Warmup {
				xs = append(xs, f(i))
			}
		}
		lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
		for _, x := range xs {
			lo, hi, sum = math.Min(lo, x), math.Max(hi, x), sum+x
		}
		if len(xs) != 2 || fmt.Sprint(row[5]) != "2" || math.Abs(row[2].(float64)-sum/2) > 1e-12 || row[3].(float64) != lo || row[4].(float64) != hi {
			t.Errorf("%s %s: %v, want mean %v min %v max %v over %d", lv, metric, row, sum/2, lo, hi, len(xs))
		}
		if lo == hi {
			t.Errorf("%s %s: repeats equal; the fixture should spread them", lv, metric)
		}
		checked++
	}
	if checked != 12 {
		t.Errorf("checked %d rows, want 12 (4 levels × 3 metrics)", checked)
	}
}

// The flame graph of a level holds every on-CPU second of its scored
// profiles, and each node at least its children.
func TestIcicle(t *testing.T) {
	dir := bundletest.H200(t, "gpu-bound")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	profs, err := c.profiles()
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, p := range profs {
		if p.Level == "c64" && !p.Warmup {
			want += p.TotalS
		}
	}
	f, err := c.Icicle("c64", 0.01)
	if err != nil || f == nil {
		t.Fatalf("Icicle: %v, %v", f, err)
	}
	if math.Abs(f.Seconds-want) > 1e-6*want || want == 0 {
		t.Errorf("root %v s, the profiles hold %v s", f.Seconds, want)
	}
	var walk func(*Frame) int
	walk = func(n *Frame) int {
		sum, count := 0.0, 1
		for i, ch := range n.Children {
			sum += ch.Seconds
			if ch.Seconds < 0.01*f.Seconds*(1-1e-9) {
				t.Errorf("%s: %v s kept under the 1 %% cut", ch.Name, ch.Seconds)
			}
			if i > 0 && ch.Seconds > n.Children[i-1].Seconds {
				t.Errorf("%s: children not largest first", n.Name)
			}
			count += walk(ch)
		}
		if sum > n.Seconds*(1+1e-9) {
			t.Errorf("%s: children %v s > its %v s", n.Name, sum, n.Seconds)
		}
		return count
	}
	if n := walk(f); n < 20 {
		t.Errorf("%d frames", n)
	}
	found := false
	var find func(*Frame)
	find = func(n *Frame) {
		found = found || n.Name == "Runner.decode (whisper_model.py)"
		for _, ch := range n.Children {
			find(ch)
		}
	}
	find(f)
	if !found {
		t.Error("no Runner.decode (whisper_model.py) frame: Python frames are not named as the cpu analysis names them")
	}
	if g, err := c.Icicle("c999", 0.01); g != nil || err != nil {
		t.Errorf("a level without profiles: %v, %v", g, err)
	}
}
