package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/runbook"
)

// The test binary doubles as asrprof when ASRPROF_TEST_MAIN is set, so
// tests can run it as a real process (and kill it).
func TestMain(m *testing.M) {
	fakeasr.Main() // the test binary is also the runbook tests' fake server
	if os.Getenv("ASRPROF_TEST_MAIN") == "1" {
		main()
		return
	}
	// This package's parallel tests are its idle ones: their time is a
	// server's sleeps (build delays, a throttled upload, servers starting),
	// not CPU, so five of them at once, not GOMAXPROCS (2 on the CI
	// machine), keep the package's wall time down without slowing what
	// they measure (parallel_test.go has the groups). With four, the
	// phase's last 100 s left the two cores 60-80 % idle (vmstat, one
	// make test). An explicit -parallel wins.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "5")
	}
	code := m.Run()
	shared.removeAll()
	os.Exit(code)
}

func asrprof(args ...string) *exec.Cmd {
	if len(args) > 0 && args[0] == "capture" {
		args = withFlags(args, "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none")
	}
	args = portZeroGrace(args)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "ASRPROF_TEST_MAIN=1")
	return cmd
}

// runTest is run as the tests call it in process, with portZeroGrace.
func runTest(args []string, stdout, stderr io.Writer) int {
	return run(context.Background(), portZeroGrace(args), stdout, stderr)
}

// portZeroGrace gives a command whose OTLP/HTTP receiver is on port 0
// (before a `--`) a span grace of 100 ms, unless it names one: no server
// learns that port, so none sends spans, and a capture shorter than the
// grace need not wait for its first ones (TestCaptureWaitsForSilence has
// the default's wait).
func portZeroGrace(args []string) []string {
	own := args[:flagsEnd(args)]
	i := -1 // the last --otlp-http: Go's flags keep the last value
	for j, a := range own {
		if a == "--otlp-http" {
			i = j
		}
	}
	if i < 0 || i+1 >= len(own) || !strings.HasSuffix(own[i+1], ":0") || slices.Contains(own, "--span-grace") {
		return args
	}
	return withFlags(args, "--span-grace", "100ms")
}

// flagsEnd is where asrprof's own arguments end: at a `--` (capture
// --proxy's command follows it), else at the end.
func flagsEnd(args []string) int {
	if i := slices.Index(args, "--"); i > 0 {
		return i
	}
	return len(args)
}

// withFlags adds flags to asrprof's own arguments, before a `--`.
func withFlags(args []string, flags ...string) []string {
	end := flagsEnd(args)
	return slices.Concat(args[:end], flags, args[end:])
}

func dataset(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var m strings.Builder
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("u%d.wav", i)
		os.WriteFile(filepath.Join(dir, name), audiotest.WAV16(16000, 1, make([]int16, 8000)...), 0o644)
		fmt.Fprintf(&m, "{\"id\":\"u%d\",\"audio\":%q,\"text\":%q}\n", i, name, fakeasr.DefaultText)
	}
	p := filepath.Join(dir, "m.jsonl")
	os.WriteFile(p, []byte(m.String()), 0o644)
	return p
}

func TestHelpTeachesEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runTest([]string{"capture", "--help"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"--target", "--dataset", "--protocol", "--model", "--lang", "--concurrency",
		"--rate", "--arrivals", "--repeats", "--warmup", "--max-samples", "--timeout", "--out", "--format", "--skip-bad", "Examples:"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("capture --help lacks %s", flag)
		}
	}
	out.Reset()
	if code := runTest([]string{"--help"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "capture") {
		t.Errorf("asrprof --help: exit %d\n%s", code, out.String())
	}
}

func TestExitCodes(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	dead := fakeasr.NewServer(t, fakeasr.Config{})
	deadURL := dead.URL
	dead.Close()
	ds := dataset(t, 2)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, exitUsage, "unknown command"},
		{"bad flag", []string{"capture", "--nope"}, exitUsage, "nope"},
		{"bad protocol", []string{"capture", "--target", srv.URL, "--dataset", ds, "--protocol", "grpc"}, exitUsage, "--protocol"},
		{"bad cpu engine", []string{"capture", "--target", deadURL, "--dataset", ds, "--cpu-engine", "bogus"}, exitUsage, `--cpu-engine "bogus"`},
		{"missing dataset", []string{"capture", "--target", srv.URL, "--dataset", "/nonexistent/m.jsonl", "--out", t.TempDir() + "/x"}, exitUsage, "/nonexistent/m.jsonl"},
		{"raw dir under a file", []string{"capture", "--target", srv.URL, "--dataset", ds, "--save-raw-dir", ds + "/raw", "--out", t.TempDir() + "/r"}, exitUsage, "--save-raw-dir"},
		{"unreachable target", []string{"capture", "--target", deadURL, "--dataset", ds, "--out", t.TempDir() + "/y"}, exitUsage, "did not answer"},
		{"ok", []string{"capture", "--target", srv.URL, "--dataset", ds, "--concurrency", "1", "--repeats", "1", "--out", t.TempDir() + "/z", "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}, exitOK, "c=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runTest(tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.msg) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, tc.code, tc.msg, out.String(), errb.String())
			}
		})
	}
}

// SIGKILL in the middle of a capture: the bundle keeps every request
// recorded before the kill and still loads, and `show` summarises it.
func TestSIGKILLMidCaptureStillLoads(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 20 * time.Millisecond})
	out := filepath.Join(t.TempDir(), "b")
	cmd := asrprof("capture", "--target", srv.URL, "--dataset", dataset(t, 200), "--concurrency", "2",
		"--repeats", "1", "--out", out, "--quiet")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(out, bundle.RequestsFile))
		if bytes.Count(b, []byte("\n")) >= 20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("capture made no progress")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil || len(reqs) < 20 || len(reqs) >= 200 {
		t.Fatalf("%d requests loaded (err %v)", len(reqs), err)
	}
	if b.Manifest.Complete {
		t.Error("a killed capture says complete")
	}
	if _, err := b.Results(); err == nil {
		t.Error("a killed capture has results.json")
	}
	res := summary.Levels(summary.Passes(reqs, b.Manifest.Levels, summary.SLO{}))
	if len(res) != 1 || res[0].Total != len(reqs) {
		t.Fatalf("summarize: %+v", res)
	}
	var sout, serr bytes.Buffer
	if code := runTest([]string{"show", out}, &sout, &serr); code != exitOK ||
		!strings.Contains(sout.String(), "INCOMPLETE") || !strings.Contains(sout.String(), fmt.Sprintf("%d/%d", len(reqs), len(reqs))) {
		t.Errorf("show: exit %d\n%s%s", code, sout.String(), serr.String())
	}
}

// Ctrl-C: in-flight requests get the grace, the bundle is finalized with
// complete=false, and the exit status is 130.
func TestInterruptExits130(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 30 * time.Millisecond})
	out := filepath.Join(t.TempDir(), "b")
	cmd := asrprof("capture", "--target", srv.URL, "--dataset", dataset(t, 200), "--concurrency", "2",
		"--repeats", "1", "--out", out, "--quiet")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRequests(filepath.Join(out, bundle.RequestsFile), 5)
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit: %v, want %d", err, exitInterrupted)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Complete || !b.Manifest.Interrupted || b.Manifest.EndUnixNs == 0 {
		t.Errorf("manifest after Ctrl-C: complete=%v interrupted=%v end=%d", b.Manifest.Complete, b.Manifest.Interrupted, b.Manifest.EndUnixNs)
	}
}

// Ctrl-C in a command that is not a capture: the work stops, the command
// says so and exits 130, not 1 with the errors of what was cut short. A
// command blocked where it cannot stop (here opening a named pipe as its
// script) keeps running after the first signal; the second ends it.
func TestInterruptAnalyze(t *testing.T) {
	t.Parallel()
	dir := writeGolden(t, t.TempDir(), "sglang")
	loop := filepath.Join(t.TempDir(), "loop.star")
	if err := os.WriteFile(loop, []byte("x = 0\nwhile True:\n    x += 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := asrprof("analyze", dir, loop)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // in the loop by now
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted || strings.TrimSpace(stderr.String()) != "asrprof analyze: interrupted" {
		t.Fatalf("exit: %v, want %d and one line\n%s", err, exitInterrupted, stderr.String())
	}

	pipe := filepath.Join(t.TempDir(), "pipe.star")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = asrprof("analyze", dir, pipe)
	done := outlivesSignal(t, cmd, os.Interrupt, "the first Ctrl-C ended a command blocked on a named pipe: the test no longer blocks it")
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Errorf("after the second Ctrl-C: %v, want killed by SIGINT", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("a second Ctrl-C did not end the command")
	}
}

// A server that dies mid-capture: the capture goes on (the requests fail
// and are counted), and says that the target's process has exited, so
// that the probes' silence after it is not read as an idle server.
func TestServerDiesMidCapture(t *testing.T) {
	t.Parallel()
	port := fakeasr.FreePort(t)
	argv := fakeasr.Command(fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, Port: port, Delay: 50 * time.Millisecond})
	srv := exec.Command(argv[0], argv[1:]...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	target := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err := http.Get(target + "/health"); err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake server did not start")
		}
	}
	out := filepath.Join(t.TempDir(), "b")
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "capture", "--target", target, "--dataset", dataset(t, 40), "--concurrency", "1,2",
		"--repeats", "1", "--out", out, "--pid", strconv.Itoa(srv.Process.Pid), "--probes", "proc",
		"--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off")
	cmd.Env = append(os.Environ(), "ASRPROF_TEST_MAIN=1")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRequests(filepath.Join(out, bundle.RequestsFile), 5)
	srv.Process.Kill()
	srv.Wait()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != exitNoSuccess) {
		t.Fatalf("exit: %v, want 0 or %d\n%s", err, exitNoSuccess, stderr.String())
	}
	if want := fmt.Sprintf("target: pid %d has exited (by the end of c=1 repeat 1)", srv.Process.Pid); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if _, err := bundle.Open(out); err != nil {
		t.Error(err)
	}
}

// A command that started a server stops it on Ctrl-C, even when Ctrl-C
// comes twice: the second does not cut the stop short and leave the
// server running.
func TestInterruptTwiceStopsTheServer(t *testing.T) {
	t.Parallel()
	signalsStopTheServer(t, os.Interrupt, os.Interrupt)
}

// signalsStopTheServer runs a capture with --server-cmd, sends sigs 20 ms
// apart once its load is under way, and checks that it exits as
// interrupted with its server stopped.
func signalsStopTheServer(t *testing.T, sigs ...os.Signal) {
	t.Helper()
	port := fakeasr.FreePort(t)
	target := fmt.Sprintf("http://127.0.0.1:%d", port)
	out := filepath.Join(t.TempDir(), "b")
	cmd := asrprof("capture", "--server-cmd", fakeasr.CommandLine(fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, Port: port, Delay: 30 * time.Millisecond}),
		"--runs", "1", "--target", target, "--dataset", dataset(t, 200), "--concurrency", "2", "--repeats", "1", "--out", out, "--quiet",
		"--gpu-free-mib", "100000000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRequests(filepath.Join(out, "run-1", bundle.RequestsFile), 5)
	for i, sig := range sigs {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(sig)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit after %v: %v, want %d\n%s", sigs, err, exitInterrupted, stderr.String())
	}
	if r, err := http.Get(target + "/health"); err == nil {
		r.Body.Close()
		t.Errorf("the server still answers after the capture's exit:\n%s", stderr.String())
	}
}

// asrprof killed mid-capture (SIGKILL: the OOM killer, a CI job's
// timeout): the server's guard stops the server and its child (which
// ignores SIGTERM, so after --stop-grace), hides the key in server.log and
// says there what it did; the bundle loads as an incomplete one.
func TestKilledCaptureGuardStopsTheServer(t *testing.T) {
	t.Parallel()
	port := fakeasr.FreePort(t)
	target := fmt.Sprintf("http://127.0.0.1:%d", port)
	const key = "guard-key-4242"
	childFile := filepath.Join(t.TempDir(), "child.pid")
	out := filepath.Join(t.TempDir(), "b")
	server := "env VLLM_API_KEY=" + key + " " + fakeasr.CommandLine(fakeasr.ProcessOptions{Mode: fakeasr.ProcessChild, Port: port,
		Delay: 30 * time.Millisecond, APIKey: key, ChildPIDFile: childFile})
	cmd := asrprof("capture", "--server-cmd", server, "--header", "Authorization: Bearer "+key, "--stop-grace", "1s",
		"--runs", "1", "--target", target, "--dataset", dataset(t, 200), "--concurrency", "2", "--repeats", "1", "--out", out, "--quiet",
		"--gpu-free-mib", "100000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(out, "run-1")
	waitRequests(filepath.Join(run, bundle.RequestsFile), 5)
	b, _ := os.ReadFile(childFile)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the server's child pid: %q: %v", b, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	var log []byte
	for i := 0; i < 300 && !bytes.Contains(log, []byte("its guard stopped it")); i++ { // 15 s
		time.Sleep(50 * time.Millisecond)
		log, _ = os.ReadFile(filepath.Join(run, runbook.LogFile))
	}
	if !bytes.Contains(log, []byte("its guard stopped it: stopped\n")) {
		t.Fatalf("server.log has no line of the guard's stop:\n%s", log)
	}
	if bytes.Contains(log, []byte(key)) || !bytes.Contains(log, []byte(secret.Hidden)) {
		t.Errorf("server.log keeps the key, or hides nothing:\n%s", log)
	}
	if r, err := http.Get(target + "/health"); err == nil {
		r.Body.Close()
		t.Error("the server still answers after the guard's stop")
	}
	if !fakeasr.Gone(child) {
		fakeasr.Kill(child)
		t.Errorf("the server's child %d (it ignores SIGTERM) outlived the guard's stop", child)
	}
	show := asrprof("show", run)
	got, _ := show.CombinedOutput()
	if !strings.Contains(string(got), "the capture did not finish") {
		t.Errorf("show of the killed capture:\n%s", got)
	}
}

// The SIGHUP of a closed terminal or ssh session stops a capture as
// Ctrl-C does: the bundle finalized, the server stopped. Under nohup the
// SIGHUP stays ignored.
func TestHangup(t *testing.T) {
	t.Parallel()
	signalsStopTheServer(t, syscall.SIGHUP)

	dir := writeGolden(t, t.TempDir(), "sglang")
	loop := filepath.Join(t.TempDir(), "loop.star")
	if err := os.WriteFile(loop, []byte("x = 0\nwhile True:\n    x += 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nohup := exec.Command("nohup", os.Args[0], "analyze", dir, loop)
	nohup.Env = asrprof().Env
	done := outlivesSignal(t, nohup, syscall.SIGHUP, "a SIGHUP that nohup ignores ended the command")
	nohup.Process.Signal(os.Interrupt)
	if err := <-done; err == nil || err.(*exec.ExitError).ExitCode() != exitInterrupted {
		t.Errorf("Ctrl-C under nohup: %v, want exit %d", err, exitInterrupted)
	}
}

// outlivesSignal starts cmd, sends it sig a second later and fails with
// why when cmd ends within the next second; it returns cmd's Wait.
func outlivesSignal(t *testing.T, cmd *exec.Cmd, sig os.Signal, why string) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(time.Second)
	cmd.Process.Signal(sig)
	select {
	case err := <-done:
		t.Fatalf("%s (%v)", why, err)
	case <-time.After(time.Second):
	}
	return done
}

// waitRequests waits, 10 s at most, until the requests file at path has n
// lines: the capture's load is under way.
func waitRequests(path string, n int) {
	for i := 0; i < 2000; i++ {
		if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
