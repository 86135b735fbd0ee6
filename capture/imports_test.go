package capture_test

import (
	"os/exec"
	"strings"
	"testing"
)

// docs/ARCHITECTURE.md: capture and runbook never import analysis (the
// tables a capture prints come from its caller; serve neither) nor report,
// report imports neither capture nor the probes, and stats imports nothing
// of asrprof's.
func TestImportRules(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "github.com/asrprof/asrprof/"+pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	for _, pkg := range []string{"capture", "runbook", "bench/metrics", "serve"} {
		for _, d := range deps(pkg) {
			if d == "github.com/asrprof/asrprof/analysis" {
				t.Errorf("%s depends on analysis", pkg)
			}
		}
	}
	// The report reads bundles through analysis; only cmd/asrprof hands it
	// to a capture (capture.Report), and it touches no live system.
	for _, pkg := range []string{"capture", "runbook", "analysis", "bench/metrics"} {
		for _, d := range deps(pkg) {
			if d == "github.com/asrprof/asrprof/report" {
				t.Errorf("%s depends on report", pkg)
			}
		}
	}
	for _, d := range deps("report") {
		for _, bad := range []string{"capture", "runbook", "probe", "bench/driver", "bench/protocol"} {
			if d == "github.com/asrprof/asrprof/"+bad {
				t.Errorf("report depends on %s", bad)
			}
		}
	}
	for _, d := range deps("stats") {
		if strings.HasPrefix(d, "github.com/asrprof/asrprof/") && d != "github.com/asrprof/asrprof/stats" {
			t.Errorf("stats depends on %s", d)
		}
	}
}

// docs/ARCHITECTURE.md: the proxy and the record builder are bench
// packages: no bundle, probe, capture or analysis.
func TestProxyImportRules(t *testing.T) {
	for _, pkg := range []string{"bench/proxy", "bench/record"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/asrprof/asrprof/"+pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, bad := range []string{"/trace/bundle", "/probe", "/capture", "/analysis", "/bench/driver"} {
				if strings.HasPrefix(d, "github.com/asrprof/asrprof"+bad) {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}
