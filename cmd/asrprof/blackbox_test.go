package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// blackBoxCase is a server that emits nothing (refserver/plainserver.py,
// no events, no spans, no /metrics), put into one state whose truth is
// known: want maps a level to the cause that must come first there (a
// prefix of it), also to causes that must be named (|-separated).
type blackBoxCase struct {
	name, server, levels string
	rate                 bool
	samples              int
	want, also           map[string]string
	has                  map[string]string // level → what its verdict must contain
	extra                []string          // more capture flags
	never                string            // what the bottleneck table must not say (|-separated)
	says                 string            // what it must say (|-separated)
	report               string            // what its HTML report must say
}

// Services are 60 ms + 15 ms per second of audio (the refset's clips
// differ in length, so a batch's members differ in their own service).
const bbService = "--service-ms 60 --per-audio-ms 15"

// The states the server sleeps through: they run side by side.
func TestBlackBoxIdleServers(t *testing.T) {
	blackBoxCaptures(t, true, []blackBoxCase{
		{name: "serial", server: "--mode serial --work sleep " + bbService, levels: "1,8",
			want: map[string]string{"c1": "idle server", "c8": "serves one request at a time"}},
		{name: "cap2", server: "--mode cap --cap 2 --work sleep " + bbService, levels: "1,8",
			want: map[string]string{"c1": "idle server", "c8": "at most 2 in service, its threads idle"}},
		// batches of 4 at c=16: each request waits for about three
		// batches ahead (at c=8, one: the wait and the service then tie)
		{name: "batch4", server: "--mode batch --max-batch 4 --work sleep " + bbService, levels: "1,16", samples: 32,
			want: map[string]string{"c1": "idle server", "c16": "batches of up to 4"}},
		// batches of 2 whose members' services are equal: from outside a
		// batch is then two workers. Python's http.server listens with a
		// backlog of 5, so at c=8 a connection's SYN may be dropped and
		// retried a second later; over the wall the parallelism read
		// 1.38–1.49 in 2 of 3 runs ("one at a time"), over the time held
		// 1.81–1.94.
		{name: "batch2_equal", server: "--mode batch --max-batch 2 --work sleep --service-ms 60", levels: "1,8", samples: 16,
			want: map[string]string{"c1": "idle server", "c8": "at most 2 in service"}},
		// batches of up to 8 whose time grows with their size (40 ms a
		// member), members' services equal: groups of 8 at the pace of
		// about 2 served alone. "at most 2 in service" contradicted the
		// groups; seen on the device with a Transformers batch (docs/GPU.md)
		{name: "batch_paced", server: "--mode batch --max-batch 8 --batch-wait-ms 30 --work sleep --service-ms 30 --per-item-ms 40", levels: "1,8", samples: 16,
			want: map[string]string{"c1": "idle server", "c8": "answered in groups of up to"}},
		// the same with no fixed part: a batch of k takes k times one
		// served alone, so groups of 8 come at the pace of one. Their
		// advice is not a serial server's "serve requests in parallel"
		// (seen on the device with a float32 batch, docs/GPU.md)
		{name: "batch_paced_one", server: "--mode batch --max-batch 8 --batch-wait-ms 30 --work sleep --service-ms 0 --per-item-ms 60", levels: "1,8", samples: 16,
			want: map[string]string{"c1": "idle server", "c8": "answered in groups of up to"}, never: "serve requests in parallel"},
		// a listen backlog of 2 at c=8: the first pass's new connections
		// beyond it wait a second for their SYN's retry; 20 ms services,
		// so that one such second outweighs them. Accepts 100 ms apart
		// fill the backlog whatever the load: without that gap 4 of 7
		// waited in a quiet run, 2 of 7 under make test, and none in one
		// run under make test (the verdict was then "idle server")
		{name: "backlog", server: "--mode cap --cap 8 --work sleep --backlog 2 --accept-gap-ms 100 --service-ms 20", levels: "1,8",
			want: map[string]string{"c1": "idle server", "c8": "connection setup"}},
		{name: "upload", server: "--mode cap --cap 4 --work sleep --service-ms 20 --upload-kbps 300", levels: "1,4",
			want: map[string]string{"c1": "upload", "c4": "upload"}},
		{name: "late_response", server: "--mode cap --cap 4 --work sleep --service-ms 30 --response-delay-ms 300", levels: "1,4",
			want: map[string]string{"c1": "response delivery", "c4": "response delivery"}},
		// vLLM's /metrics and nothing else: the queue wait named with
		// the server's own mean
		{name: "vllm_metrics", server: "--mode serial --work sleep --vllm-metrics " + bbService, levels: "1,4",
			want: map[string]string{"c1": "idle server", "c4": "queue wait ("}},
		// no c=1 in the sweep: --solo adds it, and the baseline is measured
		{name: "serial_solo", server: "--mode serial --work sleep " + bbService, levels: "8", extra: []string{"--solo"},
			want: map[string]string{"c1": "idle server", "c8": "serves one request at a time"}},
		// two causes at once: a slow upload into a server that serves one
		// at a time
		{name: "upload_and_serial", server: "--mode serial --work sleep --service-ms 250 --upload-kbps 400", levels: "1,4",
			want: map[string]string{"c1": "upload"}, also: map[string]string{"c4": "upload|serves one request at a time"}},
	})
}

// The states that use a CPU: one after another.
func TestBlackBoxBusyServers(t *testing.T) {
	blackBoxCaptures(t, false, []blackBoxCase{
		{name: "host_serial", server: "--mode serial --work host " + bbService, levels: "1,4",
			want: map[string]string{"c1": "host-bound", "c4": "serves one request at a time, host-bound service"}},
		// a host-bound batch; at c=8 the wait for the batch ahead and the
		// batch's own host work take about as much (35–55 % and 39–42 %
		// of latency in four runs) and either may lead: c=16
		{name: "host_batch", server: "--mode batch --max-batch 4 --work host " + bbService, levels: "1,16", samples: 32,
			want: map[string]string{"c1": "host-bound", "c16": "batches of up to 4, host-bound service"}, also: map[string]string{"c16": "host-bound"}},
		// idle most of the time: open loop far below its capacity, no c=1
		// pass (each sample's quickest server time stands for its own)
		{name: "host_open_loop", server: "--mode serial --work host " + bbService, levels: "2,3", rate: true, samples: 6,
			want: map[string]string{"r2": "host-bound", "r3": "host-bound"}},
		// four worker threads whose work holds Python's GIL: one runs at a
		// time, on one core of two. "its threads idle" was the name
		// before: a thread waiting for the GIL sleeps. The threads share
		// the core in 5 ms turns, so requests of equal work end together:
		// "serves one request at a time" or "answered in groups … at the
		// pace of one served alone" from run to run, both true
		{name: "host_threads", server: "--mode cap --cap 4 --work host " + bbService, levels: "1,4",
			want: map[string]string{"c1": "host-bound"}, has: map[string]string{"c4": "its threads taking turns on one core"}, never: "its threads idle"},
		// four threads whose work lets go of the GIL (hashlib), on 2
		// cores: 4 busy threads at a parallelism of 1.92, runnable 46 %
		// of the service in a quiet run. They share the CPU, not the
		// interpreter, so the advice is cores, not processes
		{name: "native_threads", server: "--mode cap --cap 4 --work native " + bbService, levels: "1,4",
			want: map[string]string{"c1": "host-bound"}, has: map[string]string{"c4": "threads in service at the pace of"}, never: "processes rather than threads"},
		// two processes, each serving one at a time with a GIL of its own:
		// together more than a core (1.87 of 2, 47 % overlap in a quiet
		// run), so no turns; at c=4 host work and "at most 2 in service"
		// took 54 % and 44 % of latency there, either may lead
		{name: "host_procs", server: "--mode serial --procs 2 --work host " + bbService, levels: "1,4",
			want: map[string]string{"c1": "host-bound"}, also: map[string]string{"c4": "host-bound"}, never: "took turns"},
		// a serving thread that spins while idle (SGLang's scheduler
		// without --sleep-on-idle): busy with no request in the server
		// too, yet the one that serves, and the evidence says what its
		// steady work may be
		{name: "host_spin", server: "--mode serial --work host --spin " + bbService, levels: "1,4",
			want: map[string]string{"c1": "host-bound", "c4": "serves one request at a time, host-bound"}, never: "serving threads: http",
			says: "serving threads: generate|as busy while no request was in the server"},
		// the two co-runners share the server's one CPU: its threads and
		// theirs on one core, but runnable, not taking turns asleep. They
		// are children of the server, as busy as its generate thread
		// through the service but busy with no request in the server
		// too: not the serving threads, and the report's timeline plots
		// the thread that served, not the busiest
		{name: "contention", server: "--mode serial --work host --contend 2 " + bbService, levels: "1,4",
			want:   map[string]string{"c1": "CPU contention", "c4": "serves one request at a time, CPU contention"},
			never:  "took turns|serving threads: contend|as busy while no request was in the server",
			report: "CPU of thread generate (serving thread), per pass"},
	})
}

func blackBoxCaptures(t *testing.T, idle bool, cases []blackBoxCase) {
	if testing.Short() {
		t.Skip("starts a server per state")
	}
	if _, err := os.Stat(refservertest.Python); err != nil {
		need.Dep(t, refservertest.Python, err)
	}
	if idle {
		t.Parallel()
	}
	ds := refservertest.Refset(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if idle {
				t.Parallel()
			}
			dir := blackBoxCapture(t, tc, ds, nil)
			checkVerdicts(t, dir, tc)
			if tc.report != "" {
				html := filepath.Join(t.TempDir(), "r.html")
				if code, stdout, stderr := runCLI("report", dir, "--out", html); code != exitOK {
					t.Fatalf("report: exit %d\n%s\n%s", code, stdout, stderr)
				}
				if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), tc.report) {
					t.Errorf("%s: the report does not say %q (%v)", tc.name, tc.report, err)
				}
			}
		})
	}
}

// blackBoxCapture runs `asrprof capture --server-cmd plainserver.py …`
// with the default probes and returns the bundle's directory. as, when
// set, runs the capture (and so the server) as that user.
func blackBoxCapture(t *testing.T, tc blackBoxCase, ds string, as *testUser) string {
	t.Helper()
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "b")
	script := filepath.Join(refservertest.Root(), "refserver", "plainserver.py")
	cmd := fmt.Sprintf("%s %s --port %d %s", refservertest.Python, script, port, tc.server)
	if os.Geteuid() == 0 {
		// the suite's other packages keep both cores busy: without this a
		// host-bound server waits on the run queue, which is CPU
		// contention, rightly named (diagnosis_test.go measured it)
		cmd = "nice -n -15 " + cmd
	}
	load := []string{"--concurrency", tc.levels}
	if tc.rate {
		load = []string{"--rate", tc.levels}
	}
	samples := tc.samples
	if samples == 0 {
		samples = 8
	}
	server := []string{"--server-cmd", cmd, "--runs", "1"}
	if as != nil {
		// the user's server, started at the same priority as root's
		as.startServer(t, port, tc.server)
		server = nil
	}
	args := append([]string{"capture"}, server...)
	args = append(args, "--target", fmt.Sprintf("http://127.0.0.1:%d", port),
		"--dataset", ds, "--max-samples", fmt.Sprint(samples), "--repeats", "2",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off",
		"--timeout", "60s")
	if as == nil {
		args = append(args, "--gpu-free-mib", "100000000", "--startup-timeout", "1m")
	}
	args = append(append(args, load...), tc.extra...)
	var code int
	var stdout, stderr string
	if as != nil {
		out = as.dir(t, "b")
		args[slicesIndex(args, "--out")+1] = out
		code, stdout, stderr = as.runCLI(t, args...)
	} else {
		code, stdout, stderr = runCLI(args...)
	}
	if code != exitOK && code != exitIncomplete {
		t.Fatalf("capture: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if as != nil {
		return out // a plain capture: no runbook's run-1
	}
	return filepath.Join(out, "run-1")
}

func slicesIndex(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

// checkVerdicts asserts tc's causes on the bundle in dir.
func checkVerdicts(t *testing.T, dir string, tc blackBoxCase) map[string][]string {
	t.Helper()
	got, text := verdicts(t, dir)
	first := func(lv string) []string { // the level's causes from the first that is the server's
		c := got[lv]
		// A loaded machine (the parallel phase's five captures) can starve
		// asrprof itself: where its lag explains 10 % of a level's latency
		// the diagnosis names the load generator first
		// (scripts/lib/driver.star), and what the server did is the next
		// cause. (Less is an undercut after the server's cause: seen once in
		// a clean-clone make test, backlog at c=1, 5 % of latency.)
		if len(c) > 1 && c[0] == "the load generator" {
			t.Logf("%s at %s: the load generator lagged, so the verdict is checked on the next cause: %q", tc.name, lv, c)
			return c[1:]
		}
		return c
	}
	for lv, want := range tc.want {
		if c := first(lv); len(c) == 0 || !strings.HasPrefix(c[0], want) {
			t.Errorf("%s at %s: the verdict is %q, want %q first\n%s", tc.name, lv, got[lv], want, text)
		}
	}
	for lv, has := range tc.has {
		if c := first(lv); len(c) == 0 || !strings.Contains(c[0], has) {
			t.Errorf("%s at %s: the verdict is %q, want it to say %q\n%s", tc.name, lv, got[lv], has, text)
		}
	}
	for lv, also := range tc.also {
		c := got[lv]
		for _, w := range strings.Split(also, "|") {
			found := false
			for _, x := range c {
				found = found || strings.HasPrefix(x, w)
			}
			if !found {
				t.Errorf("%s at %s: %q is not among the causes %q\n%s", tc.name, lv, w, c, text)
			}
		}
	}
	for _, never := range strings.Split(tc.never, "|") {
		if never != "" && strings.Contains(text, never) {
			t.Errorf("%s says %q\n%s", tc.name, never, text)
		}
	}
	for _, says := range strings.Split(tc.says, "|") {
		if !strings.Contains(text, says) {
			t.Errorf("%s does not say %q\n%s", tc.name, says, text)
		}
	}
	if !strings.Contains(text, "stands on the client's clock") {
		t.Errorf("%s: the evidence does not say what it stands on\n%s", tc.name, text)
	}
	return got
}

// agreeCase is a state of the reference server captured twice, with its
// request-profile events and without any telemetry: the black box must
// name the cause the events name, where the events add nothing it cannot
// see (the stage-level detail aside: an admission cap reads as one
// request at a time from outside).
type agreeCase struct {
	name, server, levels, level string
	samples                     int
	events                      string // the cause first with the events
	blackbox                    string // the cause first without (a prefix; |-separated alternatives)
	// together: the two captures at once, each with a server of its own,
	// where the verdicts are a wait (a queue, a sleep) that a second
	// server on the other core does not move; not where they are the
	// CPU's (host_bound)
	together bool
	// bbLevels, bbSamples: the capture without events at these levels
	// over as many samples, where the one with events is a shared one
	// with more ("": the same as it)
	bbLevels  string
	bbSamples int
}

// The same servers with and without their events: the verdicts agree.
// These use a CPU and run in turn; the sleeping ones run side by side
// (TestBlackBoxAgreesWithEventsIdle). Their captures with events are
// TestDiagnosisRealCaptures's (sharedRefserverCapture): the same states,
// loads and samples, captured once for both.
func TestBlackBoxAgreesWithEvents(t *testing.T) {
	agreeCaptures(t, false, []agreeCase{
		// 8 samples at c=4 behind a cap of 1: in theory the wait is 2.25
		// services a request, 69 % of latency (0, 1, 2, 3, then 3 each);
		// with 4 samples it was 1.5 (60 %), and under the suite's load
		// it read 49 % against the service's 51 % (one CI-like run).
		// The two captures at once: the verdict at c=4 is the queue behind
		// the one decoder, which a decode slowed by the other capture's
		// (runnable, not served) lengthens, not shortens.
		{name: "admission_cap", server: "--max-running-requests 1", levels: "1,4", level: "c4", samples: 8,
			events: "admission cap", blackbox: "serves one request at a time", together: true},
		// four decoders: c=4 never waits for one (a request gives its
		// decoder back before its answer goes out); with events it is
		// TestDiagnosisRealCaptures's capture (c=1,4 over 6 samples),
		// without them c=1 over 3, as the test had both
		{name: "host_bound", server: "--max-running-requests 4 --host-step-ms 3", levels: "1,4", level: "c1", samples: 6,
			events: "host-bound decode", blackbox: "host-bound", bbLevels: "1", bbSamples: 3},
	})
}

func TestBlackBoxAgreesWithEventsIdle(t *testing.T) {
	agreeCaptures(t, true, []agreeCase{
		// Where the events add what the outside cannot see, the black
		// box names what the outside sees. The reference server holds its
		// whole answer, headers too, after the decode: on the client's
		// clock that is server time, and its threads sleep through it
		// (plainserver sends its first byte before the delay:
		// TestBlackBoxIdleServers names that response delivery). Its
		// --upload-kbps is left out: it reads the upload slowly from its
		// own receive buffer, which took most of the body at once, so
		// from outside that reads as upload, idle server or the decode's
		// host work from run to run (three runs, three verdicts), none of
		// them wrong; plainserver throttles the socket itself, which the
		// client sees. One decoder each: at c=1 the server never uses a
		// second, and each saves its start about 1.4 s of CPU.
		// (Their two captures run in turn: the parallel phase keeps five
		// captures at once, and more tied the black box's reading of
		// answer groups in other tests.)
		{name: "response_delivery", server: "--response-delay-ms 3000 --max-running-requests 1", levels: "1", level: "c1", samples: 3,
			events: "response delivery", blackbox: "idle server"},
		{name: "off_cpu", server: "--step-sleep-ms 150 --max-running-requests 1", levels: "1", level: "c1", samples: 2,
			events: "serving thread off-CPU", blackbox: "idle server"},
	})
}

// agreeCaptures captures each case twice, over the refset's short clips
// (about 4 s each: what the verdicts compare is shares of a request's
// time, which the clips' length does not move, and a decode of them costs
// half the CPU of the refset's first, longest ones).
func agreeCaptures(t *testing.T, idle bool, cases []agreeCase) {
	if testing.Short() {
		t.Skip("starts the reference server twice per state")
	}
	refservertest.RequirePocketSphinx(t)
	if idle {
		t.Parallel()
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if idle {
				t.Parallel()
			}
			load := []string{"--concurrency", tc.levels}
			ds, dir, port := refservertest.ShortClips(t, tc.samples), t.TempDir(), fakeasr.FreePort(t)
			type capture struct {
				dir string
				err error
			}
			blackBox := make(chan capture, 1)
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait) // before dir goes, should the other capture fail
			captureBlackBox := func() {
				defer wg.Done()
				bbLoad, bbSamples := load, tc.samples
				if tc.bbLevels != "" {
					bbLoad, bbSamples = []string{"--concurrency", tc.bbLevels}, tc.bbSamples
				}
				d, err := captureRefserver(ds, dir, port, tc.server, bbLoad, bbSamples, false)
				blackBox <- capture{d, err}
			}
			if tc.together {
				wg.Add(1)
				go captureBlackBox()
			}
			var with string
			if idle {
				with = refserverCapture(t, ds, t.TempDir(), tc.server, load, tc.samples, true)
			} else {
				with = sharedRefserverCapture(t, tc.server, tc.levels, tc.samples)
			}
			if !tc.together {
				wg.Add(1)
				captureBlackBox()
			}
			bbc := <-blackBox
			if bbc.err != nil {
				t.Fatal(bbc.err)
			}
			without := bbc.dir
			// What the black box reads at a level beyond c=1 stands on
			// the c=1 pass's services alone; a host that ran that pass
			// at another speed (make test's other packages beside it)
			// moves it with no fault of the rule's. Measured apart from
			// the verdict: the server's CPU time a request at both
			// levels, which the reference server's fixed work per
			// request holds steady. Such a capture is taken again once.
			if r, ok := cpuPerRequestRatio(t, without, tc.level); ok && (r < 1/steadyHost || r > steadyHost) {
				t.Logf("%s: the server's CPU time a request at %s was %.2f× c=1's: the host's speed moved between the passes, so the capture without events is taken again", tc.name, tc.level, r)
				dir, port = t.TempDir(), fakeasr.FreePort(t)
				wg.Add(1)
				captureBlackBox()
				if bbc = <-blackBox; bbc.err != nil {
					t.Fatal(bbc.err)
				}
				without = bbc.dir
				if r, ok := cpuPerRequestRatio(t, without, tc.level); ok && (r < 1/steadyHost || r > steadyHost) {
					t.Logf("%s: again %.2f× at %s", tc.name, r, tc.level)
				}
			}
			ev, evText := verdicts(t, with)
			bb, bbText := verdicts(t, without)
			if c := ev[tc.level]; len(c) == 0 || c[0] != tc.events {
				t.Errorf("with events at %s: %q, want %q first\n%s", tc.level, c, tc.events, evText)
			}
			if c := bb[tc.level]; len(c) == 0 || !slices.ContainsFunc(strings.Split(tc.blackbox, "|"), func(w string) bool { return strings.HasPrefix(c[0], w) }) {
				t.Errorf("without telemetry at %s: %q, want %q first (the events say %q)\n%s", tc.level, c, tc.blackbox, tc.events, bbText)
			}
		})
	}
}

// steadyHost: the most a request's CPU time may move between two levels
// of a capture of the reference server before the host, not the server,
// is taken to have changed (scripts/lib/blackbox.star's BB_CPU_DRIFT,
// where the evidence says so). Behind a cap of 1 over 8 short clips at c=1
// and c=4 it moved under 3 % in three captures on the 2-core development
// host (alone, beside busy loops, beside a second capture). In the clean-
// clone make test whose c=4 read "at most 2 in service" it was at most
// 0.72×: c=1's service took 1801 ms a request, 95 % of it host work
// (1.71 s of CPU), and c=4 served 0.81 req/s from one serving thread, at
// most 1.23 s of CPU a request.
const steadyHost = 1.25

// cpuPerRequestRatio is the blackbox module's cpu_vs_solo at level: the
// server's CPU time a request there over the same at c=1, from the
// per-thread time bins; false where dir has no bins or either level no
// CPU time.
func cpuPerRequestRatio(t *testing.T, dir, level string) (float64, bool) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "cpu.star")
	const src = `load("blackbox", "levels")
load("table", "sprintf")
for l in levels(capture):
    print(sprintf("cpu %s %.6f", l.level, l.cpu_vs_solo))
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("analyze", dir, script)
	if code != exitOK {
		t.Fatalf("analyze %s: exit %d\n%s", script, code, stderr)
	}
	for _, line := range strings.Split(stderr, "\n") {
		var lv string
		var x float64
		if n, _ := fmt.Sscanf(line, "cpu %s %f", &lv, &x); n == 2 && lv == level && x > 0 {
			return x, true
		}
	}
	return 0, false
}

// refserverCapture captures the reference server with flags server under
// load (--concurrency … or --rate …) over the first samples of ds, with
// its request-profile events (--profile-url) or with none, into a bundle
// under dir, and returns the bundle.
func refserverCapture(t *testing.T, ds, dir, server string, load []string, samples int, events bool) string {
	t.Helper()
	b, err := captureRefserver(ds, dir, fakeasr.FreePort(t), server, load, samples, events)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// captureRefserver is refserverCapture's work, on port, with its failure
// returned (it may run off the test's goroutine).
func captureRefserver(ds, dir string, port int, server string, load []string, samples int, events bool) (string, error) {
	out := filepath.Join(dir, "b")
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	cmd := fmt.Sprintf("%s %s --port %d %s", refservertest.Python, script, port, server)
	if os.Geteuid() == 0 {
		// The machine's other load (make test runs packages side by
		// side on two cores) would keep the scheduler thread on the run
		// queue, which the attribution rightly calls CPU contention: the
		// server runs ahead of it (measured: without this, 48–68 % of
		// latency runnable under a load average of 8).
		cmd = "nice -n -15 " + cmd
	}
	target := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := append([]string{"capture", "--server-cmd", cmd, "--runs", "1", "--target", target,
		"--dataset", ds, "--max-samples", fmt.Sprint(samples), "--repeats", "1",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "300ms",
		"--gpu-free-mib", "100000000", "--startup-timeout", "2m", "--timeout", "60s"}, load...)
	if events {
		args = append(args, "--profile-url", target)
	}
	code, stdout, stderr := runCLI(args...)
	if code != exitOK && code != exitIncomplete {
		return "", fmt.Errorf("capture (events %v): exit %d\n%s\n%s", events, code, stdout, stderr)
	}
	return filepath.Join(out, "run-1"), nil
}

// sharedRefserverCapture is refserverCapture with events, closed loop at
// levels over samples short clips, made once for every test that asks for
// the same state (TestDiagnosisRealCaptures and
// TestBlackBoxAgreesWithEvents: both sequential, so the one that comes
// second waits for nothing).
func sharedRefserverCapture(t *testing.T, server, levels string, samples int) string {
	t.Helper()
	key := fmt.Sprintf("refserver %s at c=%s over %d short clips, with events", server, levels, samples)
	return shared.get(t, key, func(t *testing.T, dir string) string {
		ds := refservertest.ShortClipsIn(t, dir, samples)
		return refserverCapture(t, ds, dir, server, []string{"--concurrency", levels}, samples, true)
	})
}
