package analysis

import (
	"slices"
	"testing"

	"go.starlark.net/starlark"

	"github.com/asrprof/asrprof/analysis/engine"
)

// goStruct names a field in snake case, keeps its number's kind, leaves
// out a field tagged star:"-", and lets extra replace a field.
func TestGoStruct(t *testing.T) {
	for name, want := range map[string]string{"IdleGPUWait": "idle_gpu_wait", "P95Ms": "p95_ms", "R2": "r2", "OK": "ok", "TotalRTF": "total_rtf", "AdmissionInFF": "admission_in_ff", "ShapeN": "shape_n"} {
		if got := snake(name); got != want {
			t.Errorf("snake(%s) = %s, want %s", name, got, want)
		}
	}
	s := goStruct("struct", engine.PassThread{Level: "c2", Repeat: 1, Warmup: true, PID: 7, RunningUtil: 0.5}, starlark.StringDict{"how": starlark.None})
	if names := s.AttrNames(); !slices.Equal(names, []string{"bins", "how", "level", "name", "pass_util", "pid", "repeat", "running_bins", "running_util", "tid"}) {
		t.Errorf("names %v", names)
	}
	for attr, want := range map[string]string{"level": `"c2"`, "pid": "7", "running_util": "0.5", "how": "None"} {
		if v, _ := s.Attr(attr); v.String() != want {
			t.Errorf("%s = %s, want %s", attr, v, want)
		}
	}
}
