package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/asrprof/asrprof/internal/margin"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarktest"

	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/table"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func runScripts(t *testing.T, c *Capture, opts Options, format string, names ...string) string {
	t.Helper()
	s := NewSession(c, opts)
	tabs, err := RunScripts(context.Background(), s, names)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := table.Render(&b, format, tabs...); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestGolden runs every built-in analysis over every fixture bundle.
func TestGolden(t *testing.T) {
	eachFixture(t, func(t *testing.T, fx string, c *Capture) {
		for _, name := range []string{"sweep", "stages", "bottleneck", "knee", "gpu", "cpu"} {
			got := runScripts(t, c, Options{}, "text", name)
			if name == "bottleneck" {
				got = margin.Mask(got, fx, notAsserted) // TestVerdictMargins
			}
			golden(t, filepath.Join("testdata", "golden", fx, name+".txt"), got)
		}
	})
	t.Run("compare", func(t *testing.T) {
		cur, _ := writeFixture(t, "refserver")
		base, _ := writeFixture(t, "sglang")
		c, err := loadT(t, cur)
		if err != nil {
			t.Fatal(err)
		}
		b, err := loadT(t, base)
		if err != nil {
			t.Fatal(err)
		}
		got := runScripts(t, c, Options{Baseline: b}, "text", "compare")
		golden(t, filepath.Join("testdata", "golden", "compare.txt"), got)
	})
}

type jsonTables struct {
	Tables []struct {
		Name    string   `json:"name"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
	} `json:"tables"`
}

func decodeTables(t *testing.T, s string) jsonTables {
	t.Helper()
	var jt jsonTables
	if err := json.Unmarshal([]byte(s), &jt); err != nil {
		t.Fatal(err)
	}
	return jt
}

// TestStagesRecoverInjected checks that the stage table recovers every
// stage mean the simulated server injected, within max(1 ms, 1 %), through
// a clock offset between client and server, for every preset.
func TestStagesRecoverInjected(t *testing.T) {
	for fx, cfg := range fixtures() {
		t.Run(fx, func(t *testing.T) {
			wantCols := []string{"level", "build", "build→queued", "queued→scheduled", "first forward", "decode tail", "unattributed", "total", "client overhead"}
			if fx == "sglang" { // its events name the wait for a build worker
				wantCols = append([]string{"level", "build wait"}, wantCols[1:]...)
			}
			dir, truth := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			jt := decodeTables(t, runScripts(t, c, Options{}, "json", "stages"))
			tab := jt.Tables[0]
			if strings.Join(tab.Columns, "|") != strings.Join(wantCols, "|") {
				t.Fatalf("columns %q, want %q", tab.Columns, wantCols)
			}
			if len(tab.Rows) != len(cfg.Levels) {
				t.Fatalf("%d rows, want %d", len(tab.Rows), len(cfg.Levels))
			}
			for i, lv := range cfg.Levels {
				s := lv.Stages
				want := map[string]float64{
					fixture.Build: s.Build.Mean.Seconds(), fixture.BuildToQueued: s.BuildToQueued.Mean.Seconds(),
					fixture.QueuedToSched: s.QueuedToSched.Mean.Seconds(), fixture.FirstForward: s.FirstForward.Mean.Seconds(),
					fixture.DecodeTail: s.DecodeTail.Mean.Seconds(), fixture.ClientOverhead: s.ClientOverhead.Mean.Seconds(),
				}
				want[fixture.Total] = want[fixture.Build] + want[fixture.BuildToQueued] + want[fixture.QueuedToSched] + want[fixture.FirstForward] + want[fixture.DecodeTail]
				want["unattributed"] = 0 // the simulated server's stages cover its total
				if cfg.Format == fixture.SGLang {
					want["build wait"] = 0 // it builds at once
				}
				if cfg.FailEvery > 0 { // failed requests leave the antithetic pairs: use the realised means
					want = maps.Clone(truth.Means[tab.Rows[i][0].(string)])
					want["unattributed"] = 0
				}
				if cfg.Format == fixture.VLLM { // vLLM cannot tell build from build→queued
					want[fixture.BuildToQueued] += want[fixture.Build]
					delete(want, fixture.Build)
				}
				for j, col := range wantCols[1:] {
					cell := tab.Rows[i][j+1]
					w, ok := want[col]
					if !ok {
						if cell != nil {
							t.Errorf("level %v %s = %v, want none", tab.Rows[i][0], col, cell)
						}
						continue
					}
					m, _ := cell.(map[string]any)
					got, _ := m["mean_ms"].(float64)
					tol := math.Max(1, 0.01*w*1000)
					if math.Abs(got-w*1000) > tol || m == nil {
						t.Errorf("level %v %s mean = %v ms, want %.3f ± %.3f", tab.Rows[i][0], col, got, w*1000, tol)
					}
				}
			}
		})
	}
}

// TestSweepMatchesDriver checks the sweep against results.json, which the
// fixture writes with model/summary as the driver does: corpus WER to the
// last digit, and the other means too.
func TestSweepMatchesDriver(t *testing.T) {
	for _, fx := range []string{"refserver", "refserver_random"} {
		t.Run(fx, func(t *testing.T) {
			dir, _ := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			jt := decodeTables(t, runScripts(t, c, Options{}, "json", "sweep"))
			var res model.Results
			b, err := os.ReadFile(filepath.Join(dir, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			rows := jt.Tables[0].Rows
			if len(rows) != len(res.Results) {
				t.Fatalf("%d rows, want %d", len(rows), len(res.Results))
			}
			for i, r := range res.Results {
				var rps float64
				for _, p := range r.PerRepeat {
					rps += p.RequestsPerS
				}
				rps /= float64(len(r.PerRepeat))
				for _, c := range []struct {
					name      string
					got, want any
				}{
					{"level", rows[i][0], r.Level},
					{"req/s", rows[i][1], rps},
					{"RTFx", rows[i][2], r.RTFx.Mean},
					{"latency mean", rows[i][3], r.LatencyMeanS.Mean},
					{"latency p95", rows[i][4], r.LatencyP95S.Mean},
					{"corpus WER", rows[i][5], r.CorpusWER.Mean},
				} {
					if c.got != c.want {
						t.Errorf("%s %s = %v, want %v exactly", r.Level, c.name, c.got, c.want)
					}
				}
				if want := r.Total - r.Failed; rows[i][6] != strings.Join([]string{itoa(want), itoa(r.Total)}, "/") {
					t.Errorf("%s completed = %v, want %d/%d", r.Level, rows[i][6], want, r.Total)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestStarlark runs the Starlark tests in testdata/*_test.star against the
// refserver fixture, with the assert module.
func TestStarlark(t *testing.T) {
	dir, _ := writeFixture(t, "refserver")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	assert, err := starlarktest.LoadAssertModule()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*_test.star"))
	if len(files) == 0 {
		t.Fatal("no Starlark tests found")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := NewSession(c, Options{
				Baseline: c,
				Modules:  map[string]starlark.StringDict{"assert.star": assert},
				Setup:    func(th *starlark.Thread) { starlarktest.SetReporter(th, t) },
			})
			if _, err := s.Run(context.Background(), f); err != nil {
				t.Error(err)
			}
		})
	}
}

func writeScript(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLimitsAndErrors(t *testing.T) {
	dir, _ := writeFixture(t, "sglang")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src string
		opts      Options
		want      []string
	}{
		{"timeout", "def f():\n    while True:\n        pass\nf()\n", Options{Timeout: 100 * time.Millisecond},
			[]string{"timed out after 100ms", "spin.star:4:2: in <toplevel>"}},
		{"steps", "x = 0\nfor i in range(1000000):\n    x += i\n", Options{MaxSteps: 1000},
			[]string{"exceeded 1000 execution steps"}},
		{"backtrace", "def g(r):\n    return r.no_such_field\n\ng(capture.requests[0])\n", Options{},
			[]string{"spin.star:4:2: in <toplevel>", "spin.star:2:13: in g", "no .no_such_field field"}},
		{"load outside", "load(\"../etc.star\", \"x\")\n", Options{}, []string{"without \"..\""}},
		{"load abs", "load(\"/etc/passwd.star\", \"x\")\n", Options{}, []string{"only paths relative"}},
		{"no module", "load(\"os\", \"x\")\n", Options{}, []string{"no module \"os\""}},
		{"read only", "capture.requests[0].level = 1\n", Options{}, []string{"can't assign"}},
		{"bad preset", "load(\"lib/stages.star\", \"pick\")\npick(capture, \"nope\")\n", Options{}, []string{"unknown stage preset \"nope\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeScript(t, "spin.star", tc.src)
			start := time.Now()
			_, err := NewSession(c, tc.opts).Run(context.Background(), p)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// Measured here under a load average of 8 (make test beside
			// other work): the 100 ms timeout 0.15–0.21 s, the others
			// under 2 ms. 2 s is ten times the worst.
			t.Logf("%s: %v", tc.name, time.Since(start))
			if time.Since(start) > 2*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}
}

// TestUserScriptLoads checks that a user's script loads a file next to it
// (which shadows a built-in of the same path) and the built-ins.
func TestUserScriptLoads(t *testing.T) {
	dir, _ := writeFixture(t, "vllm")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	sdir := t.TempDir()
	os.MkdirAll(filepath.Join(sdir, "stages"), 0o755)
	os.WriteFile(filepath.Join(sdir, "helper.star"), []byte("K = 7\n"), 0o644)
	os.WriteFile(filepath.Join(sdir, "stages", "vllm.star"), []byte("NAME = \"mine\"\n"), 0o644)
	main := filepath.Join(sdir, "main.star")
	os.WriteFile(main, []byte(`load("table", "table")
load("helper.star", "K")
load("stages/vllm.star", "NAME")
load("stages/refserver.star", ref = "NAME")
t = table.new("t", ["k", "name", "ref"])
t.add_row(K, NAME, ref)
emit(t)
`), 0o644)
	tabs, err := NewSession(c, Options{}).Run(context.Background(), main)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tabs[0].Rows[0], ","); got != "7,mine,refserver" {
		t.Errorf("row %q, want 7,mine,refserver", got)
	}
}

// TestDefaultScripts runs the default analyses of a bundle with spans,
// events, GPU and CPU data, as asrprof analyze does without script names.
func TestDefaultScripts(t *testing.T) {
	dir, _ := writeFixture(t, "refserver")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := RunScripts(context.Background(), NewSession(c, Options{Timeout: DefaultTimeout}), DefaultScripts(c))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tab := range tabs {
		names = append(names, tab.Name)
	}
	if got := strings.Join(names, ","); got != "validity,validity_intervals,sweep,stages,client,bottleneck,advice,length_buckets,length_sweep,length_stages,gpu,cpu" {
		t.Errorf("tables %s, want validity,validity_intervals,sweep,stages,client,bottleneck,advice,length_buckets,length_sweep,length_stages,gpu,cpu", got)
	}
}

// TestConcurrentRuns runs scripts at once through RunScripts: a module
// that two of them load is executed once and both wait for it; loads that
// form a cycle across two runs fail instead of deadlocking; tables come
// back in the order of the names.
func TestConcurrentRuns(t *testing.T) {
	dir, _ := writeFixture(t, "sglang")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// slow.star spins long enough that both runs ask for it while it runs.
	write("slow.star", "print(\"slow loaded\")\nN = 0\nfor i in range(300000):\n    N += 1\n")
	var names []string
	for i := range 4 {
		names = append(names, write(fmt.Sprintf("use%d.star", i), fmt.Sprintf(`load("table", "table")
load("slow.star", "N")
t = table.new("t%d", [("n", "int")])
t.add_row(N)
emit(t)
`, i)))
	}
	var out strings.Builder
	s := NewSession(c, Options{Print: &out})
	tabs, err := RunScripts(context.Background(), s, names)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "slow loaded"); got != 1 {
		t.Errorf("slow.star ran %d times, want once", got)
	}
	if len(tabs) != 4 {
		t.Fatalf("%d tables, want 4", len(tabs))
	}
	for i, tb := range tabs {
		if tb.Name != fmt.Sprintf("t%d", i) {
			t.Errorf("table %d is %s, want t%d (the order of the names)", i, tb.Name, i)
		}
	}

	// a.star loads b.star, which loads a.star: from two runs at once, each
	// starting at a different end, and from one.
	write("a.star", "load(\"b.star\", \"B\")\nA = 1\nfor i in range(100000):\n    pass\n")
	write("b.star", "load(\"a.star\", \"A\")\nB = 1\nfor i in range(100000):\n    pass\n")
	ra := write("run_a.star", "load(\"a.star\", \"A\")\n")
	rb := write("run_b.star", "load(\"b.star\", \"B\")\n")
	done := make(chan error, 1)
	go func() {
		_, err := RunScripts(context.Background(), NewSession(c, Options{}), []string{ra, rb})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cycle in load graph") {
			t.Errorf("cyclic loads from two runs: %v, want a cycle error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cyclic loads from two runs deadlocked")
	}
	if _, err := NewSession(c, Options{}).Run(context.Background(), ra); err == nil || !strings.Contains(err.Error(), "cycle in load graph") {
		t.Errorf("cyclic loads from one run: %v, want a cycle error", err)
	}
}

// TestDefaultScriptsFromTheTables checks that DefaultScripts runs the stage
// analyses exactly when the server left spans, decided from the tables'
// record of the server's span names, without reading spans.otlp into the
// join: a capture whose requests all failed has client spans only.
func TestDefaultScriptsFromTheTables(t *testing.T) {
	for _, tc := range []struct {
		fail       int
		wantStages bool
	}{{0, true}, {1, false}} {
		cfg := fixtures()["refserver"]
		cfg.FailEvery = tc.fail
		dir := filepath.Join(t.TempDir(), "b")
		if _, err := fixture.Write(dir, cfg); err != nil {
			t.Fatal(err)
		}
		for _, fresh := range []bool{true, false} { // tables built by this Load, then read back
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			got := DefaultScripts(c)
			c.Tables.Wait() // the next Load reads them back
			if slices.Contains(got, "stages") != tc.wantStages || c.ix.v != nil {
				t.Errorf("fail every %d (tables built %v): scripts %v, spans joined %v; want stages %v, no join", tc.fail, fresh, got, c.ix.v != nil, tc.wantStages)
			}
		}
	}
}

// TestEngineMatchesStarlarkPresets runs testdata/legacy/compare.star over
// every golden fixture: the declarative presets, applied by the engine,
// give the stage table (and each request's stages and boundaries) that
// the presets' former Starlark functions gave, to the last bit.
func TestEngineMatchesStarlarkPresets(t *testing.T) {
	for name := range fixture.Golden() {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if _, err := fixture.Write(dir, fixture.Golden()[name]); err != nil {
				t.Fatal(err)
			}
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if _, err := NewSession(c, Options{Print: &out}).Run(context.Background(), filepath.Join("testdata", "legacy", "compare.star")); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "requests compared") {
				t.Errorf("compare.star said %q", out.String())
			}
			t.Log(strings.TrimSpace(out.String()))
		})
	}
}
