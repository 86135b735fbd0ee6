package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/internal/need"
)

// traceEngine returns the folder of npm's @paulirish/trace_engine, the
// DevTools performance panel's trace parser (tools/deps.sh installs it in
// ~/.cache/asrprof/trace-engine). Without it the test fails in CI and
// skips elsewhere, saying how to get it.
func traceEngine(t *testing.T) (node, dir string) {
	t.Helper()
	root := os.Getenv("ASRPROF_TRACE_ENGINE")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "asrprof", "trace-engine")
	}
	dir = filepath.Join(root, "node_modules", "@paulirish", "trace_engine")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(dir, "models", "trace", "trace.js")); err != nil || serr != nil {
		need.Dep(t, "@paulirish/trace_engine for node in "+root, errors.Join(err, serr))
	}
	return node, dir
}

type engineView struct {
	Generic      bool     `json:"generic"`
	ProcessNames int      `json:"processNames"`
	Threads      int      `json:"threads"`
	Named        int      `json:"named"`
	Slices       int      `json:"slices"`
	TreeNodes    int      `json:"treeNodes"`
	MaxDepth     int      `json:"maxDepth"`
	Flows        int      `json:"flows"`
	FlowsBound   int      `json:"flowsBound"`
	Min          float64  `json:"min"`
	Max          float64  `json:"max"`
	Warnings     []string `json:"warnings"`
}

// The Perfetto export, read by a parser that is not ours: the DevTools
// trace engine keeps every slice, on a named thread of a named process,
// nested into one tree per thread; binds every request → server arrow at
// both ends (it binds a flow event only to a slice of the flow's category
// starting at its timestamp: it dropped all of them before the flows took
// the request slices' category); and spans the trace's whole time.
func TestPerfettoInTraceEngine(t *testing.T) {
	node, mod := traceEngine(t)
	dir := filepath.Join(t.TempDir(), "fx")
	if _, err := fixture.Write(dir, fixture.Golden()["refserver"]); err != nil {
		t.Fatal(err)
	}
	data, st := perfettoOf(t, dir, nil)
	file := filepath.Join(t.TempDir(), "trace.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(node, filepath.Join("testdata", "trace_engine.mjs"), mod, file)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("trace engine: %v\n%s", err, errb.String())
	}
	var v engineView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	t.Logf("trace engine: %+v", v)

	var tf TraceFile
	if err := json.Unmarshal(data, &tf); err != nil {
		t.Fatal(err)
	}
	slices, threads, procs := 0, 0, 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, e := range tf.TraceEvents {
		switch {
		case e.Ph == "X":
			slices++
			hi = math.Max(hi, e.TS+*e.Dur)
		case e.Ph == "C":
			hi = math.Max(hi, e.TS)
		}
		// The engine leaves events at ts 0 out of the trace's bounds (it
		// takes 0 for "no time"); they stay in its tracks all the same.
		if (e.Ph == "X" || e.Ph == "C") && e.TS > 0 {
			lo = math.Min(lo, e.TS)
		}
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			threads++
		case e.Ph == "M" && e.Name == "process_name":
			procs++
		}
	}
	if v.Slices != slices || v.TreeNodes != slices {
		t.Errorf("trace engine kept %d slices (%d in its trees), the file has %d", v.Slices, v.TreeNodes, slices)
	}
	if v.Threads != threads || v.Named != threads || v.ProcessNames != procs {
		t.Errorf("trace engine: %d threads (%d named), %d process names; the file names %d threads and %d processes", v.Threads, v.Named, v.ProcessNames, threads, procs)
	}
	if st.Flows == 0 || v.Flows != st.Flows || v.FlowsBound != st.Flows {
		t.Errorf("trace engine bound %d of %d flows (%d across processes)", v.Flows, st.Flows, v.FlowsBound)
	}
	if v.MaxDepth < 2 {
		t.Errorf("slice trees %d deep: request ⊃ upload, wait_first_byte, response expected", v.MaxDepth)
	}
	if math.Abs(v.Min-lo) > 1 || v.Max < hi-1 {
		t.Errorf("trace bounds [%v, %v], the file's events span [%v, %v]", v.Min, v.Max, lo, hi)
	}
	if len(v.Warnings) > 0 {
		t.Errorf("trace engine warnings: %v", v.Warnings)
	}
}
