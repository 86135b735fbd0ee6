package report_test

import (
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/bundletest"
)

// The run's checks are drawn first, before the verdict, with the
// intervals; on the recorded H200 gpu-bound bundle none fires, and the
// section says so in one line instead of an empty table.
func TestReportValidityFirst(t *testing.T) {
	doc := render(t, bundletest.H200(t, "gpu-bound"))
	v, verdict := strings.Index(doc, `<section id="validity">`), strings.Index(doc, `<section id="verdict">`)
	if v < 0 || verdict < 0 || v > verdict {
		t.Fatalf("the validity section (at %d) is not drawn before the verdict (at %d)", v, verdict)
	}
	sec := doc[v:verdict]
	for _, want := range []string{"0 of 6 checks fired", `data-table="validity_intervals"`, "silent: failures"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the validity section lacks %q", want)
		}
	}
	if strings.Contains(sec, `data-table="validity"`) {
		t.Errorf("no check fired, yet the section draws the empty findings table")
	}
}
