package main

import (
	"bytes"
	"github.com/asrprof/asrprof/internal/bundletest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

// asrprof report DIR and asrprof report CURRENT BASELINE, through the
// binary, on two of the H200 bundles.
func TestReportCommand(t *testing.T) {
	t.Parallel()
	cur, base := bundletest.H200(t, "gpu-bound"), bundletest.H200(t, "study")
	out, err := asrprof("report", cur).CombinedOutput()
	if err != nil {
		t.Fatalf("asrprof report: %v\n%s", err, out)
	}
	want := filepath.Join(cur, "report.html")
	if strings.TrimSpace(string(out)) != "report: "+want {
		t.Errorf("stdout %q, want the path written", out)
	}
	doc, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{`id="plot-sweep-latency"`, `id="plot-timeline"`, `id="plot-flame-c64"`, "c=128: admission cap"} {
		if !bytes.Contains(doc, []byte(id)) {
			t.Errorf("report.html lacks %s", id)
		}
	}
	cmp := filepath.Join(t.TempDir(), "cmp.html")
	out, err = asrprof("report", cur, base, "--out", cmp).CombinedOutput()
	if err != nil {
		t.Fatalf("asrprof report A B: %v\n%s", err, out)
	}
	doc, err = os.ReadFile(cmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{`id="plot-cmp-rps"`, `id="plot-cmp-ratio"`, `id="plot-cmp-stages"`, "baseline study"} {
		if !bytes.Contains(doc, []byte(id)) {
			t.Errorf("the comparison lacks %s", id)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"report"}, exitUsage, "give one bundle directory"},
		{[]string{"report", cur, base, cur}, exitUsage, "give one bundle directory"},
		{[]string{"report", filepath.Join(t.TempDir(), "nope")}, exitUsage, "nope: no such directory"}, // bad input: exit 2
		{[]string{"report", cur, "--stages", "odd"}, exitUsage, `--stages "odd"`},
		{[]string{"report", "--help"}, exitOK, "asrprof report CURRENT BASELINE"},
	} {
		var o, e bytes.Buffer
		if code := runTest(tc.args, &o, &e); code != tc.code || !strings.Contains(o.String()+e.String(), tc.msg) {
			t.Errorf("%v: exit %d (want %d), output lacks %q:\n%s%s", tc.args, code, tc.code, tc.msg, o.String(), e.String())
		}
	}
}

// asrprof capture ends by writing report.html into its bundle and saying
// where it is.
func TestCaptureWritesReport(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	dir := filepath.Join(t.TempDir(), "b")
	var o, e bytes.Buffer
	code := runTest([]string{"capture", "--target", srv.URL, "--dataset", dataset(t, 4), "--concurrency", "1,2",
		"--repeats", "1", "--out", dir, "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}, &o, &e)
	if code != exitOK {
		t.Fatalf("capture: exit %d\n%s", code, e.String())
	}
	path := filepath.Join(dir, "report.html")
	if !strings.Contains(e.String(), "report: "+path+"\n") {
		t.Errorf("capture does not say where its report is:\n%s", e.String())
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(`id="plot-sweep-rps"`)) || !bytes.Contains(doc, []byte("c=2")) {
		t.Errorf("report.html lacks the sweep of c=1,2")
	}
}
