package doccheck

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// TestDocsCiteGoldens: every verdict docs/GPU.md and docs/CAPACITY.md
// mark as cited from a golden is that golden's cause at that level and
// rank, and asserted there (not masked as near its threshold).
func TestDocsCiteGoldens(t *testing.T) {
	for _, tc := range []struct {
		doc string
		min int // citations the doc must hold at least
	}{{"docs/GPU.md", 15}, {"docs/CAPACITY.md", 1}} {
		b, err := os.ReadFile(filepath.Join(root, tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		cs := Citations(string(b))
		if len(cs) < tc.min {
			t.Errorf("%s: %d verdicts marked as cited from goldens, want at least %d", tc.doc, len(cs), tc.min)
		}
		for _, c := range cs {
			p, err := GoldenPath(root, c.Golden)
			if err != nil {
				t.Errorf("%s:%d: %v", tc.doc, c.Line, err)
				continue
			}
			g, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("%s:%d: %v", tc.doc, c.Line, err)
				continue
			}
			got, _, found := Verdict(string(g), c.Level, c.Rank)
			switch {
			case !found && slices.Contains(Masked(string(g), c.Level), c.Cause):
				t.Errorf("%s:%d cites %q at %s of %s, which the golden does not assert (near its threshold): rewrite the doc", tc.doc, c.Line, c.Cause, c.Level, c.Golden)
			case !found:
				t.Errorf("%s:%d cites rank %d at %s of %s: the golden has no such row", tc.doc, c.Line, c.Rank, c.Level, c.Golden)
			case got != c.Cause:
				t.Errorf("%s:%d cites %q as rank %d at %s of %s; the golden has %q", tc.doc, c.Line, c.Cause, c.Rank, c.Level, c.Golden, got)
			}
		}
	}
}

func TestVerdict(t *testing.T) {
	g := "Diagnosis per level\nlevel  rank  cause  explains  evidence\n" +
		"c=64      1  no single cause                        -  first-forward stalls (47 %) and\n" +
		"c=64      2  first-forward stalls                47 %  the running batch\n" +
		"c=64  [not asserted: busy thread, decided by BUSY_THREAD within 10 % of its threshold: x]\n" +
		"Advice per level\nc=64   first-forward stalls  prefill_batch\n"
	if c, _, ok := Verdict(g, "c=64", 1); !ok || c != "no single cause" {
		t.Errorf("rank 1: %q %v", c, ok)
	}
	if c, _, ok := Verdict(g, "c=64", 2); !ok || c != "first-forward stalls" {
		t.Errorf("rank 2: %q %v", c, ok)
	}
	if _, _, ok := Verdict(g, "c=64", 3); ok {
		t.Error("rank 3 found")
	}
	// a long cause is a footnote of the text table
	long := "level  rank  cause  explains  evidence\n" +
		"c=16      1  → c=16 #1      74 %  → c=16 #1\n" +
		"evidence:\n  c=16 #1: requests wait\ncause:\n  c=16 #1: answered in groups of up to 14\n"
	if c, _, ok := Verdict(long, "c=16", 1); !ok || c != "answered in groups of up to 14" {
		t.Errorf("footnoted rank 1: %q %v", c, ok)
	}
	if m := Masked(g, "c=64"); len(m) != 1 || m[0] != "busy thread" {
		t.Errorf("masked %q", m)
	}
	cs := Citations("a\nb <!-- golden h200/gpu-bound c=64 1: no single cause --> c <!-- golden analysis/sglang c=8 2: first-forward stalls -->\n")
	if len(cs) != 2 || cs[0] != (Citation{2, "h200/gpu-bound", "c=64", 1, "no single cause"}) || cs[1].Golden != "analysis/sglang" || cs[1].Rank != 2 {
		t.Errorf("citations %+v", cs)
	}
}

// TestCalibration reads docs/CAPACITY.md's calibration table: at least
// 12 scored predictions on at least 4 server states, each row's "inside"
// true to its numbers, and the coverage and median error the doc claims
// no better than the table's.
func TestCalibration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs/CAPACITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	// the CPU reference server's table: at least 12 predictions on 4
	// states; the GPUs': their own table and claim, whatever it holds
	checkCalibration(t, string(b), "### Calibration", 12, 4)
	checkCalibration(t, string(b), "### Calibration on the GPU", 1, 1)
}

// section is doc from the line that is heading to the next heading.
func section(doc, heading string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case l == heading:
			out = []string{l}
		case out != nil && strings.HasPrefix(l, "#"):
			return strings.Join(out, "\n")
		case out != nil:
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkCalibration checks the calibration table under heading against
// its own numbers and against the claim comment of its section.
func checkCalibration(t *testing.T, doc, heading string, minScored, minStates int) {
	t.Helper()
	sec := section(doc, heading)
	if sec == "" {
		t.Fatalf("docs/CAPACITY.md has no section %q", heading)
	}
	rows, err := Calibration(sec, heading)
	if err != nil {
		t.Fatal(err)
	}
	claim, ok := Claim(sec)
	if !ok {
		t.Fatalf("%s: no coverage claimed (<!-- calibration: coverage N of M; median abs error E %% -->)", heading)
	}
	states := map[string]bool{}
	var errs []float64
	inside, scored := 0, 0
	for _, r := range rows {
		if got := r.Measured >= r.JudgedLo && r.Measured <= r.JudgedHi; got != r.Inside {
			t.Errorf("%s %s %s: measured %v in [%v, %v] is %v, the table says %v", r.State, r.Level, r.Model, r.Measured, r.JudgedLo, r.JudgedHi, got, r.Inside)
		}
		if r.JudgedLo > r.Lo+1e-3 || r.JudgedHi < r.Hi-1e-3 {
			t.Errorf("%s %s: judged against [%v, %v], narrower than the prediction's [%v, %v]", r.State, r.Level, r.JudgedLo, r.JudgedHi, r.Lo, r.Hi)
		}
		if !r.Scored {
			continue
		}
		scored++
		states[r.State] = true
		if r.Inside {
			inside++
		}
		errs = append(errs, 100*math.Abs(r.Measured/r.Predicted-1))
	}
	if scored < minScored || len(states) < minStates {
		t.Errorf("%s: %d scored predictions on %d server states, want at least %d on %d", heading, scored, len(states), minScored, minStates)
	}
	if scored != claim.Scored || inside < claim.Inside {
		t.Errorf("the table holds %d of %d inside; the doc claims %d of %d", inside, scored, claim.Inside, claim.Scored)
	}
	slices.Sort(errs)
	med := 0.0
	if n := len(errs); n > 0 {
		med = errs[n/2]
		if n%2 == 0 {
			med = (errs[n/2-1] + errs[n/2]) / 2
		}
	}
	if med > claim.MedianAbsErr+0.5 {
		t.Errorf("median absolute error of the central value %.1f %%; the doc claims %.1f %%", med, claim.MedianAbsErr)
	}
	t.Logf("%s: coverage %d of %d (%.0f %%), median abs error %.1f %%", heading, inside, scored, 100*float64(inside)/float64(max(scored, 1)), med)
}

func TestCalibrationParse(t *testing.T) {
	doc := "x\n### Calibration\n\ntext\n\n| model | server state | knob | level | predicted ratio [lo–hi] | judged against | measured ratio | inside | scored | load |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n" +
		"| admission cap | `cap3` | max_running | c6 | ×1.135 [0.967–1.304] | 0.900–1.370 | ×1.21 | yes | yes | 9–12 |\n" +
		"| host work | host10 | host_work | c1 | ×1.02 [0.93–1.11] | 0.93–1.11 | ×1.40 | no | no | 9 |\n\nafter\n" +
		"<!-- calibration: coverage 1 of 1; median abs error 6.6 % -->\n"
	rows, err := Calibration(doc, "### Calibration")
	if err != nil || len(rows) != 2 {
		t.Fatalf("%+v %v", rows, err)
	}
	want := CalRow{Model: "admission cap", State: "cap3", Knob: "max_running", Level: "c6", Predicted: 1.135, Lo: 0.967, Hi: 1.304,
		JudgedLo: 0.9, JudgedHi: 1.37, Measured: 1.21, Inside: true, Scored: true}
	if rows[0] != want || rows[1].Inside || rows[1].Scored || rows[1].Measured != 1.4 {
		t.Errorf("rows %+v", rows)
	}
	if c, ok := Claim(doc); !ok || c != (CalClaim{1, 1, 6.6}) {
		t.Errorf("claim %+v %v", c, ok)
	}
	if _, err := Calibration("| a |\n", "### Calibration"); err == nil {
		t.Error("no heading: no error")
	}
}
