package table

import (
	"encoding/json"
	"math"
	"testing"
)

func TestDecode(t *testing.T) {
	type row struct {
		Level    string   `col:"level"`
		Share    float64  `col:"share (%)"`
		ShareTxt Text     `col:"share (%)"`
		N        int      `col:"n"`
		Big      int64    `col:"n"`
		Lo       *float64 `col:"lo"`
		On       bool     `col:"on"`
		Extra    string   `col:"extra,optional"`
		Either   string   `col:"lvl|level"`
	}
	tab := &Table{Name: "t", Columns: []string{"level", "share (%)", "n", "lo", "on", "stage"}}
	tab.Rows = [][]string{{"c=16", "12 %", "3", "-", "true", "1 / 2"}, {"c=1", "-", "-", "-", "-", "-"}}
	tab.Values = [][]any{
		{"c16", 12.5, int64(1<<62 + 1), json.Number("0.5"), true, map[string]any{"mean_ms": 1.0}},
		{nil, nil, nil, nil, nil, nil},
	}
	rows, err := Decode[row](tab)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.Level != "c16" || r.Share != 12.5 || r.ShareTxt != "12 %" || r.N != 1<<62+1 || r.Big != 1<<62+1 || r.Lo == nil || *r.Lo != 0.5 || !r.On || r.Extra != "" || r.Either != "c16" {
		t.Errorf("row 1: %+v", r)
	}
	// No value: "", NaN, zero, nil.
	r = rows[1]
	if r.Level != "" || !math.IsNaN(r.Share) || r.ShareTxt != "-" || r.N != 0 || r.Lo != nil || r.On {
		t.Errorf("row 2: %+v", r)
	}
	// A table of text alone: strings take the text.
	text := &Table{Name: "x", Columns: []string{"level"}, Rows: [][]string{{"c=1"}}}
	if rows, err := Decode[struct {
		L string `col:"level"`
	}](text); err != nil || rows[0].L != "c=1" {
		t.Errorf("text table: %+v %v", rows, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tab := &Table{Name: "advice", Columns: []string{"level", "from"}}
	tab.AddRow("c1", "one")
	tab.AddRow("c2", 2.5)
	second := &Table{Name: "advice", Columns: tab.Columns, Values: tab.Values[1:]}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{decodeErr[struct {
			Cause string `col:"cause"`
		}](tab), `table advice has no column "cause" (its columns: level, from)`},
		{decodeErr[struct {
			Cause string `col:"cause|reason"`
		}](tab), `table advice has no column "cause|reason" (its columns: level, from)`},
		{decodeErr[struct {
			From float64 `col:"from"`
		}](tab), "table advice row 1, column from: one is not a number"},
		{decodeErr[struct {
			From int `col:"from"`
		}](second), "table advice row 1, column from: 2.5 is not an integer"},
		{decodeErr[struct {
			On bool `col:"level"`
		}](tab), "table advice row 1, column level: c1 is not a bool"},
		{decodeErr[struct {
			Level string `col:"from"`
		}](second), "table advice row 1, column from: 2.5 is not a string"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("got %v, want %s", tc.err, tc.want)
		}
	}
}

func decodeErr[T any](t *Table) error {
	_, err := Decode[T](t)
	return err
}
