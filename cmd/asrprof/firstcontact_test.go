package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// TestAnalyzeDiagnosisNames: the diagnosis is reachable under the names
// its output goes by ("diagnosis", "advice"), each the bottleneck
// analysis, run once however many of its names are given.
func TestAnalyzeDiagnosisNames(t *testing.T) {
	tmp := t.TempDir()
	writeGolden(t, tmp, "refserver")
	dir := tmp + "/refserver"
	code, want, stderr := runCLI("analyze", dir, "bottleneck")
	if code != 0 || !strings.Contains(want, "Diagnosis per level") {
		t.Fatalf("analyze bottleneck: exit %d\n%s\n%s", code, want, stderr)
	}
	for _, names := range [][]string{{"diagnosis"}, {"advice"}, {"diagnosis", "advice", "bottleneck"}} {
		code, got, stderr := runCLI(append([]string{"analyze", dir}, names...)...)
		if code != 0 || got != want {
			t.Errorf("analyze %v: exit %d, stdout differs from bottleneck's:\n%s\n%s", names, code, got, stderr)
		}
	}
}

// TestCaptureStreams: one stream rule. The tables, the checks and the
// summary first, go to stdout, then one line to the detail, which
// --verbose prints in its place; progress and notes (the target, the
// probes, the receiver, the bundle) to stderr; --quiet leaves the answer
// alone on stdout and stderr empty.
func TestCaptureStreams(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 10 * time.Millisecond})
	ds := dataset(t, 2)
	capture := func(extra ...string) (string, string) {
		args := append([]string{"capture", "--target", srv.URL, "--dataset", ds, "--concurrency", "1", "--repeats", "1",
			"--out", filepath.Join(t.TempDir(), "run"), "--probes", "proc", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "100ms"}, extra...)
		code, stdout, stderr := runCLI(args...)
		if code != exitOK {
			t.Fatalf("capture %v: exit %d\n%s\n%s", extra, code, stdout, stderr)
		}
		return stdout, stderr
	}
	stdout, stderr := capture()
	// The run's checks on itself first (docs/VALIDITY.md), then the
	// answer, then one line that says where the detail is; the detail
	// itself only with --verbose.
	hint := regexp.MustCompile(`(?m)^The detail \(sweep, [a-z_, ]+\): capture --verbose prints it, and so does 'asrprof analyze \S+/run \[NAME\]'\.$`)
	if v, sum := strings.Index(stdout, "Validity: the run checks itself"), strings.Index(stdout, "Summary: per level"); v != 0 || sum < 0 || !hint.MatchString(stdout) || strings.Index(stdout, "The detail (") < sum {
		t.Errorf("stdout does not open with the checks, then the summary, then the line to the detail:\n%s", stdout)
	}
	if strings.Contains(stdout, "Sweep (mean over repeats") || strings.Contains(stdout, "Diagnosis per level") {
		t.Errorf("the detail without --verbose:\n%s", stdout)
	}
	verbose, verr := capture("--verbose")
	if v, sum, sw := strings.Index(verbose, "Validity: the run checks itself"), strings.Index(verbose, "Summary: per level"), strings.Index(verbose, "Sweep (mean over repeats"); v != 0 || sum < 0 || sw < sum || !strings.Contains(verbose, "Diagnosis per level") || hint.MatchString(verbose) {
		t.Errorf("--verbose: stdout is not the checks, the summary, then the detail:\n%s", verbose)
	}
	for _, out := range []struct{ stdout, stderr string }{{stdout, stderr}, {verbose, verr}} {
		for _, s := range []string{"Summary: per level", "Sweep (mean over repeats", "The detail ("} {
			if strings.Contains(out.stderr, s) {
				t.Errorf("a table on stderr (%q):\n%s", s, out.stderr)
			}
		}
		for _, s := range []string{"target: ", "probe proc", "OTLP receiver", "c=1 repeat 1/1", "bundle: "} {
			if !strings.Contains(out.stderr, s) {
				t.Errorf("stderr lacks %q:\n%s", s, out.stderr)
			}
		}
	}
	quiet, qerr := capture("--quiet")
	if qerr != "" {
		t.Errorf("--quiet printed on stderr:\n%s", qerr)
	}
	if !strings.HasPrefix(quiet, "Validity: the run checks itself") || !strings.Contains(quiet, "Summary: per level") || strings.Contains(quiet, "Sweep (mean over repeats") || strings.Contains(quiet, "The detail (") {
		t.Errorf("--quiet: stdout is not the answer alone:\n%s", quiet)
	}
}

// TestAnalyzeCSVShape: --format csv and tsv give one value a cell: every
// row as wide as its header, no "mean / p95" or "[min–max]" packed in a
// cell, the stages' mean and p95 in columns of their own.
func TestAnalyzeCSVShape(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	for _, f := range []struct {
		name string
		sep  rune
	}{{"csv", ','}, {"tsv", '\t'}} {
		code, out, stderr := runCLI("analyze", dir, "sweep", "stages", "summary", "--format", f.name)
		if code != exitOK {
			t.Fatalf("%s: exit %d\n%s", f.name, code, stderr)
		}
		var headers []string
		for _, block := range strings.Split(strings.TrimSpace(out), "\n\n") {
			r := csv.NewReader(strings.NewReader(block))
			r.Comma = f.sep
			recs, err := r.ReadAll() // fails on a row of another width
			if err != nil {
				t.Fatalf("%s: %v\n%s", f.name, err, block)
			}
			headers = append(headers, strings.Join(recs[0], "|"))
			for _, rec := range recs[1:] {
				for _, c := range rec {
					if strings.Contains(c, " / ") || strings.Contains(c, "–") {
						t.Errorf("%s: a cell of two values: %q in %v", f.name, c, rec)
					}
				}
			}
		}
		all := strings.Join(headers, "\n")
		for _, col := range []string{"build mean_ms", "build p95_ms", "latency p95 (s)", "verdict"} {
			if !strings.Contains(all, col) {
				t.Errorf("%s: no column %q in\n%s", f.name, col, all)
			}
		}
	}
}

// TestServeRefusals: serve checks a capture as the command line does
// before it accepts it (a missing dataset, a misspelt flag) and answers
// every error in JSON, unknown routes and methods included; --pidfile names the daemon's pid, which its
// listening line prints too, and is gone once it stops.
func TestServeRefusals(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "serve.pid")
	p, base := startServe(t, "", "--listen", "127.0.0.1:0", "--dir", t.TempDir(), "--pidfile", pidfile)
	b, err := os.ReadFile(pidfile)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(p.cmd.Process.Pid) {
		t.Errorf("--pidfile: %q %v, want %d", b, err, p.cmd.Process.Pid)
	}
	if want := fmt.Sprintf("(pid %d;", p.cmd.Process.Pid); !strings.Contains(p.out.String(), want) {
		t.Errorf("the listening line lacks %q:\n%s", want, p.out.String())
	}
	for _, tc := range []struct {
		method, path string
		args         []string
		code         int
		want         string
	}{
		{"POST", "/v1/captures", []string{"--target", "http://127.0.0.1:1", "--dataset", "/nonexistent/m.jsonl"}, http.StatusBadRequest, "--dataset /nonexistent/m.jsonl: no such file"},
		{"POST", "/v1/captures", []string{"--target", "http://127.0.0.1:1", "--concurency", "4"}, http.StatusBadRequest, "did you mean --concurrency?"},
		{"GET", "/v1/captures/nope", nil, http.StatusNotFound, `no capture "nope"`},
		// Routes the API does not have answer JSON too, not net/http's text.
		{"GET", "/v1/nope", nil, http.StatusNotFound, "no route GET /v1/nope"},
		{"GET", "/nope/deeper?x=1", nil, http.StatusNotFound, "no route GET /nope/deeper"},
		{"DELETE", "/v1/captures", nil, http.StatusMethodNotAllowed, "DELETE /v1/captures: method not allowed (allowed: GET, HEAD, POST)"},
		{"POST", "/metrics", nil, http.StatusMethodNotAllowed, "POST /metrics: method not allowed"},
		{"POST", "/v1/captures", nil, http.StatusBadRequest, `body: want {"args"`},
	} {
		var in any
		if tc.args != nil {
			in = capture.AgentStart{Args: tc.args}
		}
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		if in != nil {
			body, _ := json.Marshal(in)
			req, _ = http.NewRequest(tc.method, base+tc.path, bytes.NewReader(body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error  string `json:"error"`
			Status int    `json:"status"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "application/json" || derr != nil || e.Status != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s %v: %d %s %+v (%v), want %d and an error with %q", tc.method, tc.path, tc.args, resp.StatusCode, resp.Header.Get("Content-Type"), e, derr, tc.code, tc.want)
		}
	}
	var list []capture.AgentCapture
	if code, body := api(t, "GET", base+"/v1/captures", "", nil, &list); code != http.StatusOK || len(list) != 0 {
		t.Errorf("refused captures were listed: %d %s", code, body)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("the pidfile outlived the daemon: %v", err)
	}
}

// TestAnalyzeWidths: the tables through the CLI. On a terminal of 80,
// 100 and 160 columns no line is wider than it; written to a file, every
// row stays within 160 columns, the long evidence under the rows.
func TestAnalyzeWidths(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	args := []string{"analyze", dir, "sweep", "stages", "bottleneck"}
	for _, width := range []int{80, 100, 160} {
		out := onTerminal(t, width, args...)
		if !strings.Contains(out, "Diagnosis per level") {
			t.Fatalf("%d columns: no diagnosis:\n%s", width, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > width {
				t.Errorf("%d columns: a line of %d: %q", width, n, l)
			}
		}
	}
	_, file, _ := runCLI(args...)
	rows := 0
	for _, l := range strings.Split(file, "\n") {
		if strings.HasPrefix(l, "c=") {
			rows++
			if n := utf8.RuneCountInString(l); n > 160 {
				t.Errorf("in a file, a row of %d: %q", n, l)
			}
		}
	}
	if rows == 0 || !strings.Contains(file, "evidence:\n  c=") {
		t.Errorf("in a file: %d rows, evidence block missing:\n%s", rows, file)
	}
}

// onTerminal runs asrprof with its stdout on a pseudo-terminal width
// columns wide and returns what it printed there.
func onTerminal(t *testing.T, width int, args ...string) string {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the terminal: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: uint16(width)}); err != nil {
		t.Skipf("setting the window size: %v", err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 4096)
		for {
			k, err := ptmx.Read(b)
			buf.Write(b[:k])
			if err != nil {
				return
			}
		}
	}()
	var errb bytes.Buffer
	code := runTest(args, tty, &errb)
	tty.Close()
	<-done
	if code != exitOK {
		t.Fatalf("%v: exit %d\n%s", args, code, errb.String())
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n")
}

// TestReportVerdictOnceZeroFolded: the report's verdict cards are not
// followed by the same table again, and a table's rows that are all zero
// (states no request was in) are folded under it, not drawn among the
// others.
func TestReportVerdictOnceZeroFolded(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	if code, _, stderr := runCLI("report", dir); code != exitOK {
		t.Fatalf("report: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if strings.Contains(page, `data-table="bottleneck"`) {
		t.Error("the bottleneck table is drawn again under the verdict cards")
	}
	if !strings.Contains(page, `class="verdict"`) {
		t.Error("no verdict cards")
	}
	_, text, _ := runCLI("analyze", dir, "bottleneck", "--format", "json")
	var doc jsonTables
	if err := json.Unmarshal([]byte(text), &doc); err != nil || len(doc.Tables) == 0 {
		t.Fatalf("bottleneck: %v", err)
	}
	ev := fmt.Sprint(doc.Tables[0].Rows[0][len(doc.Tables[0].Columns)-1])
	if n := strings.Count(page, esc(ev)); n != 1 {
		t.Errorf("the verdict's evidence appears %d times, want once: %.80q", n, ev)
	}
	// The attribution table: its all-zero rows folded under it.
	i := strings.Index(page, `data-table="attribution"`)
	if i < 0 {
		t.Fatal("no attribution table")
	}
	tab := page[i:]
	if j := strings.Index(tab, `<div class="tw">`); j >= 0 { // up to the next table
		tab = tab[:j]
	}
	main, folded, ok := strings.Cut(tab, `<tbody class="zero">`)
	if !ok || !strings.Contains(folded, "rows all zero") {
		t.Fatalf("no folded rows in the attribution table:\n%.3000s", tab)
	}
	rowRE := regexp.MustCompile(`<tr>(<td[^>]*>[^<]*</td>)+</tr>`)
	cellRE := regexp.MustCompile(`<td class="n">([^<]*)</td>`)
	for _, r := range rowRE.FindAllString(main, -1) {
		nonzero := false
		for _, m := range cellRE.FindAllStringSubmatch(r, -1) {
			if v, err := strconv.ParseFloat(strings.TrimSpace(m[1]), 64); err != nil || v != 0 {
				nonzero = true
			}
		}
		if !nonzero {
			t.Errorf("an all-zero row among the drawn ones: %s", r)
		}
	}
	for _, r := range rowRE.FindAllString(folded, -1) {
		for _, m := range cellRE.FindAllStringSubmatch(r, -1) {
			if v, err := strconv.ParseFloat(strings.TrimSpace(m[1]), 64); err == nil && v != 0 {
				t.Errorf("a row with a value folded away: %s", r)
			}
		}
	}
}

// esc is html.EscapeString as the report writes text.
func esc(s string) string { return html.EscapeString(s) }

// TestHotCodeOwnFrames: kernel, vDSO and hypervisor frames are marked as
// such in the hottest functions and are never the diagnosis's hottest
// code (the server's own caller is); stacks that end in no mapping are
// counted and said, with the fix. The profile is the serving thread's of
// the refserver fixture at c=64: its hottest leaf is a hypervisor helper.
func TestHotCodeOwnFrames(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	kern := &profile.Mapping{ID: 1, File: "[kernel.kallsyms]"}
	lib := &profile.Mapping{ID: 2, File: "/usr/lib/libasr.so", Start: 0x1000, Limit: 0x9000}
	vd := &profile.Mapping{ID: 3, File: "[vdso]"}
	unk := &profile.Mapping{ID: 4, File: "[unknown]"}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}, Period: 10_000_000,
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Mapping: []*profile.Mapping{kern, lib, vd, unk}}
	loc := func(id uint64, m *profile.Mapping, name string) *profile.Location {
		fn := &profile.Function{ID: id, Name: name}
		p.Function = append(p.Function, fn)
		l := &profile.Location{ID: id, Mapping: m, Line: []profile.Line{{Function: fn}}}
		p.Location = append(p.Location, l)
		return l
	}
	pvm, decode, clock := loc(1, kern, "pvm_irq_enable"), loc(2, lib, "decode_step"), loc(3, vd, "[vdso]+0x7bd")
	caller, fast, lost := loc(4, lib, "read_clock"), loc(5, lib, "fast_path"), loc(6, unk, "[unknown]")
	main := loc(7, lib, "main_loop")
	add := func(n int, locs ...*profile.Location) {
		for i := 0; i < n; i++ {
			p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{10_000_000},
				Label: map[string][]string{"tid": {"101"}, "thread": {"asr-sched"}}})
		}
	}
	add(60, pvm, decode, main) // the hottest leaf: a hypervisor helper, called by decode_step
	add(30, decode, main)
	add(10, clock, caller, main)
	add(50, fast, lost) // a stack that ends in no mapping
	if err := os.MkdirAll(filepath.Join(dir, "cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "cpu", "c64-1.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, out, stderr := runCLI("analyze", dir, "cpu", "bottleneck")
	if code != exitOK {
		t.Fatalf("analyze: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"[hypervisor] pvm_irq_enable", "[vdso]+0x7bd", "stacks truncated: 33 % of the samples' stacks end at an address in no mapping",
		"otel engine unwinds without frame pointers", "-fno-omit-frame-pointer", "hottest code decode_step (60 % of its samples)"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`hottest code (\[|pvm_)`).MatchString(out) {
		t.Errorf("kernel, vDSO or hypervisor code named as the hottest code:\n%s", out)
	}
}
