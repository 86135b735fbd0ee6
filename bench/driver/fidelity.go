package driver

import (
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"sort"
	"strings"
	"time"

	"github.com/asrprof/asrprof/stats"
)

// The limits of schedule fidelity, in one place: an open-loop pass (a
// --rate level or a replayed trace) whose sends lag their intended times
// by more than these did not send the schedule it was asked to, and the
// capture says so (docs/REPLAY.md).
const (
	FidelityP99Limit = 5 * time.Millisecond  // p99 send lag
	FidelityMaxLimit = 50 * time.Millisecond // worst send lag
)

// NewFidelity summarises send lags in seconds (it sorts lags); nil when
// there are none.
func NewFidelity(lags []float64) *bundle.Fidelity {
	if len(lags) == 0 {
		return nil
	}
	sort.Float64s(lags)
	f := &bundle.Fidelity{
		Requests:    len(lags),
		SendLagP50S: stats.PercentileSorted(lags, 50),
		SendLagP99S: stats.PercentileSorted(lags, 99),
		SendLagMaxS: lags[len(lags)-1],
	}
	f.Lost = over(f.Lost, "p99 send lag", f.SendLagP99S, FidelityP99Limit)
	f.Lost = over(f.Lost, "max send lag", f.SendLagMaxS, FidelityMaxLimit)
	return f
}

// FidelityLine is the line a capture prints at the end of an open-loop
// pass.
func FidelityLine(f *bundle.Fidelity) string {
	s := fmt.Sprintf("schedule fidelity: send lag p50 %s, p99 %s, max %s over %d requests",
		ms(f.SendLagP50S), ms(f.SendLagP99S), ms(f.SendLagMaxS), f.Requests)
	if len(f.Lost) > 0 {
		s += "; FIDELITY LOST (" + strings.Join(f.Lost, ", ") + "): the pass did not send the schedule it was asked to"
	}
	return s
}

func ms(s float64) string { return fmt.Sprintf("%.3f ms", s*1e3) }

// over appends "what v > limit" to broken when v seconds is over limit.
func over(broken []string, what string, v float64, limit time.Duration) []string {
	if v > limit.Seconds() {
		broken = append(broken, fmt.Sprintf("%s %s > %s", what, ms(v), ms(limit.Seconds())))
	}
	return broken
}
