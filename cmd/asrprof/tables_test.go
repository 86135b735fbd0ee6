package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

// duckdb runs sql with DuckDB, a Parquet reader that is not ours (npm's
// @duckdb/node-api, which tools/deps.sh installs), and returns its rows.
// Without it the test fails in CI and skips elsewhere, saying how to get it.
func duckdb(t *testing.T, sql string) []map[string]any {
	t.Helper()
	dir := os.Getenv("ASRPROF_DUCKDB_NODE")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "asrprof", "duckdb-node")
	}
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api")); err != nil || serr != nil {
		need.Dep(t, "@duckdb/node-api for node in "+dir, errors.Join(err, serr))
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "duckdb_query.cjs"))
	var out, errb bytes.Buffer
	cmd := exec.Command(node, script, dir, sql)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb %q: %v\n%s", sql, err, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("duckdb %q: %v\n%s", sql, err, out.String())
	}
	return rows
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return x
	case string: // DuckDB's JSON rows give big integers as strings
		var f float64
		if _, err := fmt.Sscan(x, &f); err != nil {
			t.Fatalf("%q is not a number", x)
		}
		return f
	}
	t.Fatalf("%v (%T) is not a number", v, v)
	return 0
}

// i64 reads an integer exactly (DuckDB's JSON gives BIGINTs as strings).
func i64(t *testing.T, v any) int64 {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		return int64(num(t, v))
	}
	var i int64
	if _, err := fmt.Sscan(s, &i); err != nil {
		t.Fatalf("%q is not an integer", s)
	}
	return i
}

// A capture writes its tables at its end, and DuckDB reads them: every
// request of requests.jsonl, field for field, and every span of the span
// store, each joined to its request.
func TestCaptureTablesReadByDuckDB(t *testing.T) {
	t.Parallel() // the tables' contents
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 2 * time.Millisecond})
	out := filepath.Join(t.TempDir(), "b")
	var sout, serr bytes.Buffer
	args := []string{"capture", "--target", srv.URL, "--dataset", dataset(t, 6), "--concurrency", "1,2", "--repeats", "1",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}
	if code := runTest(args, &sout, &serr); code != exitOK {
		t.Fatalf("capture: exit %d\n%s", code, serr.String())
	}
	for _, f := range []string{columns.RequestsTable, columns.SpansTable, columns.ManifestFile} {
		if _, err := os.Stat(filepath.Join(out, columns.Dir, f)); err != nil {
			t.Errorf("capture left no %s: %v", f, err)
		}
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil || len(reqs) != 12 {
		t.Fatalf("%d requests (%v)", len(reqs), err)
	}
	rows := duckdb(t, fmt.Sprintf(`select request_index, id, level, "repeat", warmup, trace_id, request_id, start_unix_ns, end_unix_ns,
		latency_s, audio_duration_s, http_status, status, hyp, ref, scored, errors_sub, errors_ref_words
		from '%s' order by request_index`, filepath.Join(out, columns.Dir, columns.RequestsTable)))
	if len(rows) != len(reqs) {
		t.Fatalf("DuckDB read %d requests, requests.jsonl has %d", len(rows), len(reqs))
	}
	for i, row := range rows {
		r := reqs[i]
		if int(num(t, row["request_index"])) != i || row["id"] != r.ID || row["level"] != r.Level || int(num(t, row["repeat"])) != r.Repeat ||
			row["warmup"] != r.Warmup || row["trace_id"] != r.TraceID || row["request_id"] != r.RequestID ||
			i64(t, row["start_unix_ns"]) != r.StartUnixNs || i64(t, row["end_unix_ns"]) != r.EndUnixNs ||
			num(t, row["latency_s"]) != r.LatencyS || num(t, row["audio_duration_s"]) != r.AudioDurationS ||
			int(num(t, row["http_status"])) != r.HTTPStatus || row["status"] != r.Status || row["hyp"] != r.Hyp || row["ref"] != r.Ref ||
			row["scored"] != r.Scored {
			t.Errorf("row %d: DuckDB %v\nrequests.jsonl %+v", i, row, r)
		}
		if r.Errors != nil && int(num(t, row["errors_ref_words"])) != r.Errors.RefWords {
			t.Errorf("row %d: errors_ref_words %v, want %d", i, row["errors_ref_words"], r.Errors.RefWords)
		}
	}
	all, err := spans.ReadAll(filepath.Join(out, bundle.SpansFile))
	if err != nil || len(all) == 0 {
		t.Fatalf("%d spans in the store (%v)", len(all), err)
	}
	sp := duckdb(t, fmt.Sprintf(`select count(*) n, count(request_index) joined, count(distinct span_id) ids,
		min(duration_s) >= 0 ok from '%s'`, filepath.Join(out, columns.Dir, columns.SpansTable)))
	if n := num(t, sp[0]["n"]); int(n) != len(all) || num(t, sp[0]["joined"]) != n || num(t, sp[0]["ids"]) != n || sp[0]["ok"] != true {
		t.Errorf("spans.parquet %v; the store has %d spans, every one a request's", sp, len(all))
	}
}

// `asrprof analyze DIR` of a bundle without tables (an imported or killed
// capture) writes them, the stage boundaries included; the next analyze
// reuses them, and a source that changed gets its table rebuilt. DuckDB
// reads the stage table's numbers from stages.parquet.
func TestAnalyzeWritesMissingTables(t *testing.T) {
	dir := writeGolden(t, t.TempDir(), "sglang")
	tdir := filepath.Join(dir, columns.Dir)
	if _, err := os.Stat(tdir); err == nil {
		t.Fatal("the fixture has tables already")
	}
	analyze := func() string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runTest([]string{"analyze", dir, "stages", "--format", "json"}, &out, &errb); code != exitOK {
			t.Fatalf("analyze: exit %d\n%s", code, errb.String())
		}
		return out.String()
	}
	first := analyze()
	mtimes := map[string]time.Time{}
	for _, f := range []string{columns.RequestsTable, columns.EventsTable, columns.StagesTable, columns.ManifestFile} {
		fi, err := os.Stat(filepath.Join(tdir, f))
		if err != nil {
			t.Fatalf("analyze wrote no %s: %v", f, err)
		}
		mtimes[f] = fi.ModTime()
	}
	if again := analyze(); again != first {
		t.Errorf("the stage table from the tables differs from the one from JSONL:\n%s\n%s", again, first)
	}
	for f, m := range mtimes {
		if fi, _ := os.Stat(filepath.Join(tdir, f)); !fi.ModTime().Equal(m) {
			t.Errorf("the second analyze rewrote %s", f)
		}
	}
	// The stage table's c=1 build mean, from stages.parquet by DuckDB.
	var tab struct {
		Tables []struct {
			Columns []string `json:"columns"`
			Rows    [][]any  `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(first), &tab); err != nil {
		t.Fatal(err)
	}
	col := slices.Index(tab.Tables[0].Columns, "build")
	if col < 0 {
		t.Fatalf("stage table has no build column: %v", tab.Tables[0].Columns)
	}
	build := tab.Tables[0].Rows[0][col].(map[string]any)["mean_ms"].(float64)
	rows := duckdb(t, fmt.Sprintf(`select 1000 * avg(s.duration_s) ms, count(*) n from '%s' s join '%s' r using (request_index)
		where s.stage = 'build' and r.level = 'c1' and not r.warmup and r.status = 'ok'`,
		filepath.Join(tdir, columns.StagesTable), filepath.Join(tdir, columns.RequestsTable)))
	if got := num(t, rows[0]["ms"]); math.Abs(got-build) > 1e-9 || num(t, rows[0]["n"]) != 40 {
		t.Errorf("DuckDB over stages.parquet: build %v ms over %v requests; the stage table says %v ms over 40", got, rows[0]["n"], build)
	}
	// A source that changes is read again: one more request.
	reqs, _ := os.ReadFile(filepath.Join(dir, bundle.RequestsFile))
	last := reqs[bytes.LastIndexByte(reqs[:len(reqs)-1], '\n')+1:]
	var r model.Request
	json.Unmarshal(last, &r)
	r.ID, r.Level = "extra", "c99"
	line, _ := json.Marshal(r)
	os.WriteFile(filepath.Join(dir, bundle.RequestsFile), append(append(reqs, line...), '\n'), 0o644)
	analyze()
	n := duckdb(t, fmt.Sprintf(`select count(*) n from '%s'`, filepath.Join(tdir, columns.RequestsTable)))
	if int(num(t, n[0]["n"])) != bytes.Count(reqs, []byte("\n"))+1 {
		t.Errorf("requests.parquet has %v rows after requests.jsonl grew to %d lines", n[0]["n"], bytes.Count(reqs, []byte("\n"))+1)
	}
}

// A bad line in a source is an error that names the file, the line and
// the field; a truncated last line (a killed capture) is not.
func TestAnalyzeBadSourceLine(t *testing.T) {
	dir := writeGolden(t, t.TempDir(), "sglang")
	p := filepath.Join(dir, bundle.EventsFile)
	b, _ := os.ReadFile(p)
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"timestamp_ns":`, `"timestamp_ns":"soon",`+`"x":`, 1)
	os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644)
	var out, errb bytes.Buffer
	code := runTest([]string{"analyze", dir, "stages"}, &out, &errb)
	if want := fmt.Sprintf(`%s:3: field "timestamp_ns": want an integer, got a string`, p); code == exitOK || !strings.Contains(errb.String(), want) {
		t.Errorf("exit %d; stderr lacks %q:\n%s", code, want, errb.String())
	}
	// Truncated: the last line cut in half.
	lines[2] = strings.SplitAfter(string(b), "\n")[2]
	whole := strings.Join(lines, "")
	os.WriteFile(p, []byte(whole[:len(whole)-40]), 0o644)
	out.Reset()
	errb.Reset()
	if code := runTest([]string{"analyze", dir, "stages"}, &out, &errb); code != exitOK {
		t.Errorf("a truncated last line: exit %d\n%s", code, errb.String())
	}
	// A named pipe in a file's place is refused, not waited on: opening
	// one waits for a writer, and requests.jsonl is read twice.
	for _, name := range []string{bundle.RequestsFile, bundle.EventsFile, bundle.ManifestFile, bundle.ResultsFile} {
		dir := writeGolden(t, t.TempDir(), "sglang")
		p := filepath.Join(dir, name)
		if err := errors.Join(os.Remove(p), unix.Mkfifo(p, 0o644)); err != nil {
			t.Fatal(err)
		}
		var code int
		var stderr bytes.Buffer
		done := make(chan struct{})
		go func() {
			defer close(done)
			code = runTest([]string{"analyze", dir, "stages"}, io.Discard, &stderr)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("analyze with %s a named pipe still runs after 20 s", name)
		}
		if want := p + ": not a regular file"; code == exitOK || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s a named pipe: exit %d; stderr lacks %q:\n%s", name, code, want, stderr.String())
		}
		// The requests' table was being written when the events failed:
		// it is finished before analyze exits, not left half-written.
		if tmp, _ := filepath.Glob(filepath.Join(dir, columns.Dir, "*.tmp")); len(tmp) > 0 {
			t.Errorf("%s a named pipe: analyze left %v", name, tmp)
		}
	}
}
