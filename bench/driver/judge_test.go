package driver

import (
	"strings"
	"testing"
)

// TestJudgeOneRule: a pass lagged when its lag broke its limit and is
// LagShareLimit of its latency, or a reader stalled; CPU or runnable
// wait alone, or a lag too small a share, kept up (Strained says why the
// line still names them).
func TestJudgeOneRule(t *testing.T) {
	lag := []string{"send lag p99 9 ms > 5 ms"}
	cpu := []string{"CPU 110 % of the 2.00 cores allowed ≥ 90 %"}
	for _, tc := range []struct {
		name               string
		share              *float64
		lag, stall, strain []string
		want               string
	}{
		{"cpu alone", new(0.01), nil, nil, cpu, "kept up"},
		{"small lag and cpu", new(0.05), lag, nil, cpu, "kept up"},
		{"lag without latency", nil, lag, nil, nil, "kept up"},
		{"lag a tenth of latency", new(LagShareLimit), lag, nil, nil, "lagged"},
		{"big lag and cpu", new(0.4), lag, nil, cpu, "lagged"},
		{"reader stall", nil, nil, []string{"read stall max 80 ms > 50 ms"}, nil, "lagged"},
	} {
		c := &SelfCheck{LagShare: tc.share}
		c.judge(tc.lag, tc.stall, tc.strain)
		if c.Verdict != tc.want || (len(c.Lagging) > 0) != (tc.want == "lagged") {
			t.Errorf("%s: verdict %q, lagging %v; want %q", tc.name, c.Verdict, c.Lagging, tc.want)
		}
		line := c.String()
		if strings.Contains(line, "THE DRIVER LAGGED") != (tc.want == "lagged") {
			t.Errorf("%s: the line %q disagrees with the verdict %q", tc.name, line, tc.want)
		}
		if tc.want == "kept up" && len(tc.strain)+len(tc.lag) > 0 && !strings.Contains(line, "kept up (") {
			t.Errorf("%s: the line %q does not say what strained a pass that kept up", tc.name, line)
		}
	}
}
