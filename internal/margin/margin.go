// Package margin holds the verdict-margin check of the golden tests
// (issue 44, "thresholds with margins"): the margins analysis
// (scripts/margins.star) lists, per level and cause, each figure a rule
// of scripts/lib/diagnosis.star compared with its threshold. A cause
// whose figure lies within Near of its threshold could read otherwise on
// a rerun of the same server, so no golden may assert it: the fixture is
// moved, or the cause is listed as not asserted, with why, and the golden
// masks its row.
package margin

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/model"
)

// Near is the relative distance from a threshold within which a verdict
// is not asserted: |figure − threshold| / |threshold| < Near.
const Near = 0.10

// Row is one row of the margins table.
type Row struct {
	Level     string
	Rank      int
	Cause     string
	Rule      string
	Figure    float64
	Threshold float64
}

// IsNear says whether the row's figure lies within Near of its threshold:
// |figure − threshold| / |threshold| < Near (never for a threshold of 0).
func (r Row) IsNear() bool {
	return r.Threshold != 0 && math.Abs(r.Figure-r.Threshold)/math.Abs(r.Threshold) < Near
}

// Parse reads the margins table from `analyze … --format json` output
// (other tables in it are skipped).
func Parse(doc string) ([]Row, error) {
	var d struct {
		Tables []struct {
			Name    string   `json:"name"`
			Columns []string `json:"columns"`
			Rows    [][]any  `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("reading the margins table: %w", err)
	}
	for _, t := range d.Tables {
		if t.Name != "margins" {
			continue
		}
		col := map[string]int{}
		for i, c := range t.Columns {
			col[c] = i
		}
		for _, c := range []string{"level", "rank", "cause", "rule", "figure", "threshold"} {
			if _, ok := col[c]; !ok {
				return nil, fmt.Errorf("reading the margins table: no column %q", c)
			}
		}
		var out []Row
		for i, r := range t.Rows {
			fig, ok1 := r[col["figure"]].(float64)
			thr, ok2 := r[col["threshold"]].(float64)
			rank, ok3 := r[col["rank"]].(float64)
			if !ok1 || !ok2 || !ok3 {
				return nil, fmt.Errorf("reading the margins table: row %d: figure, threshold or rank is not a number: %v", i+1, r)
			}
			out = append(out, Row{Level: fmt.Sprint(r[col["level"]]), Rank: int(rank), Cause: fmt.Sprint(r[col["cause"]]),
				Rule: fmt.Sprint(r[col["rule"]]), Figure: fig, Threshold: thr})
		}
		return out, nil
	}
	return nil, fmt.Errorf("reading the margins table: the output has no table named margins")
}

// Exempt is a cause near its threshold that a golden does not assert.
type Exempt struct {
	Fixture, Level string
	Rank           int // the cause's rank at the level (1: the verdict)
	Cause, Rule    string
	Why            string
}

// Exempted is Exempt{fixture, level, rank, cause, rule, why}.
func Exempted(fixture, level string, rank int, cause, rule, why string) Exempt {
	return Exempt{Fixture: fixture, Level: level, Rank: rank, Cause: cause, Rule: rule, Why: why}
}

// Check lists what is wrong with a fixture's margins against the exempt
// list: a cause near its threshold that is not exempt (a golden would
// assert it), and an exemption for a cause that is no longer near (the
// list has gone stale).
func Check(fixture string, rows []Row, exempt []Exempt) []string {
	var errs []string
	used := map[int]bool{}
	for _, r := range rows {
		if !r.IsNear() {
			continue
		}
		found := false
		for i, e := range exempt {
			if e.Fixture == fixture && e.Level == r.Level && e.Rank == r.Rank && e.Cause == r.Cause && e.Rule == r.Rule {
				found, used[i] = true, true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("%s at %s: %q (rank %d) is decided by %s = %.4g against %.4g, within %.0f %%: the golden would assert it; move the fixture, or add it to the exempt list with why",
				fixture, r.Level, r.Cause, r.Rank, r.Rule, r.Figure, r.Threshold, 100*Near))
		}
	}
	for i, e := range exempt {
		if e.Fixture == fixture && !used[i] {
			errs = append(errs, fmt.Sprintf("%s at %s: %q by %s is exempt, but the margins table has no such cause near its threshold: remove the exemption", fixture, e.Level, e.Cause, e.Rule))
		}
	}
	return errs
}

// Mask replaces, in the text output of the bottleneck analysis, the row
// of each exempt cause of fixture (its level's label, its rank, the cause
// in its cells) with a line saying it is not asserted and why the rule's
// figure is near. For an exempt verdict (rank 1) the advice table's row of
// that level and cause (no rank) is masked too.
func Mask(text, fixture string, exempt []Exempt) string {
	lines := strings.Split(text, "\n")
	for _, e := range exempt {
		if e.Fixture != fixture {
			continue
		}
		label := model.LevelLabel(e.Level)
		for i, l := range lines {
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != label || !strings.Contains(l, "  "+e.Cause+"  ") {
				continue
			}
			rank, err := strconv.Atoi(f[1])
			if (err == nil && rank != e.Rank) || (err != nil && e.Rank != 1) {
				continue
			}
			lines[i] = fmt.Sprintf("%s  [not asserted: %s, decided by %s within %.0f %% of its threshold: %s]", label, e.Cause, e.Rule, 100*Near, e.Why)
		}
	}
	return strings.Join(lines, "\n")
}
