package main

import (
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/runbook"
)

// sensServer is a fake server for the sensitivity tests, and the level
// it is measured at.
type sensServer struct {
	name        string
	opts        fakeasr.ProcessOptions
	concurrency string
	requests    int
}

var sensServers = []sensServer{
	// Computes 5 ms and sleeps 100 ms per request, two requests in flight
	// (two slots): it uses about 0.1 of a core, and is paced by its sleeps.
	{"sleep-bound", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, Spin: 5 * time.Millisecond, Delay: 100 * time.Millisecond}, "2", 24},
	// Its one worker thread computes 50 ms of CPU time per request, one
	// request at a time: bound by that thread.
	{"compute-bound", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, Spin: 50 * time.Millisecond}, "1", 16},
	// Computes 25 ms, then sleeps 25 ms: its worker is idle half the time.
	{"half-idle", fakeasr.ProcessOptions{Mode: fakeasr.ProcessOK, Spin: 25 * time.Millisecond, Delay: 25 * time.Millisecond}, "1", 16},
}

// runSensitivity runs `asrprof sensitivity` with its default allotments,
// cycles and 100 % against srv, with the extra flags.
func runSensitivityCLI(t *testing.T, srv sensServer, extra ...string) (bundle.SensitivityReport, string, string, string) {
	t.Helper()
	port := fakeasr.FreePort(t)
	o := srv.opts
	o.Port = port
	out := filepath.Join(t.TempDir(), "sens")
	args := append([]string{"sensitivity", "--server-cmd", fakeasr.CommandLine(o),
		"--target", fmt.Sprintf("http://127.0.0.1:%d", port), "--dataset", dataset(t, srv.requests),
		"--concurrency", srv.concurrency, "--repeats", "1", "--out", out, "--quiet",
		"--probes", "none", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "100ms",
		"--gpu-free-mib", "100000000", "--startup-timeout", "20s"}, extra...)
	code, stdout, stderr := runCLI(args...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rep bundle.SensitivityReport
	readJSONInto(t, filepath.Join(out, bundle.SensitivityFile), &rep)
	return rep, stdout, stderr, out
}

// Under the defaults (--cpu 100%,50%, --cycles 3, 100 % = what the server
// could use), through the real command: the server that sleeps on every
// request reads not CPU-bound, the one whose thread computes reads
// host-bound, with each method. 100 % is one core for each: the sleeper
// has no busy thread, the others one. The half-idle server is recorded,
// not judged (docs/CAPACITY.md has what it read).
//
// Bounds: |sensitivity| ≤ 0.3 and ≥ 0.7, the verdict's own thresholds.
// Spread on this shared 2-core machine (load 2 to 8; docs/CAPACITY.md,
// "Measured"), 5 runs and 2 more beside 1 and 3 extra busy loops: the
// sleeper −0.06 to 0.02 (quota) and 0.05 to 0.11 (co-runner); the
// compute-bound server 0.99 to 1.08 (quota) and 0.84 to 1.05
// (co-runner). So the bounds keep 0.19 and 0.14 of margin. Where the
// host's other load leaves the server less than the limit in two cycles
// of three, no method can bind: the test runs again (three attempts in
// all), and fails if the host never lets it.
func TestSensitivityDefaultsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fake server 36 times")
	}
	for _, method := range []string{"auto", runbook.MethodCoRunner} {
		for _, srv := range sensServers {
			t.Run(srv.name+"/"+method, func(t *testing.T) {
				var extra []string
				if method != "auto" {
					extra = []string{"--cpu-method", method}
				}
				var rep bundle.SensitivityReport
				var o bundle.SensitivityEstimate
				for attempt := 1; ; attempt++ {
					var stdout, stderr, out string
					rep, stdout, stderr, out = runSensitivityCLI(t, srv, extra...)
					t.Logf("%s\n--- stderr ---\n%s", stdout, stderr)
					checkSensitivityOutput(t, rep, stdout, stderr, out)
					o = rep.Overall
					if len(rep.Runs) != 6 {
						t.Fatalf("%d runs, want 3 cycles of 2", len(rep.Runs))
					}
					// The host's other load can hold the server's busy thread
					// below what the limit leaves it in all but one cycle
					// (under 3 other busy loops on this 2-core machine the
					// compute-bound server got 0.23 to 0.45 of a core
					// unrestricted): the limit took nothing, and the answer
					// says so. That is the host, not the method: try again,
					// twice at most, then fail (never a skip).
					if o.N >= 2 || !strings.Contains(strings.Join(rep.Notes, "\n"), "left out, their limit took under") || attempt == 3 {
						break
					}
					t.Logf("attempt %d: the limit took nothing in %d of 3 cycles on this host now: %v; again", attempt, 3-o.N, rep.Notes)
				}
				if o.N < 2 {
					t.Fatalf("overall %+v: want at least 2 cycles", o)
				}
				if !strings.HasPrefix(rep.Base, "1 core: ") {
					t.Errorf("100 %% = %q, want one core", rep.Base)
				}
				switch srv.name {
				case "sleep-bound":
					if math.Abs(o.Value) > 0.3 || rep.Verdict != "not CPU-bound" {
						t.Errorf("the sleeper read %.3f [%.2f, %.2f] %q, want ≈ 0, not CPU-bound", o.Value, o.Lo, o.Hi, rep.Verdict)
					}
					if !strings.Contains(rep.Base, "no busy thread") {
						t.Errorf("100 %% = %q, want no busy thread", rep.Base)
					}
				case "compute-bound":
					if o.Value < 0.7 || rep.Verdict != "host-bound" {
						t.Errorf("the compute-bound server read %.3f [%.2f, %.2f] %q, want ≈ 1, host-bound", o.Value, o.Lo, o.Hi, rep.Verdict)
					}
					if !strings.Contains(rep.Base, "1 busy thread") {
						t.Errorf("100 %% = %q, want 1 busy thread", rep.Base)
					}
				}
			})
		}
	}
}

// checkSensitivityOutput: the answer comes first, says what 100 % is and
// what the slope is against; stderr has a line per run; the tables and
// runbook.json keep the allotments apart.
func checkSensitivityOutput(t *testing.T, rep bundle.SensitivityReport, stdout, stderr, out string) {
	t.Helper()
	first, _, _ := strings.Cut(stdout, "\n")
	if !strings.HasPrefix(first, "CPU sensitivity at c") || !strings.Contains(first, rep.Verdict) || !strings.Contains(first, "against "+rep.Against) {
		t.Errorf("the first line %q is not the answer (%s, against %s)", first, rep.Verdict, rep.Against)
	}
	for _, want := range []string{"100 % = " + rep.Base, "Runs by allotment", "Each allotment over its cycles"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if n := strings.Count(stderr, "\n"); n > len(rep.Runs)+3 {
		t.Errorf("stderr has %d lines for %d runs, want a line a run:\n%s", n, len(rep.Runs), stderr)
	}
	if fi, err := os.Stat(filepath.Join(out, runbook.SensitivityLog)); err != nil || fi.Size() == 0 {
		t.Errorf("no progress log: %v", err)
	}
	// A row per allotment, never one for them together.
	for _, a := range []string{"100 %", "50 %"} {
		found := false
		for _, l := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(l, a+" ") && strings.Contains(l, " 3 ") {
				found = true
			}
		}
		if !found {
			t.Errorf("the allotments table lacks a row for %s over 3 runs:\n%s", a, stdout)
		}
	}
	rb := readRunbook(t, out)
	sides := map[string]int{}
	for _, s := range rb.Summary {
		if s.Metric == "requests_per_s" {
			sides[s.Side] = s.N
		}
	}
	if sides["cpu100"] != 3 || sides["cpu50"] != 3 || len(sides) != 2 {
		t.Errorf("runbook.json's summary by side %v, want cpu100 and cpu50 apart, 3 runs each", sides)
	}
}

// 100 % as the CPU the server used (--cpu-base 0.1, about the sleeper's
// own use) is the old default: halving that (a quota of 5 ms per 100 ms
// period, for 2 × 9.5 requests of 5 ms each) throttles the sleeper too,
// and it reads as if it were host-bound. The case, kept as a
// contrast.
func TestSensitivityBaseOfUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fake server 4 times")
	}
	srv := sensServers[0]
	rep, stdout, _, _ := runSensitivityCLI(t, srv, "--cpu-base", "0.1", "--cycles", "2")
	t.Logf("%s", stdout)
	if rep.Base != "0.1 cores: --cpu-base" {
		t.Errorf("100 %% = %q", rep.Base)
	}
	if rep.Overall.Value < 0.5 {
		t.Errorf("the sleeper under a quota of half its use read %.3f: want it throttled (≥ 0.5)", rep.Overall.Value)
	}
}

// The help says what 100 % is, names every method and what each can and
// cannot tell apart, with the measured figures; the co-runner refuses a
// 100 % of part of a core.
func TestSensitivityHelp(t *testing.T) {
	code, stdout, _ := runCLI("sensitivity", "--help")
	for _, want := range []string{"what the server could use, never what it used", "100 % = 1 core: 1 busy thread", "corunner", "co-runner",
		"read 1.01 on the H200", "cannot tell a thread that spin-waits", "Against the CPU received", "sensitivity.log"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("sensitivity --help (exit %d) lacks %q", code, want)
		}
	}
	if strings.Contains(stdout, "loses only spinning and reads ≈ 0") {
		t.Error("the help still claims a server that spins while it waits reads ≈ 0")
	}
	code, _, stderr := runCLI("sensitivity", "--server-cmd", "true", "--target", "http://127.0.0.1:1", "--dataset", "x.jsonl",
		"--out", filepath.Join(t.TempDir(), "o"), "--concurrency", "1", "--cpu-method", "corunner", "--cpu-base", "0.5")
	if code != exitUsage || !strings.Contains(stderr, "not a whole number of cores") {
		t.Errorf("corunner with --cpu-base 0.5: exit %d, %q", code, stderr)
	}
}

// Affinity restricts whole CPUs: 50 % of one core is not one, and the
// session says so (and what to use instead) when the first restricted run
// comes.
func TestSensitivityAffinityWholeCPUs(t *testing.T) {
	srv := sensServers[1]
	port := fakeasr.FreePort(t)
	o := srv.opts
	o.Port = port
	out := filepath.Join(t.TempDir(), "sens")
	code, stdout, stderr := runCLI("sensitivity", "--server-cmd", fakeasr.CommandLine(o), "--cpu-method", "affinity", "--cycles", "1",
		"--target", fmt.Sprintf("http://127.0.0.1:%d", port), "--dataset", dataset(t, 4),
		"--concurrency", "1", "--repeats", "1", "--out", out, "--quiet",
		"--probes", "none", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "100ms",
		"--gpu-free-mib", "100000000", "--startup-timeout", "20s")
	t.Logf("exit %d\n%s\n%s", code, stdout, stderr)
	if code == exitOK || !strings.Contains(stderr, "50 % of 1 core is not a whole number of CPUs") || !strings.Contains(stderr, "co-runner") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
