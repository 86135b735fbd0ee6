package analysis

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/asrprof/asrprof/analysis/fixture"
)

const ms = time.Millisecond

// sweepLevels is a host-bound server: the admission wait explodes at c=64
// while throughput stops rising.
func sweepLevels(spread bool) []fixture.Level {
	d := func(m time.Duration) fixture.Dist {
		if spread {
			return fixture.Dist{Mean: m, Spread: m / 2}
		}
		return fixture.Fixed(m)
	}
	mk := func(c int, queue time.Duration, util float64) fixture.Level {
		return fixture.Level{Concurrency: c, SchedUtil: util, Stages: fixture.Stages{
			Build: d(4 * ms), BuildToQueued: d(1 * ms), QueuedToSched: d(queue),
			FirstForward: d(20 * ms), DecodeTail: d(30 * ms), ClientOverhead: d(3 * ms),
		}}
	}
	return []fixture.Level{mk(1, 1*ms, 0.2), mk(8, 4*ms, 0.6), mk(32, 6*ms, 0.9), mk(64, 300*ms, 0.98)}
}

// fixtures are the bundles the golden tests run every script over.
func fixtures() map[string]fixture.Config {
	return map[string]fixture.Config{
		"refserver": {Format: fixture.RefServer, Levels: sweepLevels(false), Repeats: 3, Warmup: true,
			RequestsPerPass: 24, ClockOffset: 1500 * ms, Seed: 1, Sched: true, GPU: true, FailEvery: 0},
		"refserver_random": {Format: fixture.RefServer, Levels: sweepLevels(true), Repeats: 2,
			RequestsPerPass: 40, ClockOffset: -2300 * ms, Seed: 2, FailEvery: 13},
		"vllm": {Format: fixture.VLLM, Levels: sweepLevels(true), Repeats: 2, RequestsPerPass: 20,
			ClockOffset: 700 * ms, Seed: 3, Chunks: 3},
		"sglang": {Format: fixture.SGLang, Levels: sweepLevels(true), Repeats: 2, RequestsPerPass: 20,
			ClockOffset: 50 * ms, Seed: 4, NoClientSpans: true},
	}
}

func writeFixture(t testing.TB, name string) (string, *fixture.Truth) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	tr, err := fixture.Write(dir, fixtures()[name])
	if err != nil {
		t.Fatal(err)
	}
	return dir, tr
}
