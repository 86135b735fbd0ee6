package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
)

// lengthsBundle writes a simulated capture of a dataset with two lengths
// of audio, 2 s and 30 s, alternating, over c=1…16: a server with
// separate room for each length. Short requests take 200 ms until c=8
// and queue past it; long ones take 1 s until c=4 and queue past it. So
// by construction the long bucket's knee is c=4 and the short one's c=8:
// from c=4 to c=8 the pass's throughput rises under 10 % while only the
// long requests' latency rises; from c=8 to c=16 it stays flat while the
// short ones' latency triples. slo, if not "", is the capture's --slo.
func lengthsBundle(t *testing.T, slo string) string {
	t.Helper()
	ms := func(n int) fixture.Dist { return fixture.Fixed(time.Duration(n) * time.Millisecond) }
	st := func(wait, work int) fixture.Stages {
		return fixture.Stages{Build: ms(2), QueuedToSched: ms(wait), FirstForward: ms(work), DecodeTail: ms(5), ClientOverhead: ms(1)}
	}
	short, long := 2.0, 30.0
	var levels []fixture.SimLevel
	for _, l := range []struct {
		c                   int
		shortWait, longWait int
	}{{1, 0, 0}, {2, 0, 0}, {4, 0, 0}, {8, 0, 1100}, {16, 400, 3000}} {
		levels = append(levels, fixture.SimLevel{Concurrency: l.c, Stages: st(0, 192),
			ByAudio: map[float64]fixture.Stages{short: st(l.shortWait, 192), long: st(l.longWait, 992)}})
	}
	dir := filepath.Join(t.TempDir(), "lengths")
	if _, err := fixture.Write(dir, fixture.Config{Levels: levels, Repeats: 2, RequestsPerPass: 160, Audio: []float64{short, long}, SLO: slo}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bucketRows runs `asrprof analyze DIR buckets --format json` with args
// and returns the length_* tables' rows (column → value) and notes.
func bucketRows(t *testing.T, dir string, args ...string) (map[string][]map[string]any, map[string][]string) {
	t.Helper()
	code, out, errs := runCLI(append([]string{"analyze", dir, "buckets", "--format", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("analyze %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	return tablesOf(t, out)
}

// tablesOf reads `--format json` output: per table name, its rows as
// column → value, and its notes.
func tablesOf(t *testing.T, out string) (map[string][]map[string]any, map[string][]string) {
	t.Helper()
	var jt attrTables
	if err := json.Unmarshal([]byte(out), &jt); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows, notes := map[string][]map[string]any{}, map[string][]string{}
	for _, tb := range jt.Tables {
		rows[tb.Name] = []map[string]any{}
		for _, r := range tb.Rows {
			m := map[string]any{}
			for i, c := range tb.Columns {
				m[c] = r[i]
			}
			rows[tb.Name] = append(rows[tb.Name], m)
		}
		notes[tb.Name] = tb.Notes
	}
	return rows, notes
}

// byBucket is rows keyed by their bucket (and level, where they have one).
func byBucket(rows []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range rows {
		k := r["bucket"].(string)
		if lv, ok := r["level"].(string); ok {
			k += " " + lv
		}
		out[k] = r
	}
	return out
}

// The knee per bucket differs by construction (lengthsBundle): the long
// bucket saturates at c=4, the short one at c=8, while the whole sweep
// has one knee, c=4.
func TestLengthBucketsKneePerBucket(t *testing.T) {
	dir := lengthsBundle(t, "")
	for _, tc := range []struct {
		args        []string
		short, long string // the buckets' names
	}{
		{nil, "≤ 2 s", "> 2 s"}, // auto: terciles 2 and 30 s; 30 s is the longest, so one edge
		{[]string{"--length-buckets", "10"}, "≤ 10 s", "> 10 s"},
		{[]string{"--length-buckets", "1,10,60"}, "1–10 s", "10–60 s"},
	} {
		name := strings.Join(tc.args, " ")
		if name == "" {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) {
			rows, notes := bucketRows(t, dir, tc.args...)
			sum := byBucket(rows["length_buckets"])
			if len(sum) != 2 {
				t.Fatalf("want 2 buckets, got %v", rows["length_buckets"])
			}
			for _, want := range []struct {
				bucket, audio, knee string
			}{{tc.short, "2", "c8"}, {tc.long, "30", "c4"}} {
				r := sum[want.bucket]
				if r == nil {
					t.Fatalf("no bucket %q in %v", want.bucket, rows["length_buckets"])
				}
				if r["knee"] != want.knee || r["recommended"] != want.knee || r["basis"] != "knee" || r["audio (s)"] != want.audio || r["requests"] != 800.0 {
					t.Errorf("bucket %s: %v, want knee and recommended %s (knee), audio %s s, 800 requests", want.bucket, r, want.knee, want.audio)
				}
			}
			// The sweep per bucket: each length's own latency.
			sw := byBucket(rows["length_sweep"])
			for _, want := range []struct {
				key    string
				lat    float64
				reqs   float64 // req/s: the bucket's 80 requests over the pass's wall
				audioS float64
			}{{tc.short + " c8", 0.2, 3.36, 2}, {tc.long + " c8", 2.1, 3.36, 30}, {tc.short + " c16", 0.6, 3.17, 2}} {
				r := sw[want.key]
				if r == nil {
					t.Fatalf("no sweep row %q in %v", want.key, rows["length_sweep"])
				}
				for _, col := range []string{"latency mean (s)", "latency p50 (s)", "latency p95 (s)", "latency p99 (s)"} {
					if got := r[col].(float64); math.Abs(got-want.lat) > 0.002 {
						t.Errorf("%s: %s %v, want %v", want.key, col, got, want.lat)
					}
				}
				rps := r["req/s"].(float64)
				if math.Abs(rps-want.reqs) > 0.01 || math.Abs(r["audio s per s"].(float64)-want.audioS*rps) > 1e-6 {
					t.Errorf("%s: req/s %v, audio s per s %v; want %v req/s and %v× that", want.key, rps, r["audio s per s"], want.reqs, want.audioS)
				}
				if r["completed"] != "160/160" {
					t.Errorf("%s: completed %v, want 160/160 (2 repeats of 80)", want.key, r["completed"])
				}
			}
			// The stage means per bucket: the long requests' queueing.
			st := byBucket(rows["length_stages"])
			if r := st[tc.long+" c8"]; r == nil || math.Abs(r["queued→scheduled"].(float64)-1100) > 0.5 || math.Abs(st[tc.short+" c8"]["queued→scheduled"].(float64)) > 0.5 {
				t.Errorf("stages per bucket: long c8 %v, short c8 %v; want 1100 and 0 ms queued→scheduled", r, st[tc.short+" c8"])
			}
			if len(tc.args) > 0 && tc.args[1] == "1,10,60" {
				if !containsLine(notes["length_buckets"], "buckets with no requests: ≤ 1 s, > 60 s") {
					t.Errorf("the empty buckets are not said: %v", notes["length_buckets"])
				}
			}
		})
	}
	// A second run reads the buckets' passes kept with the tables
	// (tables/length_passes.json): the same numbers.
	first, _ := bucketRows(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "tables", "length_passes.json")); err != nil {
		t.Fatalf("the buckets' passes are not kept: %v", err)
	}
	again, _ := bucketRows(t, dir)
	if a, b := fmt.Sprint(first["length_sweep"]), fmt.Sprint(again["length_sweep"]); a != b {
		t.Errorf("from tables/length_passes.json:\n%s\nfirst:\n%s", b, a)
	}
	// The whole sweep has a single knee, the long bucket's.
	code, out, errs := runCLI("analyze", dir, "knee")
	if code != exitOK || !strings.Contains(out, "throughput saturates at c=4") {
		t.Errorf("analyze knee: exit %d\n%s\n%s", code, out, errs)
	}
	// Text: the edges printed.
	code, out, errs = runCLI("analyze", dir, "buckets")
	if code != exitOK || !strings.Contains(out, "Results by audio length: terciles of the requests' audio duration, edges 2 s (rounded)") {
		t.Errorf("analyze buckets: exit %d\n%s\n%s", code, out, errs)
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// All lengths in one bucket: said once, and no bucket tables; off: nothing.
func TestLengthBucketsOneBucketAndOff(t *testing.T) {
	dir := lengthsBundle(t, "")
	code, out, errs := runCLI("analyze", dir, "buckets", "--length-buckets", "60")
	if want := "Results by audio length: every scored request's audio (2–30 s) falls in one bucket (edges 60 s (--length-buckets 60)): no per-length tables\n"; code != exitOK || out != want {
		t.Errorf("one bucket: exit %d, stdout %q, want only %q\n%s", code, out, want, errs)
	}
	rows, _ := bucketRows(t, dir, "--length-buckets", "60")
	if len(rows) != 1 || len(rows["length_buckets"]) != 0 {
		t.Errorf("one bucket, json: want only the length_buckets message; got %v", rows)
	}
	code, out, errs = runCLI("analyze", dir, "--length-buckets", "off", "--format", "json")
	if code != exitOK || strings.Contains(out, "length_") {
		t.Errorf("--length-buckets off: exit %d, a length table in\n%s\n%s", code, out, errs)
	}
	// The default analyses include the buckets.
	code, out, errs = runCLI("analyze", dir, "--format", "json")
	if code != exitOK || !strings.Contains(out, `"name": "length_sweep"`) {
		t.Errorf("analyze DIR: exit %d, no length_sweep\n%s\n%s", code, out, errs)
	}
}

// Under the capture's --slo the recommended level is the highest whose
// every repeat meets it (99 % attainment): short requests meet
// latency=1.5s at every level (0.2–0.6 s), long ones (1 s until c=4,
// then 2.1 s) only up to c=4.
func TestLengthBucketsSLO(t *testing.T) {
	dir := lengthsBundle(t, "latency=1.5s")
	rows, notes := bucketRows(t, dir)
	sum := byBucket(rows["length_buckets"])
	basis := "highest level meeting the SLO latency=1.5s in ≥ 99 % of requests, every repeat"
	for b, want := range map[string]string{"≤ 2 s": "c16", "> 2 s": "c4"} {
		if r := sum[b]; r == nil || r["recommended"] != want || r["basis"] != basis {
			t.Errorf("bucket %s: %v, want recommended %s (%s)", b, r, want, basis)
		}
	}
	sw := byBucket(rows["length_sweep"])
	for k, want := range map[string]float64{"> 2 s c4": 100, "> 2 s c8": 0, "≤ 2 s c16": 100} {
		if r := sw[k]; r == nil || r["SLO attainment (%)"] != want {
			t.Errorf("%s: %v, want attainment %v %%", k, r, want)
		}
	}
	if !containsLine(notes["length_sweep"], "goodput: the bucket's requests per second that met every limit of the SLO latency=1.5s; attainment: their share of the bucket's requests") {
		t.Errorf("length_sweep notes: %v", notes["length_sweep"])
	}
	// A --find-max capture's --attainment is the target.
	path := filepath.Join(dir, "manifest.json")
	var man map[string]any
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	man["config"].(map[string]any)["search"] = map[string]any{"attainment": 0.5}
	if b, err = json.Marshal(man); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rows, _ = bucketRows(t, dir)
	if r := byBucket(rows["length_buckets"])["> 2 s"]; r == nil || r["basis"] != "highest level meeting the SLO latency=1.5s in ≥ 50 % of requests, every repeat" {
		t.Errorf("with search.attainment 0.5: %v", r)
	}
}

// Requests that record no audio duration are counted in a line of their
// own, not dropped silently.
func TestLengthBucketsUnknown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "unknown")
	ms := func(n int) fixture.Dist { return fixture.Fixed(time.Duration(n) * time.Millisecond) }
	lv := func(c int) fixture.SimLevel {
		return fixture.SimLevel{Concurrency: c, Stages: fixture.Stages{FirstForward: ms(50), DecodeTail: ms(5)}}
	}
	// 20 requests a pass, every third without a duration: 6 a pass.
	if _, err := fixture.Write(dir, fixture.Config{Levels: []fixture.SimLevel{lv(1), lv(2)}, Audio: []float64{2, 30, 0}}); err != nil {
		t.Fatal(err)
	}
	rows, notes := bucketRows(t, dir, "--length-buckets", "10")
	if n := len(rows["length_buckets"]); n != 2 {
		t.Fatalf("%d buckets: %v", n, rows["length_buckets"])
	}
	got := 0.0
	for _, r := range rows["length_buckets"] {
		got += r["requests"].(float64)
	}
	if got != 28 || !containsLine(notes["length_buckets"], "length unknown: 12 of 40 scored requests record no audio duration and are in no bucket") {
		t.Errorf("%v requests in buckets (want 28); notes %v", got, notes["length_buckets"])
	}
}

// Malformed --length-buckets is an error naming the flag, exit 2, on
// every command that takes it.
func TestLengthBucketsFlagErrors(t *testing.T) {
	dir := lengthsBundle(t, "")
	for _, tc := range []struct{ value, want string }{
		{"5,,15", `--length-buckets "5,,15": element 2 is empty`},
		{"5,", `--length-buckets "5,": element 2 is empty`},
		{"5,x", `--length-buckets "5,x": element 2, "x", is not a number of seconds (want auto, off, or edges such as 5,15,30)`},
		{"15,5", `--length-buckets "15,5": element 2, "5", is not above the edge before it (15): give the edges in ascending order`},
		{"5,5", `--length-buckets "5,5": element 2, "5", is not above the edge before it (5)`},
		{"0", `--length-buckets "0": element 1, "0", must be > 0 seconds`},
		{"-3", `--length-buckets "-3": element 1, "-3", must be > 0 seconds`},
		{"NaN", `--length-buckets "NaN": element 1, "NaN", is not a number of seconds`},
		{"terciles", `--length-buckets "terciles": element 1, "terciles", is not a number of seconds`},
	} {
		for _, args := range [][]string{
			{"analyze", dir, "--length-buckets", tc.value},
			{"report", dir, "--out", filepath.Join(t.TempDir(), "r.html"), "--length-buckets", tc.value},
			{"capture", "--target", "http://127.0.0.1:1", "--dataset", "none.jsonl", "--length-buckets", tc.value},
		} {
			code, out, errs := runCLI(args...)
			if code != exitUsage || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("%s --length-buckets %q: exit %d, stderr %q, stdout %q; want exit %d and %q", args[0], tc.value, code, errs, out, exitUsage, tc.want)
			}
		}
	}
}

// capture --length-buckets: the tables it prints at its end and its
// report use the buckets. A dataset of 0.5 s and 3 s clips.
func TestCaptureLengthBuckets(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 10 * time.Millisecond})
	ds := t.TempDir()
	var m strings.Builder
	for i, samples := range []int{8000, 48000, 8000, 48000} {
		name := fmt.Sprintf("u%d.wav", i)
		if err := os.WriteFile(filepath.Join(ds, name), audiotest.WAV16(16000, 1, make([]int16, samples)...), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&m, "{\"id\":\"u%d\",\"audio\":%q,\"text\":%q}\n", i, name, fakeasr.DefaultText)
	}
	manifest := filepath.Join(ds, "m.jsonl")
	if err := os.WriteFile(manifest, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	capture := func(lengths string) (string, string, string) {
		out := filepath.Join(t.TempDir(), "run")
		code, stdout, stderr := runCLI("capture", "--target", srv.URL, "--dataset", manifest, "--concurrency", "1,2", "--repeats", "1",
			"--length-buckets", lengths, "--out", out, "--quiet", "--verbose", "--probes", "none", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "100ms")
		if code != exitOK {
			t.Fatalf("capture --length-buckets %s: exit %d\n%s\n%s", lengths, code, stdout, stderr)
		}
		page, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		return out, stdout, string(page)
	}
	out, stdout, page := capture("1")
	for _, want := range []string{"Results by audio length: edges 1 s (--length-buckets 1)", "≤ 1 s", "> 1 s", "Sweep per audio length"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the capture's tables lack %q:\n%s", want, stdout)
		}
	}
	for _, want := range []string{`data-table="length_buckets"`, `data-table="length_sweep"`, "edges 1 s (--length-buckets 1)", "By audio length"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// The comparison has no buckets: the flag is refused there.
	code, _, stderr := runCLI("report", out, out, "--out", filepath.Join(t.TempDir(), "c.html"), "--length-buckets", "5")
	if code != exitUsage || !strings.Contains(stderr, "--length-buckets: the comparison of two bundles has no results by audio length") {
		t.Errorf("report A B --length-buckets: exit %d: %s", code, stderr)
	}
	_, stdout, page = capture("off")
	if strings.Contains(stdout, "Results by audio length") || strings.Contains(page, `data-table="length_`) {
		t.Errorf("--length-buckets off: bucket tables in the capture's output or report:\n%s", stdout)
	}
}
