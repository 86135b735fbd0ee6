package main

import (
	"strings"
	"testing"
)

// TestAnalyzeDiagnosisNames: the diagnosis is reachable under the names
// its output goes by ("diagnosis", "advice"), each the bottleneck
// analysis, run once however many of its names are given.
func TestAnalyzeDiagnosisNames(t *testing.T) {
	tmp := t.TempDir()
	writeGolden(t, tmp, "refserver")
	dir := tmp + "/refserver"
	code, want, stderr := runCLI("analyze", dir, "bottleneck")
	if code != 0 || !strings.Contains(want, "Diagnosis per level") {
		t.Fatalf("analyze bottleneck: exit %d\n%s\n%s", code, want, stderr)
	}
	for _, names := range [][]string{{"diagnosis"}, {"advice"}, {"diagnosis", "advice", "bottleneck"}} {
		code, got, stderr := runCLI(append([]string{"analyze", dir}, names...)...)
		if code != 0 || got != want {
			t.Errorf("analyze %v: exit %d, stdout differs from bottleneck's:\n%s\n%s", names, code, got, stderr)
		}
	}
}
