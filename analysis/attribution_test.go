package analysis

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarktest"

	"github.com/asrprof/asrprof/internal/fixture"
)

// TestAttributionModule runs the attribution module from Starlark over a
// simulated server (bursts, one build worker, an admission cap, a thread
// that spins in CUDA synchronize part of the time, the GPU sampled).
func TestAttributionModule(t *testing.T) {
	ms := time.Millisecond
	dir := filepath.Join(t.TempDir(), "b")
	_, err := fixture.WriteAttribution(dir, fixture.AttrConfig{Levels: []fixture.AttrLevel{
		{Concurrency: 1, Receive: 1 * ms, Build: 2 * ms, FirstForward: 5 * ms, Decode: 40 * ms, Delivery: 1 * ms, Think: 60 * ms, OnCPU: 1, GPUUtil: 0.3},
		{Concurrency: 8, Upload: 2 * ms, Receive: 1 * ms, Build: 8 * ms, FirstForward: 15 * ms, Decode: 30 * ms, DecodeSpread: 10 * ms,
			Delivery: 2 * ms, BuildWorkers: 1, MaxRunning: 2, Bursty: true, Think: 300 * ms, OnCPU: 0.9, Sync: 0.3, GPUUtil: 0.5},
	}, Repeats: 2, Warmup: true, RequestsPerPass: 16, CUDA: true, GPU: true, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	assert, err := starlarktest.LoadAssertModule()
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "attr_test.star", `
load("assert.star", "assert")
load("attribution", "levels", "requests", "STATES")
load("lib/attribution.star", lib_levels = "levels", lib_requests = "requests", "spec")
load("stages/refserver.star", "SPEC")

def near(a, b, eps):
    return a - b < eps and b - a < eps

assert.eq(spec(capture).name, "refserver")
ls = levels(capture, SPEC)
assert.eq([l.level for l in ls], ["c1", "c8"])
assert.eq(lib_levels(capture)[1].states["admission wait"].p95_ms, ls[1].states["admission wait"].p95_ms)
for l in ls:
    total = 0.0
    for s in STATES:
        total += l.states[s].share
    assert.true(near(total, 1, 1e-9))
    assert.eq(l.n, 32)
    assert.eq(l.missing, 0)
    assert.eq(l.thread.name, "asr-sched")
    assert.eq(l.thread.how, "named asr-sched")
    assert.eq(len(l.threads), 2)
    assert.true(l.running_util > l.pass_util)
    g = l.gpu
    assert.true(near(g.busy + g.idle_host + g.idle_gpu_wait + g.idle_runnable + g.idle_off, 1, 1e-9))
    assert.eq(l.clock_offset_ms, 0.0)
assert.true(ls[1].states["running: GPU wait"].mean_ms > 0)
assert.eq(ls[0].states["running: GPU wait"].mean_ms, 0.0)

rs = requests(capture, SPEC)
assert.eq(len(rs), len([r for r in capture.requests if r.ok]))
assert.eq(len(lib_requests(capture)), len(rs))
warm = 0
for r in rs:
    assert.true(r.request_id.startswith("asrprof-attr-"))
    assert.eq(r.request_id, capture.requests[r.index].request_id)
    assert.true(r.telemetry)
    total = 0.0
    for s in STATES:
        assert.true(r.ms[s] >= 0)
        total += r.ms[s]
    assert.true(near(total, r.latency_ms, 1e-3))
    if r.warmup:
        warm += 1
assert.eq(warm, 32)
# ms reads as a dict does, in the states' order
ms = rs[0].ms
d = dict(ms)
assert.eq(list(d.keys()), STATES)
assert.eq(ms.keys(), STATES)
assert.eq([k for k in ms], STATES)
assert.eq(ms.items(), list(d.items()))
assert.eq(ms.values(), [d[s] for s in STATES])
assert.eq(len(ms), len(STATES))
assert.true(STATES[0] in ms)
assert.true("no such state" not in ms)
assert.eq(ms.get("no such state"), None)
assert.eq(ms.get("no such state", -1), -1)
assert.eq(ms.get(STATES[0]), d[STATES[0]])
assert.fails(lambda: ms["no such state"], "key")
assert.eq(type(ms), "states")
assert.eq(str(ms), str(d))

# Another thread by name; without a preset, nothing is attributed.
assert.eq(levels(capture, SPEC, thread = "asr-http")[0].thread.name, "asr-http")
none = levels(capture, None)
assert.eq(none[0].states["unattributed"].share, 1.0)
assert.fails(lambda: levels(capture, "refserver"), "want a declared preset")
`)
	s := NewSession(c, Options{
		Modules: map[string]starlark.StringDict{"assert.star": assert},
		Setup:   func(th *starlark.Thread) { starlarktest.SetReporter(th, t) },
	})
	if _, err := s.Run(context.Background(), script); err != nil {
		t.Error(err)
	}
	// The built-in analysis.
	tabs, err := s.Run(context.Background(), "attribution")
	if err != nil || len(tabs) != 2 || tabs[0].Name != "attribution" || tabs[1].Name != "attribution_thread" {
		t.Fatalf("attribution: %v %v", tabs, err)
	}
}
