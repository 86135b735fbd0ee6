package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/trace/export"
)

func exportBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cap")
	if _, err := fixture.Write(dir, fixture.Config{Levels: []fixture.SimLevel{{Concurrency: 2}}, RequestsPerPass: 6}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExportUsage(t *testing.T) {
	dir := exportBundle(t)
	for _, args := range [][]string{
		{},
		{dir},
		{dir, "--otlp", "grpc://127.0.0.1:4317"},
		{dir, "--otlp", "http://127.0.0.1:4318", "--sample", "0"},
		{dir, "--otlp", "http://127.0.0.1:4318", "--rate-limit", "-1"},
	} {
		err := runExport(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, errUsage) {
			t.Errorf("export %q: err = %v, want a usage error", args, err)
		}
	}
	var out bytes.Buffer
	if err := runExport(context.Background(), []string{"--help"}, &out, io.Discard); err != errHelp {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"--otlp", "--perfetto", "--sample", "--rate-limit", "--batch", "Examples:"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("help does not mention %s", f)
		}
	}
}

func TestExportOTLPAndPerfetto(t *testing.T) {
	dir := exportBundle(t)
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		posts.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	pf := filepath.Join(t.TempDir(), "out.json")
	var out, errb bytes.Buffer
	err := runExport(context.Background(), []string{dir, "--otlp", srv.URL, "--batch", "10", "--perfetto", pf}, &out, &errb)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, errb.String())
	}
	if posts.Load() < 2 {
		t.Errorf("%d POSTs, want several batches of 10", posts.Load())
	}
	for _, want := range []string{"otlp: ", "spans sent to " + srv.URL + "/v1/traces", "failed batches 0", "perfetto: wrote " + pf} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "otlp: ") {
		t.Errorf("no progress on stderr: %q", errb.String())
	}
	b, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.TraceEvents) == 0 {
		t.Errorf("perfetto file: %v, %d events", err, len(doc.TraceEvents))
	}
}

func TestExportNeverAccepted(t *testing.T) {
	t.Parallel() // an export to a closed port
	dir := exportBundle(t)
	addr := "127.0.0.1:" + strconv.Itoa(fakeasr.FreePort(t)) // reserved, and nothing listens
	var out bytes.Buffer
	err := runExport(context.Background(), []string{dir, "--otlp", "http://" + addr, "--quiet"}, &out, io.Discard)
	if !errors.Is(err, export.ErrNeverAccepted) {
		t.Errorf("err = %v, want ErrNeverAccepted", err)
	}
	if !strings.Contains(out.String(), "0 spans sent") {
		t.Errorf("final count missing: %q", out.String())
	}
}

// TestExportPerfettoCountsSchedOutsidePasses: scheduler rows whose pass the
// manifest lacks (a capture stopped mid-pass) are left out of the trace,
// and export says how many, rather than dropping them unseen.
func TestExportPerfettoCountsSchedOutsidePasses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	if _, err := fixture.Write(dir, fixture.Config{Levels: []fixture.SimLevel{{Concurrency: 2}}, RequestsPerPass: 6, Sched: true}); err != nil {
		t.Fatal(err)
	}
	export := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := runExport(context.Background(), []string{dir, "--perfetto", filepath.Join(t.TempDir(), "out.json")}, &out, io.Discard); err != nil {
			t.Fatalf("export: %v", err)
		}
		return out.String()
	}
	if out := export(); strings.Contains(out, "left out") {
		t.Errorf("every row is in a pass, yet:\n%s", out)
	}
	// Two more rows of a pass that never ended: c=3, not in the manifest.
	p := filepath.Join(dir, "sched.jsonl")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var row map[string]any
	if err := json.Unmarshal(bytes.SplitN(b, []byte("\n"), 2)[0], &row); err != nil {
		t.Fatal(err)
	}
	row["level"] = "c3"
	extra, _ := json.Marshal(row)
	b = append(b, append(append(extra, '\n'), append(extra, '\n')...)...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := export(); !strings.Contains(out, "perfetto: 2 rows of sched.jsonl left out: their pass is not in the manifest") {
		t.Errorf("export does not count the rows it left out:\n%s", out)
	}
}
