package analysis

import (
	"testing"

	"github.com/asrprof/asrprof/internal/margin"
)

// notAsserted are the golden fixtures' causes whose deciding figure lies
// within margin.Near of its threshold: TestGolden masks their rows
// (margin.Mask), and TestVerdictMargins fails for any other such cause.
var notAsserted = []margin.Exempt{
	// the synthetic fixtures' stage times were chosen for the sweep's
	// shape (internal/fixture.SweepLevels); these causes sit on a
	// threshold by accident of those times. Moving them would rewrite
	// every golden of the fixture (sweep, stages, the CLI's), so the
	// rows are not asserted instead.
	margin.Exempted("refserver", "c32", 2, "admission wait", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %: whether it is listed turns on a point of latency"),
	margin.Exempted("refserver", "c32", 3, "busy thread", "BUSY_THREAD", "the fixture's scheduler thread at 0.90 of a core against 0.85"),
	margin.Exempted("refserver_random", "c32", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %"),
	margin.Exempted("refserver_random", "c64", 1, "admission wait", "BEHIND_FF", "a first forward ran during 45 % of the wait against 50 %: admission wait or behind first forwards is a coin toss here"),
	margin.Exempted("sglang", "c32", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %"),
}

// TestVerdictMargins runs the margins analysis over every golden fixture:
// no cause the goldens assert may be decided by a figure within 10 % of
// its threshold (issue 44).
func TestVerdictMargins(t *testing.T) {
	for fx := range fixtures() {
		t.Run(fx, func(t *testing.T) {
			dir, _ := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := margin.Parse(runScripts(t, c, Options{}, "json", "margins"))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				t.Logf("%s %d %s %s %.4g/%.4g", r.Level, r.Rank, r.Cause, r.Rule, r.Figure, r.Threshold)
			}
			for _, e := range margin.Check(fx, rows, notAsserted) {
				t.Error(e)
			}
		})
	}
}
