// Package doccheck holds what the docs' tests read (issue 44, "docs that
// match"): the verdicts docs/GPU.md and docs/CAPACITY.md cite from a
// golden, marked where they are cited, and the calibration table of
// docs/CAPACITY.md.
//
// A cited verdict is marked with an HTML comment beside the sentence or
// table row that states it, invisible in the rendered page:
//
//	<!-- golden h200/gpu-bound c=128 1: admission cap -->
//
// h200/NAME is testdata/h200/golden/NAME/bottleneck.txt, analysis/NAME
// analysis/testdata/golden/NAME/bottleneck.txt; the level is the table's
// label, the rank the cause's (1: the verdict).
package doccheck

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Citation is one marked verdict.
type Citation struct {
	Line   int // in the doc, 1-based
	Golden string
	Level  string
	Rank   int
	Cause  string
}

var citeRE = regexp.MustCompile(`<!-- golden (\S+) (\S+) (\d+): (.+?) -->`)

// Citations reads the marked verdicts of a doc.
func Citations(doc string) []Citation {
	var out []Citation
	for i, l := range strings.Split(doc, "\n") {
		for _, m := range citeRE.FindAllStringSubmatch(l, -1) {
			r, _ := strconv.Atoi(m[3])
			out = append(out, Citation{Line: i + 1, Golden: m[1], Level: m[2], Rank: r, Cause: strings.TrimSpace(m[4])})
		}
	}
	return out
}

// GoldenPath is the bottleneck golden a citation names, under root.
func GoldenPath(root, golden string) (string, error) {
	kind, name, ok := strings.Cut(golden, "/")
	switch {
	case !ok || name == "":
	case kind == "h200":
		return filepath.Join(root, "testdata", "h200", "golden", name, "bottleneck.txt"), nil
	case kind == "analysis":
		return filepath.Join(root, "analysis", "testdata", "golden", name, "bottleneck.txt"), nil
	}
	return "", fmt.Errorf("golden %q: want h200/NAME or analysis/NAME", golden)
}

// Verdict is the cause at level and rank in a bottleneck golden's
// diagnosis table; masked where the golden does not assert it (a cause
// near its threshold, internal/margin), found false where the level has
// no such rank.
func Verdict(golden, level string, rank int) (cause string, masked, found bool) {
	want := strconv.Itoa(rank)
	for _, l := range strings.Split(golden, "\n") {
		if strings.HasPrefix(l, "Advice per level") {
			break
		}
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != level || f[1] != want {
			continue
		}
		rest := strings.TrimLeft(strings.TrimPrefix(strings.TrimLeft(strings.TrimPrefix(l, level), " "), want), " ")
		if i := strings.Index(rest, "  "); i >= 0 {
			rest = rest[:i]
		}
		if key, ok := strings.CutPrefix(rest, "→ "); ok {
			rest = footnote(golden, "cause:", key)
		}
		return rest, false, true
	}
	return "", false, false
}

// footnote is the text of "  key: text" under the first line block of a
// golden's diagnosis (a long cell the text table prints as "→ key").
func footnote(golden, block, key string) string {
	in := false
	for _, l := range strings.Split(golden, "\n") {
		if strings.HasPrefix(l, "Advice per level") {
			break
		}
		if !strings.HasPrefix(l, "  ") {
			in = l == block
			continue
		}
		if text, ok := strings.CutPrefix(l, "  "+key+": "); ok && in {
			return text
		}
	}
	return "→ " + key
}

// Masked lists the causes a golden masks at a level ("[not asserted: CAUSE, …").
func Masked(golden, level string) []string {
	var out []string
	for _, l := range strings.Split(golden, "\n") {
		if strings.HasPrefix(l, "Advice per level") {
			break
		}
		rest, ok := strings.CutPrefix(l, level+"  [not asserted: ")
		if !ok {
			continue
		}
		if i := strings.Index(rest, ", decided by"); i >= 0 {
			out = append(out, rest[:i])
		}
	}
	return out
}

// CalRow is one row of the calibration table (docs/CAPACITY.md,
// "Calibration"): a prediction of the advice and what what-if measured.
type CalRow struct {
	Model, State, Knob, Level string
	Predicted, Lo, Hi         float64 // the predicted ratio and its interval
	JudgedLo, JudgedHi        float64 // the interval judged against (A/A floor)
	Measured                  float64 // the measured ratio B/A
	Inside                    bool
	Scored                    bool // counted in the coverage (not a server the model was fitted or tuned on)
}

var (
	ratioRE = regexp.MustCompile(`^×?([0-9.]+) \[([0-9.]+)–([0-9.]+)\]$`)
	rangeRE = regexp.MustCompile(`^([0-9.]+)–([0-9.]+)$`)
	claimRE = regexp.MustCompile(`<!-- calibration: coverage (\d+) of (\d+); median abs error ([0-9.]+) % -->`)
)

// Calibration reads the calibration table: the first table after the line
// that starts with heading, its columns by name (model, server state,
// knob, level, predicted ratio [lo–hi], judged against, measured ratio,
// inside, scored).
func Calibration(doc, heading string) ([]CalRow, error) {
	lines := strings.Split(doc, "\n")
	at := -1
	for i, l := range lines {
		if strings.HasPrefix(l, heading) {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("no heading %q", heading)
	}
	var cols map[string]int
	var out []CalRow
	for _, l := range lines[at+1:] {
		if !strings.HasPrefix(l, "|") {
			if cols != nil {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cols == nil {
			cols = map[string]int{}
			for i, c := range cells {
				cols[c] = i
			}
			for _, c := range []string{"model", "server state", "knob", "level", "predicted ratio [lo–hi]", "judged against", "measured ratio", "inside", "scored"} {
				if _, ok := cols[c]; !ok {
					return nil, fmt.Errorf("the calibration table has no column %q", c)
				}
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		get := func(c string) string { return strings.Trim(cells[cols[c]], "`*") }
		r := CalRow{Model: get("model"), State: get("server state"), Knob: get("knob"), Level: get("level"),
			Inside: get("inside") == "yes", Scored: get("scored") == "yes"}
		m := ratioRE.FindStringSubmatch(get("predicted ratio [lo–hi]"))
		j := rangeRE.FindStringSubmatch(get("judged against"))
		if m == nil || j == nil {
			return nil, fmt.Errorf("calibration row %q: the predicted ratio or the judged interval does not read as X [LO–HI] / LO–HI", l)
		}
		var err error
		for _, p := range []struct {
			s   string
			dst *float64
		}{{m[1], &r.Predicted}, {m[2], &r.Lo}, {m[3], &r.Hi}, {j[1], &r.JudgedLo}, {j[2], &r.JudgedHi}, {strings.TrimPrefix(get("measured ratio"), "×"), &r.Measured}} {
			if *p.dst, err = strconv.ParseFloat(p.s, 64); err != nil {
				return nil, fmt.Errorf("calibration row %q: %w", l, err)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// CalClaim is what the doc claims of its calibration table.
type CalClaim struct {
	Inside, Scored int
	MedianAbsErr   float64 // %, of the central value: |measured / predicted − 1|
}

// Claim reads the doc's claim, <!-- calibration: coverage N of M; median abs error E % -->.
func Claim(doc string) (CalClaim, bool) {
	m := claimRE.FindStringSubmatch(doc)
	if m == nil {
		return CalClaim{}, false
	}
	n, _ := strconv.Atoi(m[1])
	s, _ := strconv.Atoi(m[2])
	e, _ := strconv.ParseFloat(m[3], 64)
	return CalClaim{Inside: n, Scored: s, MedianAbsErr: e}, true
}
