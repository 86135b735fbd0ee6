package columns

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/model"
)

func fp(x float64) *float64 { return &x }

// full is a request with every field set (realtime ones included), and
// strings that need escaping.
func full(i int) model.Request {
	return model.Request{
		ID: "7", SampleID: "s\"1\"", Level: "c8", Repeat: 2, Warmup: i%2 == 1, TraceID: "0af7651916cd43dd8448eb211c80319c",
		RequestID: "asrprof-1", ServerRequestID: "srv-1", IntendedUnixNs: 1, StartUnixNs: 1764480000123456789, ConnectedUnixNs: 2,
		UploadDoneUnixNs: 3, FirstByteUnixNs: 4, FirstTokenUnixNs: 5, EndUnixNs: 1764480000987654321,
		LatencyS: 0.123456789, TTFTS: 0.05, ChunkGapsS: []float64{0.1, 0.25}, AudioDurationS: 3.5, HTTPStatus: 200,
		Status: "ok", ErrorKind: "timeout", Error: "line\nbreak \u00e9", Hyp: "héllo \\ wörld", Ref: "hello world",
		Lang: "en", Scored: true, Errors: &model.WordErrors{Sub: 1, Del: 2, Ins: 3, RefWords: 9},
		FirstUpdateS: fp(0.2), FinalAfterStopS: fp(0.3), LagP95S: fp(0.4), LagMaxS: fp(0.5), LagGrowthS: fp(-0.1),
		LagSource: "server", Partials: 4, Finals: 2, ServerErrors: 1, AudioS: 3.25, SendLateMaxS: fp(0.01),
	}
}

func writeJSONL(t *testing.T, path string, recs ...any) {
	t.Helper()
	var b strings.Builder
	for _, r := range recs {
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every field of model.Request survives requests.jsonl → the scanner →
// requests.parquet → ReadRequests, as encoding/json reads it; a field the
// scanner did not know would come back zero.
func TestRequestFieldsAll(t *testing.T) {
	v := reflect.ValueOf(full(1))
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("full() leaves %s zero: the test would not see it lost", v.Type().Field(i).Name)
		}
	}
	dir := t.TempDir()
	sparse := model.Request{ID: "8", Level: "c1", Status: "failed"} // omitempty fields absent, pointers nil
	writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), full(0), full(1), sparse)
	var want []model.Request
	if _, err := bundle.ReadJSONL(filepath.Join(dir, bundle.RequestsFile), func(r model.Request) error { want = append(want, r); return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRequestsJSONL(filepath.Join(dir, bundle.RequestsFile))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("scanner: %v\n%+v\nwant %+v", err, got, want)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRequests(s.Path(RequestsTable))
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("parquet: %v\n%+v\nwant %+v", err, back, want)
	}
}

// Open builds what is missing, reuses what is fresh, and rebuilds a table
// whose source changed or whose version is not this one.
func TestOpenRebuilds(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), full(0))
	writeJSONL(t, filepath.Join(dir, bundle.EventsFile),
		map[string]any{"request_id": "srv-1", "stage": "thinker", "event_name": "a", "timestamp_ns": 5, "run_id": "r", "pid": 1},
		map[string]any{"request_id": "other", "stage": "thinker", "event_name": "b", "timestamp_ns": 6, "run_id": "r", "pid": 1, "metadata": map[string]any{"k": 1}})
	writeJSONL(t, filepath.Join(dir, bundle.GPUFile),
		map[string]any{"ts_unix_ns": 1, "gpu": 0, "kind": "util", "util_pct": 50},
		map[string]any{"ts_unix_ns": 2, "gpu": 0, "kind": "util", "util_pct": 52.5},
		map[string]any{"ts_unix_ns": 3, "gpu": 0, "kind": "period", "level": "c1", "throttle_names": []string{"sw_power"}})
	// open opens the tables and says which of them it wrote anew (a table
	// is written through a temporary file and a rename: another file).
	tables := []string{EventsTable, GPUPeriods, GPUSamples, RequestsTable}
	open := func() (*Set, []string) {
		t.Helper()
		before := map[string]os.FileInfo{}
		for _, tb := range tables {
			before[tb], _ = os.Stat(filepath.Join(dir, Dir, tb))
		}
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
		var built []string
		for _, tb := range tables {
			if fi, err := os.Stat(s.Path(tb)); err == nil && (before[tb] == nil || !os.SameFile(before[tb], fi)) {
				built = append(built, tb)
			}
		}
		return s, built
	}
	s, built := open()
	if !reflect.DeepEqual(built, tables) {
		t.Errorf("first open built %v, want %v", built, tables)
	}
	s2, _ := open()
	e, err := s2.Events()
	if err != nil || e.Len() != 2 || !reflect.DeepEqual(e.RequestIndex, []int32{0, -1}) || e.EventName.At(1) != "b" {
		t.Errorf("events read back: %+v (%v)", e, err)
	}
	if _, built := open(); len(built) != 0 {
		t.Errorf("a fresh bundle rebuilt %v", built)
	}
	if s, _ := open(); !reflect.DeepEqual(s.EventNames(), []string{"a", "b"}) {
		t.Errorf("event names %v", s.EventNames())
	}
	// gpu: the samples' util_pct mixes integers and not: a double column.
	cols, err := readColumns(s.Path(GPUSamples), []string{"util_pct", "ts_unix_ns"}, nil)
	if err != nil || !reflect.DeepEqual(cols[0].f64, []float64{50, 52.5}) || !reflect.DeepEqual(cols[1].i64, []int64{1, 2}) {
		t.Errorf("gpu samples: %+v (%v)", cols, err)
	}
	// The events' source grows: events rebuilt, requests kept.
	f, _ := os.OpenFile(filepath.Join(dir, bundle.EventsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"request_id":"srv-1","stage":"thinker","event_name":"c","timestamp_ns":7,"run_id":"r","pid":1}` + "\n")
	f.Close()
	if _, built := open(); !reflect.DeepEqual(built, []string{EventsTable}) {
		t.Errorf("after events.jsonl grew, built %v", built)
	}
	// Another version: everything again.
	rec := filepath.Join(dir, Dir, ManifestFile)
	b, _ := os.ReadFile(rec)
	os.WriteFile(rec, []byte(strings.Replace(string(b), fmt.Sprintf(`"version": %d`, Version), `"version": 0`, 1)), 0o644)
	if _, built := open(); len(built) != 4 {
		t.Errorf("after a version change, built %v", built)
	}
	// Other columns at the same version (a record from before the schema
	// was recorded has none): everything again.
	b, _ = os.ReadFile(rec)
	os.WriteFile(rec, []byte(strings.Replace(string(b), `"schema": "`+schemaID+`"`, `"schema": ""`, 1)), 0o644)
	if _, built := open(); len(built) != 4 {
		t.Errorf("after a schema change, built %v", built)
	}
}

// A read-only bundle is analysed from memory: Open works, Wait says why
// nothing was written.
func TestReadOnlyBundle(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes anywhere: make the tables folder a file instead.
		dir := t.TempDir()
		writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), full(0))
		os.WriteFile(filepath.Join(dir, Dir), []byte("not a folder"), 0o644)
		s, err := Open(dir)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if reqs, err := s.Requests(); err != nil || len(reqs) != 1 {
			t.Fatalf("requests: %d, %v", len(reqs), err)
		}
		if err := s.Wait(); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("Wait = %v, want why the tables of %s were not written", err, dir)
		}
		return
	}
	need.Root(t, "(root writes anywhere: the test makes the tables folder a file; CI and the dev machines are root)")
}

func TestScanErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "events.jsonl")
	for _, tc := range []struct{ text, want string }{
		{`{"request_id":"a","timestamp_ns":1}` + "\n" + `{"request_id":"a","pid":"x"}` + "\n", `events.jsonl:2: field "pid": want an integer, got a string`},
		{`{"request_id":"a"}` + "\n\n" + `[1]` + "\n", `events.jsonl:3: not a JSON object`},
		{`{"request_id":"a","metadata":[1]}` + "\n", `events.jsonl:1: field "metadata": want an object, got an array`},
		{`{"request_id":"a" "stage":"b"}` + "\n", `events.jsonl:1: want ',' or '}' after field "request_id"`},
		{`{"request_id":"a"}` + "\n" + `{"request_id":"tru`, ""}, // truncated last line: dropped
	} {
		os.WriteFile(p, []byte(tc.text), 0o644)
		_, err := ReadEventsJSONL(p, nil)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.text, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

// The stage boundaries survive stages.parquet: rows with bounds, rows
// with a duration only, rows with neither (nulls), for the same preset
// and spec only.
func TestStagesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), full(0), full(1))
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := &StageRows{Stage: Strings{Dict: []string{"build", "queue"}}}
	rows.Add(0, 0, 10, 20, true, 1e-8, true)
	rows.Add(0, 1, 0, 0, false, 0.5, true)
	rows.Add(1, 0, 0, 0, false, 0, false)
	rows.Add(1, 1, 30, 45, true, 0, false)
	s.WriteStages(rows, "p", "spec")
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Stages("p", "spec")
	if err != nil || !ok {
		t.Fatalf("Stages: %v, %v", ok, err)
	}
	if !reflect.DeepEqual(got.RequestIndex, rows.RequestIndex) || !reflect.DeepEqual(got.StartUnixNs, rows.StartUnixNs) ||
		!reflect.DeepEqual(got.EndUnixNs, rows.EndUnixNs) || !reflect.DeepEqual(got.HasBounds, rows.HasBounds) ||
		!reflect.DeepEqual(got.DurationS, rows.DurationS) || !reflect.DeepEqual(got.HasDuration, rows.HasDuration) {
		t.Errorf("read back %+v, want %+v", got, rows)
	}
	for i := range rows.Len() {
		if got.Stage.At(i) != rows.Stage.At(i) {
			t.Errorf("row %d: stage %q, want %q", i, got.Stage.At(i), rows.Stage.At(i))
		}
	}
	if _, ok, _ := s.Stages("p", "other spec"); ok {
		t.Error("stages of another spec read as fresh")
	}
}

// requests.jsonl over several chunks (chunkBytes), with blank lines and a
// line longer than a chunk, reads as encoding/json reads it, line by line;
// a truncated last line is dropped and a bad line is named by its number.
func TestReadRequestsJSONLChunks(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, bundle.RequestsFile)
	var b strings.Builder
	var want []model.Request
	for i := 0; b.Len() < 6*chunkBytes; i++ {
		r := full(i)
		r.ID, r.Hyp = fmt.Sprint(i), strings.Repeat("w ", i%97)
		if i == 100 {
			r.Hyp = strings.Repeat("long ", 3*chunkBytes/5)
		}
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteString("\n")
		if i%50 == 0 {
			b.WriteString("\n  \n")
		}
		want = append(want, r)
	}
	text := b.String()
	os.WriteFile(p, []byte(text+`{"id":"tru`), 0o644)
	got, err := ReadRequestsJSONL(p)
	if err != nil || len(got) != len(want) {
		t.Fatalf("%d requests, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		var w model.Request
		j, _ := json.Marshal(want[i])
		json.Unmarshal(j, &w)
		if !reflect.DeepEqual(got[i], w) {
			t.Fatalf("request %d:\n%+v\nwant %+v", i, got[i], w)
		}
	}
	line := strings.Count(text, "\n") + 1
	os.WriteFile(p, []byte(text+`{"id":7}`+"\n"+`{"id":"8"}`+"\n"), 0o644)
	if _, err := ReadRequestsJSONL(p); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("requests.jsonl:%d: field \"id\": want a string", line)) {
		t.Errorf("bad line %d: error %v", line, err)
	}
}

// Open holds the limit while it builds a large bundle's tables from its
// JSONL, until they are written; reading built tables sets none.
func TestOpenLimitsTheHeapWhileBuilding(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(old)
	dir := t.TempDir()
	cfg := fixture.Config{Format: fixture.SGLang, Levels: fixture.SweepLevels(true), RequestsPerPass: 5000, Seed: 9, NoClientSpans: true}
	if _, err := fixture.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	if n := jsonlBytes(dir); n < minLimitBytes {
		t.Fatalf("the bundle's JSONL holds %d bytes, under the %d that get a limit", n, minLimitBytes)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	writing := len(s.pending)
	s.mu.Unlock()
	if got := debug.SetMemoryLimit(-1); writing == 0 || got == math.MaxInt64 || got > 2*jsonlBytes(dir) {
		t.Errorf("right after Open, %d tables being written: limit %d, want about the JSONL's %d bytes", writing, got, jsonlBytes(dir))
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	lifted := func() bool {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if debug.SetMemoryLimit(-1) == math.MaxInt64 {
				return true
			}
		}
		return false
	}
	if !lifted() {
		t.Fatalf("the tables written: limit %d, want none", debug.SetMemoryLimit(-1))
	}
	if _, err := os.Stat(filepath.Join(dir, Dir, EventsTable)); err != nil {
		t.Fatal(err)
	}
	// The tables are fresh: read, not built. Reading them too asks for
	// huge pages first (hugeHeap allocates the sources' size in a small
	// heap; docs/PERFORMANCE.md, run T), and sets no limit.
	s = nil
	debug.FreeOSMemory()
	allocs := func() uint64 {
		m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(m)
		return m[0].Value.Uint64()
	}
	before := allocs()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := allocs() - before; runtime.GOOS == "linux" && d < uint64(jsonlBytes(dir)) {
		t.Errorf("opening fresh tables allocated %d bytes, want hugeHeap's %d or more", d, jsonlBytes(dir))
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("tables read, not built: limit %d, want none", got)
	}
	s.Wait()
}
