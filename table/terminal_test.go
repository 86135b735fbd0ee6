package table

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// diagnosis is a table shaped like the bottleneck analysis's: a long text
// column of evidence, short text columns, numbers.
func diagnosis() *Table {
	t := &Table{Title: "Diagnosis per level (stage preset refserver): the first row is the verdict",
		Columns: []string{"level", "rank", "cause", "explains", "evidence"}}
	t.AddRow("c=1", 1.0, "request work: decode tail", "51 %", "decode tail is 51 % of latency (30.0 ms of 59.0 ms): no queueing, pool or contention rule holds at this level")
	t.AddRow("c=64", 1.0, "admission cap", "84 %", "queued→scheduled 300.0 ms (1.00 ms at c=1) is 84 % of latency, while the running batch holds 22.9 requests on average and 24 at most, the cap seen in this capture")
	t.AddRow("c=64", 2.0, "busy thread", nil, "asr-sched (tid 101) at 98 % of a core")
	t.Notes = []string{"explains: the share of the level's mean client latency the cause accounts for; the rules are in scripts/lib/diagnosis.star (docs/ANALYSIS.md)"}
	return t
}

// On a terminal every line fits its width: the evidence wraps under its
// column, left-aligned like every text column; numbers stay
// right-aligned.
func TestTableTerminalWraps(t *testing.T) {
	for _, width := range []int{80, 120} {
		var b bytes.Buffer
		if err := RenderWidth(&b, "text", width, diagnosis()); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > width {
				t.Errorf("width %d: a line of %d: %q", width, n, l)
			}
		}
		header := lines[1]
		evidence := strings.Index(header, "evidence")
		cause := strings.Index(header, "cause")
		if evidence < 0 || cause < 0 {
			t.Fatalf("no header: %q", header)
		}
		byteCol := func(l string, runeCol int) string { // l from rune column runeCol on
			r := []rune(l)
			if runeCol > len(r) {
				return ""
			}
			return string(r[runeCol:])
		}
		evCol := utf8.RuneCountInString(header[:evidence])
		causeCol := utf8.RuneCountInString(header[:cause])
		var rows, cont int
		for _, l := range lines[3:] {
			switch {
			case strings.HasPrefix(l, "c="):
				rows++
				if !strings.HasPrefix(byteCol(l, causeCol), "request work") && !strings.HasPrefix(byteCol(l, causeCol), "admission cap") &&
					!strings.HasPrefix(byteCol(l, causeCol), "busy thread") {
					t.Errorf("width %d: cause not left-aligned under its header: %q", width, l)
				}
				if strings.HasPrefix(byteCol(l, evCol), " ") {
					t.Errorf("width %d: evidence not left-aligned under its header: %q", width, l)
				}
			case strings.HasPrefix(l, strings.Repeat(" ", evCol)) && !strings.HasPrefix(l, strings.Repeat(" ", evCol+1)):
				cont++ // a wrapped evidence line, in the evidence column
			}
		}
		if rows != 3 || cont == 0 {
			t.Errorf("width %d: %d rows, %d continuation lines:\n%s", width, rows, cont, out)
		}
		if !strings.Contains(out, "     51 %") { // explains: right-aligned under its 8-wide header
			t.Errorf("width %d: numbers not right-aligned:\n%s", width, out)
		}
		if !strings.Contains(out, "the cap seen in this capture") && !strings.Contains(out, "cap seen in this") {
			t.Errorf("width %d: evidence lost:\n%s", width, out)
		}
	}
}

// Numbers never wrap: a table of numbers too wide for the terminal is
// split into column groups, each led by the level, and every cell stays
// whole on one line.
func TestTableTerminalNumbers(t *testing.T) {
	tb := &Table{Columns: []string{"level", "req/s", "latency mean (s)", "corpus WER"}}
	tb.AddRow("c=1", "16.93 [16.83–17.04]", "0.058 [0.058–0.059]", "0.0480 [0.0389–0.0570]")
	var b bytes.Buffer
	RenderWidth(&b, "text", 60, tb)
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 60 {
			t.Errorf("a line of %d: %q\n%s", n, l, b.String())
		}
	}
	if !strings.Contains(b.String(), "0.0480 [0.0389–0.0570]") || !strings.Contains(b.String(), "16.93 [16.83–17.04]") || strings.Count(b.String(), "c=1") != 2 {
		t.Errorf("cells lost:\n%s", b.String())
	}
}

// A table that fits keeps one line per row; a text column is then only
// left-aligned.
func TestTableTerminalFits(t *testing.T) {
	tb := &Table{Columns: []string{"level", "thread", "CPU %"}}
	tb.AddRow("c=1", "asr-sched", 20.0)
	tb.AddRow("c=1", "http", 5.0)
	var b bytes.Buffer
	RenderWidth(&b, "text", 120, tb)
	want := "level  thread     CPU %\n-----------------------\nc=1    asr-sched  20.00\nc=1    http        5.00\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// Written to a file, a pipe or a buffer, text keeps one line per row,
// however wide: text columns left-aligned as on a terminal, numbers
// right-aligned.
func TestTableNotATerminal(t *testing.T) {
	var plain bytes.Buffer
	writeText(&plain, diagnosis())
	lines := strings.Split(plain.String(), "\n")
	header := lines[1]
	cause, explains, evidence := strings.Index(header, "cause"), strings.Index(header, "explains"), strings.Index(header, "evidence")
	for _, l := range lines[3:6] {
		if c := l[cause:]; !strings.HasPrefix(c, "request work") && !strings.HasPrefix(c, "admission cap") && !strings.HasPrefix(c, "busy thread") {
			t.Errorf("cause not left-aligned under its header: %q", l)
		}
		if !strings.HasPrefix(l[evidence:], "→ c=") { // moved under the rows, keyed by level and rank
			t.Errorf("evidence not moved to the notes block: %q", l)
		}
		if e := l[explains : explains+len("explains")]; e != "    51 %" && e != "    84 %" && e != "       -" {
			t.Errorf("explains not right-aligned under its header: %q in %q", e, l)
		}
	}
	var b bytes.Buffer
	if err := Render(&b, "text", diagnosis()); err != nil {
		t.Fatal(err)
	}
	if b.String() != plain.String() {
		t.Errorf("a buffer got the terminal layout:\n%s", b.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if w := TerminalWidth(f); w != 0 {
		t.Errorf("a file's terminal width: %d, want 0", w)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if n := TerminalWidth(w); n != 0 {
		t.Errorf("a pipe's terminal width: %d, want 0", n)
	}
	if n := TerminalWidth(&b); n != 0 {
		t.Errorf("a buffer's terminal width: %d, want 0", n)
	}
}

// "text" is the format's name; "table", its old name, still renders the
// same; anything else is an error that lists the names.
func TestTableFormats(t *testing.T) {
	for _, f := range []string{"text", "table", "markdown", "csv", "tsv", "json"} {
		if err := CheckFormat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	var a, b bytes.Buffer
	Render(&a, "text", diagnosis())
	Render(&b, "table", diagnosis())
	if a.String() != b.String() {
		t.Error("table and text differ")
	}
	err := Render(&a, "yaml", diagnosis())
	if err == nil || !strings.Contains(err.Error(), "want text, markdown, csv, tsv or json") {
		t.Errorf("yaml: %v", err)
	}
}

func TestTableWrap(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  []string
	}{
		{"a bb ccc", 4, []string{"a bb", "ccc"}},
		{"abcdefgh", 3, []string{"abc", "def", "gh"}},
		{"4.00 / 4.00 12.0 / 13.0", 12, []string{"4.00 / 4.00", "12.0 / 13.0"}}, // a mean and its p95 stay together
		{"", 4, []string{""}},
	} {
		got := wrap(tc.in, tc.width)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

// A table without columns is a message: its title and notes, no header,
// in every format (none in CSV).
func TestTableMessage(t *testing.T) {
	msg := &Table{Name: "m", Title: "every request in one bucket: no per-length tables", Notes: []string{"length unknown: 2 of 8"}}
	text := "every request in one bucket: no per-length tables\nlength unknown: 2 of 8\n"
	for _, tc := range []struct {
		format string
		width  int
		want   string
	}{
		{"text", 0, text},
		{"text", 30, "every request in one bucket:\nno per-length tables\nlength unknown: 2 of 8\n"},
		{"markdown", 0, text},
		{"csv", 0, "level\nc=1\n"},
		{"json", 0, `{"tables":[{"name":"m","title":"every request in one bucket: no per-length tables","columns":[],"rows":[],"notes":["length unknown: 2 of 8"]},{"name":"","title":"","columns":["level"],"rows":[["c=1"]]}]}`},
	} {
		one := &Table{Columns: []string{"level"}}
		one.AddRow("c=1")
		var b bytes.Buffer
		if err := RenderWidth(&b, tc.format, tc.width, msg, one); err != nil {
			t.Fatal(err)
		}
		got := b.String()
		switch tc.format {
		case "json":
			got = strings.Join(strings.Fields(got), "")
			tc.want = strings.Join(strings.Fields(tc.want), "")
		case "text", "markdown":
			got, _, _ = strings.Cut(got, "\n\n") // the message, before the next table
			got += "\n"
		}
		if got != tc.want {
			t.Errorf("%s (width %d): got %q, want %q", tc.format, tc.width, got, tc.want)
		}
	}
}

// TestTableWidths: at 80, 100 and 160 columns on a terminal no line is
// wider than the terminal, every rule is as wide as the rows under it,
// no number is split over lines and no word of a knob is cut; in a file
// the rows stay within 160 columns, the long evidence under them keyed
// by level and rank.
func TestTableWidths(t *testing.T) {
	stages := &Table{Title: "Stages (ms, mean / p95 per request; preset refserver)",
		Columns: []string{"level", "receive", "build wait", "build", "build→queued", "queued→scheduled", "first forward", "decode tail", "unattributed", "total", "client overhead"}}
	stages.AddRow("c=1", "0.30 / 0.54", "1.02 / 4.76", "0.67 / 2.35", "0.04 / 0.07", "0.40 / 1.82", "1.16 / 2.84", "8677.4 / 17343.4", "5.35 / 22.4", "8686.3 / 17346.8", "4.38 / 14.5")
	stages.AddRow("c=4", "0.84 / 2.48", "2.35 / 9.13", "1.23 / 5.59", "0.33 / 1.51", "174.4 / 1038.0", "2.74 / 12.7", "65328.3 / 75131.6", "3.87 / 8.38", "65514.1 / 75263.8", "5.38 / 21.7")
	advice := &Table{Title: "Advice per level", Columns: []string{"level", "cause", "knob", "change", "metric", "now", "predicted"}}
	advice.AddRow("c=1", "CPU contention", "-", "give the serving thread a core of its own (fewer co-runners, no CPU quota)", "requests_per_s", 0.1151, 0.3745)
	numbers := map[string]bool{}
	for _, r := range stages.Rows {
		for _, c := range r[1:] {
			numbers[c] = true
		}
	}
	for _, width := range []int{80, 100, 160} {
		for _, tab := range []*Table{stages, advice, diagnosis()} {
			var b bytes.Buffer
			if err := RenderWidth(&b, "text", width, tab); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			for i, l := range lines {
				if n := utf8.RuneCountInString(l); n > width {
					t.Errorf("%d columns, %s: a line of %d: %q", width, tab.Title, n, l)
				}
				if strings.HasPrefix(l, "---") { // a rule: as wide as its header above
					if hw := utf8.RuneCountInString(lines[i-1]); utf8.RuneCountInString(l) < hw {
						t.Errorf("%d columns, %s: rule of %d under a header of %d", width, tab.Title, utf8.RuneCountInString(l), hw)
					}
				}
			}
			if tab == stages {
				for c := range numbers { // each mean / p95 whole, on one line
					if !strings.Contains(out, c) {
						t.Errorf("%d columns: %q split:\n%s", width, c, out)
					}
				}
			}
			if tab == advice && !strings.Contains(out, "requests_per_s") {
				t.Errorf("%d columns: requests_per_s cut:\n%s", width, out)
			}
		}
	}
	// In a file: rows within 160 columns, the evidence below them.
	var f bytes.Buffer
	RenderWidth(&f, "text", 0, diagnosis())
	long := &Table{Columns: []string{"level", "rank", "evidence"}}
	long.AddRow("c=4", 1, strings.Repeat("word ", 60))
	long.AddRow("c=4", 2, "short")
	RenderWidth(&f, "text", 0, long)
	out := f.String()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > FileWidth && !strings.HasPrefix(l, "  c=") && !strings.HasPrefix(l, "explains") {
			t.Errorf("a row of %d in a file: %q", n, l)
		}
	}
	for _, want := range []string{"c=64   2.00  busy thread", "→ c=64 #2", "evidence:\n", "  c=64 #2: asr-sched (tid 101) at 98 % of a core", "  c=4 #1: word word", "  c=4 #2: short"} {
		if !strings.Contains(out, want) {
			t.Errorf("file output lacks %q:\n%s", want, out)
		}
	}
}
