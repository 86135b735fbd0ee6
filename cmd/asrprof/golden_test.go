package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/asrprof/asrprof/internal/margin"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/table"
)

var update = flag.Bool("update", false, "rewrite the CLI goldens in testdata/ (testdata/NAME.stdout, .stderr)")

// goldenCase is one asrprof command line whose whole output is kept in
// testdata/NAME.stdout and testdata/NAME.stderr (absent: no output).
type goldenCase struct {
	name string
	// args are the command line; $TMP is the case's temp directory, where
	// setup wrote what the command reads.
	args  []string
	setup func(t *testing.T, tmp string) (vars map[string]string)
	code  int
	// volatile masks what changes from run to run of a live server (pids,
	// timings, measured numbers) and the column widths they make.
	volatile bool
	// fixture: the output holds that golden fixture's bottleneck table,
	// whose causes near their thresholds are not asserted (margin.Mask).
	fixture string
}

// TestCLIGolden runs asrprof's commands over fixture bundles and compares
// their whole stdout and stderr, with the temp directory (and the other
// per-run names) replaced by placeholders, against testdata/.
// go test -run CLIGolden -update rewrites the files.
func TestCLIGolden(t *testing.T) {
	for _, tc := range []goldenCase{
		{name: "capture_help", args: []string{"capture", "--help"}},
		{name: "serve_help", args: []string{"serve", "--help"}},
		{name: "main_help", args: []string{"--help"}},
		{name: "analyze_help", args: []string{"help", "analyze"}},
		{name: "show_help", args: []string{"show", "--help"}},
		// Errors: one line naming the flag or file once, --flag spelled
		// with two dashes, the exit status of the table in --help.
		{name: "error_list_element", args: []string{"capture", "--concurrency", "1,,4"}, code: exitUsage},
		{name: "error_unknown_flag", args: []string{"capture", "-concurency", "4"}, code: exitUsage},
		{name: "error_flag_value", args: []string{"capture", "--timeout", "30"}, code: exitUsage},
		{name: "error_dataset_missing", args: []string{"capture", "--target", "http://127.0.0.1:1", "--dataset", "$TMP/none.jsonl"}, code: exitUsage},
		{name: "error_out_exists", args: []string{"capture", "--target", "http://127.0.0.1:1", "--dataset", "$TMP/refserver", "--out", "$TMP/refserver"},
			setup: fixtures("refserver"), code: exitUsage},
		{name: "error_not_a_bundle", args: []string{"show", "$TMP"}, code: exitUsage},
		{name: "error_format", args: []string{"analyze", "$TMP/refserver", "--format", "yaml"}, setup: fixtures("refserver"), code: exitUsage},
		// Names: a misspelt analysis or command is bad input, caught before
		// anything runs (no table printed), with the nearest name.
		{name: "error_analysis_name", args: []string{"analyze", "$TMP/refserver", "stagse"}, setup: fixtures("refserver"), code: exitUsage},
		{name: "error_analysis_second_name", args: []string{"analyze", "$TMP/refserver", "stages", "bottlenek"}, setup: fixtures("refserver"), code: exitUsage},
		{name: "error_command", args: []string{"captur", "--target", "http://127.0.0.1:1"}, code: exitUsage},
		{name: "version_flag", args: []string{"--version"}},
		{name: "error_doctor_target", args: []string{"doctor", "--target", "127.0.0.1:8000"}, code: exitUsage},
		{name: "error_show_extra", args: []string{"show", "$TMP/refserver", "stages"}, setup: fixtures("refserver"), code: exitUsage},
		{name: "show", args: []string{"show", "$TMP/refserver"}, setup: fixtures("refserver")},
		{name: "show_markdown", args: []string{"show", "--format", "markdown", "$TMP/refserver_random"}, setup: fixtures("refserver_random")},
		{name: "show_killed", args: []string{"show", "$TMP/killed"}, setup: killedBundle},
		{name: "analyze_killed_sweep", args: []string{"analyze", "$TMP/killed", "sweep"}, setup: killedBundle},
		{name: "analyze_list", args: []string{"analyze", "--list"}},
		{name: "analyze", args: []string{"analyze", "$TMP/refserver"}, setup: fixtures("refserver"), fixture: "refserver"},
		// The answer first: what a capture opens with (finisher).
		{name: "analyze_summary", args: []string{"analyze", "$TMP/refserver", "summary"}, setup: fixtures("refserver")},
		{name: "analyze_summary_sglang", args: []string{"analyze", "$TMP/sglang", "summary"}, setup: fixtures("sglang")},
		{name: "analyze_json", args: []string{"analyze", "$TMP/sglang", "sweep", "knee", "--format", "json"}, setup: fixtures("sglang")},
		{name: "compare", args: []string{"compare", "$TMP/refserver", "$TMP/sglang"}, setup: fixtures("refserver", "sglang")},
		{name: "export_perfetto", args: []string{"export", "$TMP/vllm", "--perfetto", "$TMP/vllm.json"}, setup: fixtures("vllm")},
		{name: "export_otlp", args: []string{"export", "$TMP/vllm", "--otlp", "$OTLP", "--batch", "100", "--quiet"}, setup: otlpSink},
		{name: "runbook_incomplete", args: runbookGoldenArgs("--runs", "warm,1"), setup: fakeServer(2), code: exitIncomplete, volatile: true},
		{name: "runbook_complete", args: runbookGoldenArgs("--runs", "warm,1,2"), setup: fakeServer(0), volatile: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.volatile && testing.Short() {
				t.Skip("starts fake servers")
			}
			tmp := t.TempDir()
			vars := map[string]string{"$TMP": tmp}
			if tc.setup != nil {
				for k, v := range tc.setup(t, tmp) {
					vars[k] = v
				}
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				for k, v := range vars {
					a = strings.ReplaceAll(a, k, v)
				}
				args[i] = a
			}
			code, stdout, stderr := runCLI(args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s\n%s", code, tc.code, stdout, stderr)
			}
			mask := func(s string) string {
				s = placeholders(s, vars)
				s = otlpTiming.ReplaceAllString(s, ", Xs (X spans/s)")
				if tc.volatile {
					s = maskVolatile(s)
				}
				if tc.fixture != "" {
					s = margin.Mask(s, tc.fixture, margin.FixtureExempt())
				}
				return s
			}
			if tc.volatile {
				stdout, stderr = withoutDriverLag(t, tmp, stdout), withoutDriverLag(t, tmp, stderr)
			}
			goldenFile(t, filepath.Join("testdata", tc.name+".stdout"), mask(stdout))
			goldenFile(t, filepath.Join("testdata", tc.name+".stderr"), mask(stderr))
		})
	}
}

// The sweep that capture, show and analyze print is one table with one
// set of notes: capture prints the default analyses (finisher), whose
// first table is the sweep; show and analyze run the same script.
func TestOneSweepTable(t *testing.T) {
	tmp := t.TempDir()
	killedBundle(t, tmp)
	for _, dir := range []string{filepath.Join(tmp, "killed"), writeGolden(t, tmp, "refserver_random")} {
		_, show, _ := runCLI("show", dir)
		_, analyze, _ := runCLI("analyze", dir, "sweep")
		f := finisher(analysis.LengthBuckets{})(context.Background(), dir, true)
		tabs, detail, err := f.Tables, f.Detail, f.TablesErr
		// the checks and the summary; then the detail: its title, the sweep
		if err != nil || tabs[0].Name != "validity" || tabs[len(tabs)-1].Name != "summary" || len(detail) < 2 || detail[1].Name != "sweep" || f.DetailHint == nil {
			t.Fatalf("capture's tables: %v, detail %v, %v", tabs, detail, err)
		}
		var capture bytes.Buffer
		table.Render(&capture, "table", detail[1])
		if show != analyze || show != capture.String() {
			t.Errorf("%s: the sweeps differ:\n--- show\n%s--- analyze\n%s--- capture\n%s", dir, show, analyze, capture.String())
		}
	}
}

func goldenFile(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if got == "" {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		want, err = nil, nil // no file: no output
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s differs (go test -run CLIGolden -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// placeholders puts the names of vars (longest value first) back where
// their values appear.
func placeholders(s string, vars map[string]string) string {
	type kv struct{ k, v string }
	var kvs []kv
	for k, v := range vars {
		if v != "" {
			kvs = append(kvs, kv{k, v})
		}
	}
	for i := range kvs { // longest first: $BIN may lie under $TMP's parent
		for j := i + 1; j < len(kvs); j++ {
			if len(kvs[j].v) > len(kvs[i].v) {
				kvs[i], kvs[j] = kvs[j], kvs[i]
			}
		}
	}
	for _, x := range kvs {
		s = strings.ReplaceAll(s, x.v, x.k)
	}
	return s
}

var (
	volatilePid     = regexp.MustCompile(`\bpid( \(|\s+)?\d+`)
	volatileRunsPid = regexp.MustCompile(`(?m)^(run-\S+\s+(true|false)\s+)\d+`) // the runs table's pid column
	volatilePort    = regexp.MustCompile(`127\.0\.0\.1:\d+`)                    // OTLP receivers on port 0
	volatileFloat   = regexp.MustCompile(`\d+\.\d+`)
	volatilePercent = regexp.MustCompile(`\b\d+ %`) // a whole share timing moves: 99 % or 100 %
	volatileSpace   = regexp.MustCompile(` {2,}`)
	volatileDash    = regexp.MustCompile(`-{3,}`)
)

// maskVolatile hides what a live run changes every time: pids, ports
// other than $PORT, and the decimal numbers that timing moves (latencies,
// rates, startup times, the evidence's figures); then the column padding
// and rules, which those widths move. What the fake server makes exact is
// kept: the corpus WER (its transcripts are the references), counts, and
// the scored-runs rows of a deterministic metric.
func maskVolatile(s string) string {
	s = volatilePid.ReplaceAllString(s, "pid${1}N")
	s = volatileRunsPid.ReplaceAllString(s, "${1}N")
	s = strings.ReplaceAll(s, "127.0.0.1:$PORT", "\x00")
	s = volatilePort.ReplaceAllString(s, "127.0.0.1:N")
	s = strings.ReplaceAll(s, "127.0.0.1", "\x01")
	s = volatileDash.ReplaceAllString(s, "---")
	s = volatileSpace.ReplaceAllString(s, "  ")
	lines := strings.Split(s, "\n")
	var header []string // the current table's columns; nil outside a table
	for i, l := range lines {
		switch {
		case l == "---" && i > 0:
			header = strings.Split(strings.TrimSpace(lines[i-1]), "  ")
			continue
		case strings.TrimSpace(l) == "":
			header = nil
		}
		if header == nil || (i+1 < len(lines) && lines[i+1] == "---") {
			if !(i+1 < len(lines) && lines[i+1] == "---") {
				lines[i] = maskNumbers(l)
			}
			continue
		}
		cells := strings.Split(strings.TrimSpace(l), "  ")
		if len(cells) != len(header) {
			lines[i] = maskNumbers(l)
			continue
		}
		keepRow := slices.Contains(cells, "corpus WER")
		for j, c := range cells {
			if !keepRow && !deterministicColumns[header[j]] {
				cells[j] = maskNumbers(c)
			}
		}
		lines[i] = strings.Join(cells, "  ")
	}
	s = strings.Join(lines, "\n")
	return strings.NewReplacer("\x00", "127.0.0.1:$PORT", "\x01", "127.0.0.1").Replace(s)
}

// maskNumbers hides decimals and whole percentages.
func maskNumbers(s string) string {
	return volatilePercent.ReplaceAllString(volatileFloat.ReplaceAllString(s, "#"), "# %")
}

// deterministicColumns are the columns whose numbers a fake-server run
// makes exact.
var deterministicColumns = map[string]bool{"corpus WER": true, "completed": true, "n": true, "scored": true, "complete": true, "rank": true}

func writeGolden(t *testing.T, tmp, name string) string {
	t.Helper()
	dir := filepath.Join(tmp, name)
	if _, err := fixture.Write(dir, fixture.Golden()[name]); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fixtures writes the named golden bundles (analysis/fixture) into $TMP.
func fixtures(names ...string) func(t *testing.T, tmp string) map[string]string {
	return func(t *testing.T, tmp string) map[string]string {
		for _, n := range names {
			writeGolden(t, tmp, n)
		}
		return nil
	}
}

// killedBundle is $TMP/killed: the refserver_random bundle as a capture
// killed before its end leaves it: no results.json, a manifest that says
// neither finished nor complete, and the last pass of c64 missing from the
// manifest's passes (its requests are there).
func killedBundle(t *testing.T, tmp string) map[string]string {
	t.Helper()
	dir := filepath.Join(tmp, "killed")
	if _, err := fixture.Write(dir, fixture.Golden()["refserver_random"]); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, bundle.ResultsFile)); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest
	m.Complete, m.Finished, m.EndUnixNs = false, false, 0
	m.Levels = m.Levels[:len(m.Levels)-1]
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return nil
}

// otlpSink writes the vllm bundle and starts an OTLP/HTTP endpoint that
// accepts everything: $OTLP.
func otlpSink(t *testing.T, tmp string) map[string]string {
	writeGolden(t, tmp, "vllm")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	return map[string]string{"$OTLP": srv.URL}
}

// otlpTiming is the export's elapsed time and rate, the one timing in the
// output of the commands that read fixtures.
var otlpTiming = regexp.MustCompile(`, [0-9.]+s \([0-9]+ spans/s\)`)

// runbookGoldenArgs is a runbook of fake servers ($SERVER on $PORT) into
// $TMP/rb, with the fixed flags of runbookArgs.
func runbookGoldenArgs(extra ...string) []string {
	args := append([]string{"capture", "--server-cmd", "$SERVER", "--dataset", "$TMP/data/m.jsonl"},
		runbookArgs(0, "$TMP/rb")...)
	for i, a := range args {
		if a == "http://127.0.0.1:0" {
			args[i] = "http://127.0.0.1:$PORT"
		}
	}
	return append(args, extra...)
}

// withoutDriverLag leaves out of a live run's output what only a pass
// whose driver lagged prints: the pass's self-check line, the sweep's
// note and the self-check table. Whether the driver keeps its 5 ms slot
// gap depends on the machine's load (one CI run, every package 2.8x
// slower than here, lagged at c=1 against a server that answered at
// once), not on the code under test; TestDriverSelfCheckStarved tests the
// lag itself. Each line left out must match a lagging pass in a manifest
// under tmp, so the output cannot claim a lag the bundle does not hold.
func withoutDriverLag(t *testing.T, tmp, s string) string {
	t.Helper()
	lagged := map[string]bool{} // "c1 repeat 1" of each lagging pass
	manifests, _ := filepath.Glob(filepath.Join(tmp, "*", "*", bundle.ManifestFile))
	for _, m := range manifests {
		var doc struct {
			Extra struct {
				Checks []capture.SelfCheckRecord `json:"driver_self_check"`
			} `json:"extra"`
		}
		readJSONInto(t, m, &doc)
		for _, c := range doc.Extra.Checks {
			if len(c.Lagging) > 0 { // the manifest's notes keep the level's key, stderr its label
				lagged[fmt.Sprintf("%s repeat %d", c.Level, c.Repeat)] = true
				lagged[fmt.Sprintf("%s repeat %d", model.LevelLabel(c.Level), c.Repeat)] = true
			}
		}
	}
	var out []string
	inTable := false
	lines := strings.Split(s, "\n")
	for _, l := range lines {
		switch m := driverLagLine.FindStringSubmatch(l); {
		case inTable:
			inTable = l != ""
			continue
		case strings.HasPrefix(l, "The driver's self-check ("):
			inTable = true
			if len(lagged) == 0 {
				t.Errorf("the output has the driver's self-check table, but no manifest under %s holds a lagging pass", tmp)
			}
			continue
		case m != nil:
			if !lagged[m[1]] {
				t.Errorf("%q: no manifest under %s holds %s as lagging", l, tmp, m[1])
			}
			continue
		}
		out = append(out, l)
	}
	if n := len(lines) - len(out); n > 0 {
		t.Logf("the driver lagged in %d pass(es) on this machine: %d lines about it are left out of the comparison", len(lagged), n)
	}
	return strings.Join(out, "\n")
}

// driverLagLine is a pass's self-check line on stderr or its note in the
// sweep, when the driver lagged; the group is the pass ("c1 repeat 1").
var driverLagLine = regexp.MustCompile(`^(\S+ repeat \d+): (driver self-check: .*THE DRIVER LAGGED|the driver lagged \()`)

// fakeServer writes a 3-sample dataset and plans fake servers (fakeasr)
// on a free port; with failStart n the n-th server start fails its first
// request. The servers answer after 200 ms, so the driver's own slot gap
// under a loaded machine's stalls stays a small share of each slot's
// cycle (under scripts/lib/driver.star's MIN_SHARE): the diagnosis does
// not name the load generator, whose lag lines withoutDriverLag leaves
// out.
func fakeServer(failStart int) func(t *testing.T, tmp string) map[string]string {
	return func(t *testing.T, tmp string) map[string]string {
		t.Helper()
		ds := dataset(t, 3)
		if err := os.MkdirAll(filepath.Join(tmp, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"m.jsonl", "u0.wav", "u1.wav", "u2.wav"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(ds), f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "data", f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		port := fakeasr.FreePort(t)
		o := fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK, FailStart: failStart, Delay: 200 * time.Millisecond}
		if failStart > 0 {
			o.CounterFile = filepath.Join(tmp, "starts")
		}
		return map[string]string{"$SERVER": fakeasr.CommandLine(o), "$PORT": strconv.Itoa(port), "$BIN": os.Args[0]}
	}
}
