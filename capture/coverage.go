package capture

import (
	"fmt"
	"strings"

	"github.com/asrprof/asrprof/model"
)

// CoverageGap says what a scored pass (or a level, or a run) is missing, ""
// when every sample was evaluated. Skipped is total − evaluated, as
// SGLang-Omni counts it; the reasons follow it: the failed requests by
// kind, and the samples whose reference is empty after normalization.
func CoverageGap(c model.Coverage) string {
	skipped := c.Total - c.Evaluated
	if skipped == 0 && c.Failed == 0 {
		return ""
	}
	emptyRef := c.EmptyRef
	if emptyRef == 0 && c.Skipped > 0 && c.Skipped+c.Failed == skipped {
		// A bundle written before skipped meant total − evaluated: its
		// skipped counted the empty references alone.
		emptyRef = c.Skipped
	}
	var why []string
	if c.Failed > 0 {
		kinds := joinSorted(c.FailureKinds, ", ", func(k string, n int) string { return fmt.Sprintf("%s %d", k, n) })
		why = append(why, fmt.Sprintf("%d failed (%s)", c.Failed, kinds))
	}
	if emptyRef > 0 {
		why = append(why, fmt.Sprintf("%d empty normalized reference", emptyRef))
	}
	gap := fmt.Sprintf("evaluated %d of %d, %d skipped", c.Evaluated, c.Total, skipped)
	if len(why) > 0 {
		gap += ": " + strings.Join(why, ", ")
	}
	return gap
}
