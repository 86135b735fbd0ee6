package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/refserver/refservertest"
	"github.com/asrprof/asrprof/runbook"
)

// runbookArgs are the flags every CLI runbook test adds: no probes, no
// fixed OTLP ports, and a GPU limit no machine reaches (these fake
// servers use no GPU, but other jobs on a GPU machine may).
func runbookArgs(port int, out string, extra ...string) []string {
	return append([]string{
		"--target", fmt.Sprintf("http://127.0.0.1:%d", port),
		"--concurrency", "1", "--repeats", "1", "--out", out, "--quiet",
		"--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none",
		"--span-grace", "100ms", "--gpu-free-mib", "100000000", "--startup-timeout", "20s",
	}, extra...)
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runTest(args, &out, &errb)
	return code, out.String(), errb.String()
}

func readRunbook(t *testing.T, out string) runbook.Report {
	t.Helper()
	var rep runbook.Report
	b, err := os.ReadFile(filepath.Join(out, runbook.File))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRunbookHelp(t *testing.T) {
	code, out, _ := runCLI("capture", "--help")
	for _, want := range []string{"--server-cmd", "--server-cmd-file", "--runs", "--health-url", "--startup-timeout",
		"--stop-grace", "--gpu-free-mib", "--gpu-free-timeout", "--reuse-server", "--provenance-env", "--cache-dir",
		"\n  3    a runbook (--server-cmd, --runs, ab, sensitivity, what-if) ran, but a\n", "run-warm/"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("capture --help lacks %q", want)
		}
	}
	code, out, _ = runCLI("ab", "--help")
	for _, want := range []string{"--a-cmd", "--b-cmd", "--order", "--no-warm", "--concurrency", "ratio B/A", "Mann-Whitney", "\n  3    a runbook"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("ab --help lacks %q", want)
		}
	}
	if code, out, _ := runCLI("--help"); code != exitOK || !strings.Contains(out, "  ab ") {
		t.Errorf("asrprof --help does not list ab:\n%s", out)
	}
}

func TestRunbookExitCodes(t *testing.T) {
	t.Parallel() // exit codes and messages of fake servers; no speed
	ds := dataset(t, 3)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name string
		opts fakeasr.ProcessOptions
		port int // 0: a free one
		args []string
		code int
		msg  []string
	}{
		{"complete", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK}, 0, []string{"--runs", "warm,1"}, exitOK,
			[]string{"Verdict: complete", "latency mean (s)"}},
		{"failed request", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, FailStart: 2}, 0, []string{"--runs", "warm,1"}, exitIncomplete,
			[]string{"INCOMPLETE", "run-1", "http_5xx 1"}},
		{"exits during start-up", fakeasr.ProcessOptions{Mode: fakeasr.ProcessExit}, 0, nil, exitFailed,
			[]string{"server exited during start-up", "CUDA out of memory (fake)"}},
		{"never healthy", fakeasr.ProcessOptions{Mode: fakeasr.ProcessUnhealthy}, 0, []string{"--startup-timeout", "1s"}, exitFailed,
			[]string{"did not become healthy", "HTTP 503"}},
		{"port taken", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK}, takenPort, nil, exitFailed,
			[]string{"already answers", "--reuse-server"}},
		{"bad runs", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK}, 0, []string{"--runs", "warm"}, exitUsage,
			[]string{"no scored run"}},
		{"shell syntax", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK}, 0, []string{"--server-cmd", "srv | tee x"}, exitUsage,
			[]string{"sh -c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := tc.port
			if port == 0 {
				port = fakeasr.FreePort(t)
			}
			o := tc.opts
			o.Port = port
			if o.FailStart > 0 {
				o.CounterFile = filepath.Join(t.TempDir(), "starts")
			}
			out := filepath.Join(t.TempDir(), "rb")
			args := append([]string{"capture", "--server-cmd", fakeasr.CommandLine(o), "--dataset", ds}, runbookArgs(port, out)...)
			args = append(args, tc.args...)
			code, stdout, stderr := runCLI(args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s\n%s", code, tc.code, stdout, stderr)
			}
			for _, m := range tc.msg {
				if !strings.Contains(stdout+stderr, m) {
					t.Errorf("output lacks %q:\n%s\n%s", m, stdout, stderr)
				}
			}
		})
	}
}

func TestABCommand(t *testing.T) {
	t.Parallel() // the runs' order, provenance and tables, not their speed
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "ab")
	a := fakeasr.CommandLine(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK})
	b := "env ASRPROF_AB_SIDE=b " + a
	code, stdout, stderr := runCLI(append([]string{"ab", "--a-cmd", a, "--b-cmd", b, "--order", "ABBA", "--no-warm",
		"--provenance-env", "ASRPROF_AB_*", "--dataset", dataset(t, 2)}, runbookArgs(port, out)...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rep := readRunbook(t, out)
	var dirs []string
	for _, r := range rep.Runs {
		dirs = append(dirs, r.Dir)
		if _, err := bundle.Open(filepath.Join(out, r.Dir)); err != nil {
			t.Errorf("%s: %v", r.Dir, err)
		}
	}
	if strings.Join(dirs, ",") != "A-1,B-1,B-2,A-2" || rep.Mode != "ab" || len(rep.Compare) == 0 {
		t.Errorf("runs %v, mode %s, %d comparisons", dirs, rep.Mode, len(rep.Compare))
	}
	if rep.Runs[1].Provenance.Env["ASRPROF_AB_SIDE"] != "b" {
		t.Errorf("B's environment not recorded: %+v", rep.Runs[1].Provenance.Env)
	}
	for _, want := range []string{"B/A", "Side A", "Side B", "A and B differ in command"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// The real thing: the reference server, started by asrprof four times.
func TestRunbookRefserver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the reference server four times")
	}
	refservertest.RequirePocketSphinx(t)
	t.Parallel() // its time is four server starts; it checks the runs, not their speed
	// the refset's short clips (about 4 s): a run's capture takes 2.5 s,
	// not the 5.5 s of its first, longest ones
	ds := refservertest.ShortClips(t, 3)
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "ref")
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	// One decoder and one build worker: the server starts faster, and
	// concurrency 1 needs no more.
	cmd := fmt.Sprintf("%s %s --port %d --max-running-requests 1 --build-workers 1", refservertest.Python, script, port)
	code, stdout, stderr := runCLI(append(append([]string{"capture", "--server-cmd", cmd, "--dataset", ds,
		"--runs", "warm,1,2,3", "--max-samples", "3", "--timeout", "60s"}, runbookArgs(port, out)...),
		"--startup-timeout", "3m")...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rep := readRunbook(t, out)
	pids := map[int]string{}
	for _, r := range rep.Runs {
		if _, err := bundle.Open(filepath.Join(out, r.Dir)); err != nil {
			t.Errorf("%s: %v", r.Dir, err)
		}
		if prev, dup := pids[r.PID]; dup || r.PID == 0 {
			t.Errorf("%s has pid %d (also %q): want a fresh server per run", r.Dir, r.PID, prev)
		}
		pids[r.PID] = r.Dir
		if r.Provenance == nil || r.Provenance.Python == nil || r.Provenance.Python.Version == "" {
			t.Errorf("%s: Python version not recorded: %+v", r.Dir, r.Provenance)
		}
	}
	if len(rep.Runs) != 4 || !rep.Verdict.Complete || rep.Verdict.Scored != 3 {
		t.Fatalf("runs %d, verdict %+v", len(rep.Runs), rep.Verdict)
	}
	for _, want := range []string{"mean", "sd", "min", "max", "latency mean (s)", "corpus WER", "Verdict: complete", "run-1 run-2 run-3"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}
