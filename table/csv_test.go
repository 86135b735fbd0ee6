package table

import (
	"bytes"
	"testing"
)

// CSV and TSV have one value a cell: a stage cell printed "0.22 / 0.39"
// becomes its mean, p95 and n in columns of their own, a sweep cell
// "0.12 [0.11–0.12]" its mean whole, a level its label, none an empty cell.
func TestCSVOneValueACell(t *testing.T) {
	tab := &Table{Name: "stages", Columns: []string{"level", "build", "req/s", "cause"}}
	tab.Rows = [][]string{{"c=1", "0.22 / 0.39", "0.12 [0.11–0.12]", "CPU contention"}, {"c=4", "-", "-", "-"}}
	tab.Values = [][]any{
		{"c1", map[string]any{"mean_ms": 0.22, "p95_ms": 0.39, "n": int64(16)}, 0.1151, "CPU contention"},
		{"c4", nil, nil, nil},
	}
	for _, tc := range []struct{ format, want string }{
		{"csv", "level,build mean_ms,build n,build p95_ms,req/s,cause\nc=1,0.22,16,0.39,0.1151,CPU contention\nc=4,,,,,\n"},
		{"tsv", "level\tbuild mean_ms\tbuild n\tbuild p95_ms\treq/s\tcause\nc=1\t0.22\t16\t0.39\t0.1151\tCPU contention\nc=4\t\t\t\t\t\n"},
	} {
		var b bytes.Buffer
		if err := RenderWidth(&b, tc.format, 0, tab); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.format, b.String(), tc.want)
		}
	}
	// A table of text alone (no typed cells) keeps its text.
	text := &Table{Columns: []string{"a", "b"}, Rows: [][]string{{"x y", "1"}}}
	var b bytes.Buffer
	RenderWidth(&b, "csv", 0, text)
	if b.String() != "a,b\nx y,1\n" {
		t.Errorf("text table: %q", b.String())
	}
	if got := number(0.30054775000000006); got != "0.30054775" {
		t.Errorf("number: %s", got)
	}
}
