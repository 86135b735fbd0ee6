package engine

import (
	"math"
	"testing"

	"github.com/asrprof/asrprof/bundle/columns"
)

const ms = int64(1e6)

// reqCols is n measured, successful requests of one level and pass.
func reqCols(n int) *columns.RequestCols {
	rc := &columns.RequestCols{N: n, Level: columns.Strings{Dict: []string{"c2"}}, Status: columns.Strings{Dict: []string{"ok"}}}
	for i := 0; i < n; i++ {
		rc.Level.Codes = append(rc.Level.Codes, 0)
		rc.Status.Codes = append(rc.Status.Codes, 0)
		rc.Warmup = append(rc.Warmup, false)
		rc.LatencyS = append(rc.LatencyS, 1)
		rc.Repeat = append(rc.Repeat, 1)
	}
	return rc
}

func TestOccupancies(t *testing.T) {
	// Three requests in "run": [0,100), [50,150), [100,200) ms: two at once
	// from 50 to 150, one before and after; always at least one.
	rows := &columns.StageRows{Stage: columns.Strings{Dict: []string{"run"}}}
	for i, start := range []int64{0, 50, 100} {
		rows.Add(int32(i), 0, start*ms, (start+100)*ms, true, 0.1, true)
	}
	occ := Occupancies(reqCols(3), rows, "run", "run")["c2"]
	if occ.Max != 2 || math.Abs(occ.Mean-1.5) > 1e-12 || math.Abs(occ.Busy-1) > 1e-12 || math.Abs(occ.BusyS-0.2) > 1e-12 {
		t.Errorf("occupancy %+v, want mean 1.5, max 2, busy 1 (0.2 s)", occ)
	}
	// A gap between two requests is time with none inside.
	rows = &columns.StageRows{Stage: columns.Strings{Dict: []string{"run"}}}
	rows.Add(0, 0, 0, 100*ms, true, 0.1, true)
	rows.Add(1, 0, 300*ms, 400*ms, true, 0.1, true)
	occ = Occupancies(reqCols(2), rows, "run", "run")["c2"]
	if occ.Max != 1 || math.Abs(occ.Mean-0.5) > 1e-12 || math.Abs(occ.BusyS-0.2) > 1e-12 {
		t.Errorf("occupancy with a gap %+v, want mean 0.5, max 1, busy 0.2 s", occ)
	}
}

func TestEventMeta(t *testing.T) {
	rc := reqCols(3)
	rc.Warmup[2] = true // left out
	meta := []map[string]any{{"last_step": 4.0}, {"last_step": 9.0}, {"last_step": 100.0}}
	got := EventMeta(rc, func(i int) (map[string]any, bool) { return meta[i], true }, "last_step")
	if len(got) != 1 || got[0].Min != 4 || got[0].Max != 9 || got[0].Sum != 13 || got[0].N != 2 || got[0].Level != "c2" || got[0].Repeat != 1 {
		t.Errorf("EventMeta = %+v, want one pass: min 4, max 9, sum 13 over 2", got)
	}
}
