package analysis

import (
	"testing"

	"github.com/asrprof/asrprof/internal/margin"
)

// notAsserted are the golden fixtures' causes whose deciding figure lies
// within margin.Near of its threshold (margin.FixtureExempt, shared with
// cmd/asrprof's CLI goldens): TestGolden masks their rows, and
// TestVerdictMargins fails for any other such cause.
var notAsserted = margin.FixtureExempt()

// TestVerdictMargins runs the margins analysis over every golden fixture:
// no cause the goldens assert may be decided by a figure within 10 % of
// its threshold (issue 44).
func TestVerdictMargins(t *testing.T) {
	eachFixture(t, func(t *testing.T, fx string, c *Capture) {
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
