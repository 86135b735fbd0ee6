package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// ab judges every delta against the experiment's own A/A floor (the
// spread of its A runs), and warns where a change it calls significant
// lies within it. A's server alternates 50 and 200 ms a request between
// its starts (a counter file), so A differs from itself by about 120 %;
// B's takes 250 ms (about +100 %: every B run slower than every A run, p
// 0.029 with four of each, yet within the floor: the warning) or 500 ms
// (about +300 %: beyond it, no warning). B's 250 ms keeps 50 ms above A's
// slow runs: with 230 against 100 and 200, one run under make test's
// load took an A run to 247 ms, over a B run's 240, and p to 0.2.
func TestABAgainstAAFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plainserver eight times a case")
	}
	t.Parallel()
	script := filepath.Join(refservertest.Root(), "refserver", "plainserver.py")
	for _, tc := range []struct {
		name   string
		bMs    int
		floor  string // the latency row's judgement
		warned bool
	}{
		{"within", 250, "within ±", true},
		{"beyond", 500, "beyond ±", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port := fakeasr.FreePort(t)
			dir := t.TempDir()
			out := filepath.Join(dir, "ab")
			srv := fmt.Sprintf("%s %s --port %d --work sleep", refservertest.Python, script, port)
			counter := filepath.Join(dir, "a-starts")
			a := fmt.Sprintf(`sh -c 'n=$(cat %s 2>/dev/null || echo 0); echo $((n+1)) > %s; exec %s --service-ms $((50 + 150*(n%%2)))'`, counter, counter, srv)
			b := fmt.Sprintf("%s --service-ms %d", srv, tc.bMs)
			code, stdout, stderr := runCLI(append([]string{"ab", "--a-cmd", a, "--b-cmd", b, "--order", "ABBAABBA", "--no-warm",
				"--dataset", dataset(t, 2)}, runbookArgs(port, out)...)...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			rep := readRunbook(t, out)
			found := false
			for _, c := range rep.Compare {
				if c.AAFloor == nil || (c.Ratio != nil && c.BeyondFloor == nil) {
					t.Errorf("%s %s: no A/A floor in runbook.json (%+v)", c.Level, c.Metric, c)
					continue
				}
				if c.Metric == "latency_mean_s" {
					found = true
					if got := c.FloorText(); !strings.HasPrefix(got, tc.floor) {
						t.Errorf("latency: %s against the A/A floor (A %v, B %v), want %s", got, c.A, c.B, tc.floor)
					}
				}
			}
			if !found {
				t.Fatal("no latency comparison")
			}
			var row string
			for _, l := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(l, "c=1 ") && strings.Contains(l, "latency mean (s)") { // the ab table comes after the sides
					row = l
				}
			}
			if !strings.Contains(row, tc.floor) {
				t.Errorf("the ab table's latency row %q lacks %q\n%s", row, tc.floor, stdout)
			}
			warn := "c=1 latency mean (s) +"
			if got := strings.Contains(stdout, "sample size: ") && strings.Contains(stdout, warn); got != tc.warned {
				t.Errorf("sample-size warning on the latency delta: %v, want %v\n%s", got, tc.warned, stdout)
			}
		})
	}
}
