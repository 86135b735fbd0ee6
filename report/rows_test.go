package report_test

import (
	"context"
	"testing"

	"github.com/asrprof/asrprof/internal/bundletest"
	"github.com/asrprof/asrprof/report"
)

// Every row type the report reads a table through decodes the table its
// script makes of real bundles: an H200 capture (the diagnosis, the
// attribution, the CPU tables, the sweep), one without server telemetry
// (blackbox) and a realtime one. A column renamed in a .star script fails
// here, naming the row type, where the report would lose the plot.
func TestRowTypesDecode(t *testing.T) {
	dirs := []string{bundletest.H200(t, "gpu-bound"), bundletest.H200(t, "hf-serial"), realtimeBundle(t, true)}
	seen := map[string]bool{}
	for _, dir := range dirs {
		tabs, err := report.Tables(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range report.RowTypes {
			tab := tabs[rt.Table]
			if tab == nil {
				continue
			}
			if err := rt.Decode(tab); err != nil {
				t.Errorf("%s over %s: %v", rt.Type, dir, err)
			}
			seen[rt.Table+" "+rt.Type] = seen[rt.Table+" "+rt.Type] || len(tab.Rows) > 0
		}
	}
	for _, rt := range report.RowTypes {
		if !seen[rt.Table+" "+rt.Type] {
			t.Errorf("%s: no bundle of the test has a %s table with rows", rt.Type, rt.Table)
		}
	}
}
