// Package table renders result tables as aligned text, Markdown, CSV or
// JSON: the Starlark `table` module (every analysis, the sweep included)
// and the runbook's verdict tables use it.
package table

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Formats lists the values of --format. "table", the name capture and
// show once used for "text", is accepted too (CheckFormat, Render).
var Formats = []string{"text", "markdown", "csv", "tsv", "json"}

// FormatUsage is the help of every command's --format: Formats, with
// what each is.
const FormatUsage = "how the tables print: `text` (aligned columns; on a terminal, wrapped to its width),\nmarkdown, csv, tsv (one value a cell) or json"

// CheckFormat says whether format is one of Formats (or "table").
func CheckFormat(format string) error {
	if format == "table" || slices.Contains(Formats, format) {
		return nil
	}
	last := len(Formats) - 1 // "text, markdown, csv, tsv or json"
	return fmt.Errorf("unknown format %q (want %s or %s)", format, strings.Join(Formats[:last], ", "), Formats[last])
}

// Table is a titled grid. Cells are pre-formatted strings for text output;
// Values, when set, holds typed cells (float64, int, string, nil) for JSON.
// A table without columns is a message: text and Markdown print its title
// and notes alone, CSV leaves it out, JSON has it with no columns.
type Table struct {
	Name    string
	Title   string
	Columns []string
	Rows    [][]string
	Values  [][]any
	Notes   []string
}

// AddRow appends a row of typed values; each is also formatted for text.
func (t *Table) AddRow(vals ...any) {
	cells := make([]string, len(vals))
	for i, v := range vals {
		cells[i] = Format(v)
	}
	t.Rows = append(t.Rows, cells)
	t.Values = append(t.Values, vals)
}

// Format renders one value for text output.
func Format(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case float64:
		switch {
		case x == 0:
			return "0"
		case x >= 100 || x <= -100:
			return fmt.Sprintf("%.1f", x)
		case x >= 1 || x <= -1:
			return fmt.Sprintf("%.2f", x)
		default:
			return fmt.Sprintf("%.4f", x)
		}
	default:
		return fmt.Sprint(x)
	}
}

// Render writes tables in format ("text" or "table", "markdown", "csv",
// "json"). Text written to a terminal is laid out for its width
// (TerminalWidth, RenderWidth); written anywhere else, a file or a pipe,
// it keeps one line per row, whatever its length.
func Render(w io.Writer, format string, tables ...*Table) error {
	return RenderWidth(w, format, TerminalWidth(w), tables...)
}

// RenderWidth is Render with text laid out for a terminal width columns
// wide (0: no terminal, one line per row): text columns left-aligned and
// long ones wrapped so that rows fit, numbers right-aligned, titles and
// notes wrapped.
func RenderWidth(w io.Writer, format string, width int, tables ...*Table) error {
	switch format {
	case "json":
		type jt struct {
			Name    string   `json:"name"`
			Title   string   `json:"title"`
			Columns []string `json:"columns"`
			Rows    [][]any  `json:"rows"`
			Notes   []string `json:"notes,omitempty"`
		}
		out := struct {
			Tables []jt `json:"tables"`
		}{Tables: []jt{}}
		for _, t := range tables {
			rows := t.Values
			if rows == nil {
				for _, r := range t.Rows {
					row := make([]any, len(r))
					for i, c := range r {
						row[i] = c
					}
					rows = append(rows, row)
				}
			}
			// no rows and no columns are empty lists, not null
			out.Tables = append(out.Tables, jt{t.Name, t.Title, append([]string{}, t.Columns...), append([][]any{}, rows...), t.Notes})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "csv", "tsv":
		cw := csv.NewWriter(w)
		if format == "tsv" {
			cw.Comma = '\t'
		}
		i := 0
		for _, t := range tables {
			if len(t.Columns) == 0 {
				continue // a message has no CSV
			}
			if i++; i > 1 {
				cw.Write(nil)
			}
			cols, rows := flat(t)
			cw.Write(cols)
			cw.WriteAll(rows)
		}
		cw.Flush()
		return cw.Error()
	case "markdown", "table", "text", "":
		for i, t := range tables {
			if i > 0 {
				fmt.Fprintln(w)
			}
			switch {
			case format != "markdown" && width > 0:
				writeTerminal(w, t, width)
			case format != "markdown":
				writeText(w, t)
			case !writeMessage(w, t):
				if t.Title != "" {
					fmt.Fprintf(w, "### %s\n\n", t.Title)
				}
				fmt.Fprintf(w, "| %s |\n", strings.Join(t.Columns, " | "))
				fmt.Fprintf(w, "| %s |\n", strings.Join(slices.Repeat([]string{"---"}, len(t.Columns)), " | "))
				for _, r := range t.Rows {
					fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
				}
				for _, n := range t.Notes {
					fmt.Fprintf(w, "\n%s\n", n)
				}
			}
		}
		return nil
	}
	return CheckFormat(format)
}

// flat is t for CSV and TSV: one value a cell. A column whose typed
// cells are records (a stage's {"mean_ms", "p95_ms", "n"}, printed
// "0.22 / 0.39" as text) becomes one column per field, "build mean_ms",
// "build p95_ms"...; a number is written whole (strconv's shortest form,
// not the text's rounding or its "[min–max]"); text and a level's label as
// printed; no value is an empty cell.
func flat(t *Table) (cols []string, rows [][]string) {
	keys := make([][]string, len(t.Columns)) // the fields of each record column, sorted
	for i, c := range t.Columns {
		set := map[string]bool{}
		for _, vals := range t.Values {
			m, _ := at(vals, i).(map[string]any)
			for k := range m {
				set[k] = true
			}
		}
		keys[i] = slices.Sorted(maps.Keys(set))
		if len(keys[i]) == 0 {
			cols = append(cols, c)
		}
		for _, k := range keys[i] {
			cols = append(cols, c+" "+k)
		}
	}
	for r, text := range t.Rows {
		vals := at(t.Values, r)
		var row []string
		for i := range t.Columns {
			switch v := at(vals, i); {
			case len(keys[i]) > 0:
				m, _ := v.(map[string]any)
				for _, k := range keys[i] {
					row = append(row, value(m[k], ""))
				}
			case vals == nil: // a table of text only
				row = append(row, at(text, i))
			default:
				row = append(row, value(v, at(text, i)))
			}
		}
		rows = append(rows, row)
	}
	return cols, rows
}

// at is xs[i], or the zero value where xs has no element i.
func at[T any](xs []T, i int) T {
	if i < len(xs) {
		return xs[i]
	}
	var zero T
	return zero
}

// value is one typed cell for CSV: numbers whole (number), nothing as "", any
// other value as its text.
func value(v any, text string) string {
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		return number(x)
	case float32:
		return number(float64(x))
	case int, int64, int32, uint, uint64, bool:
		return fmt.Sprint(x)
	case string:
		return cmp.Or(text, x)
	}
	return cmp.Or(text, fmt.Sprint(v))
}

// number is x to 9 significant digits, without an exponent: the binary
// noise of a mean (0.30054775000000006) left out, any measured digit kept.
func number(x float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 9, 64), 64)
	if err != nil {
		r = x
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// writeMessage writes a table without columns, a message: its title and
// notes. It reports whether t is one.
func writeMessage(w io.Writer, t *Table) bool {
	if len(t.Columns) > 0 {
		return false
	}
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	for _, n := range t.Notes {
		fmt.Fprintln(w, n)
	}
	return true
}

// FileWidth is how wide a table's rows stay in a file or a pipe: the
// longest text columns that would make them wider move, cell by cell,
// into a block under the rows (moveLong). minMove is the narrowest
// column that moves.
const (
	FileWidth = 160
	minMove   = 40
)

func writeText(w io.Writer, t *Table) {
	if writeMessage(w, t) {
		return
	}
	t, block := moveLong(t, FileWidth)
	widths, text := layout(t)
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	fmt.Fprintln(w, aligned(t.Columns, widths, text))
	fmt.Fprintln(w, strings.Repeat("-", rowWidth(widths)))
	for _, r := range t.Rows {
		fmt.Fprintln(w, aligned(r, widths, text))
	}
	for _, l := range slices.Concat(block, t.Notes) {
		fmt.Fprintln(w, l)
	}
}

// moveLong is t with its longest text columns (over minMove wide, the
// widest first) moved out of the rows until they are at most width wide:
// each such cell reads "→ KEY" and its text goes to the returned block,
// one line "  KEY: text" under a line naming the column. KEY is the
// row's level (its first cell) and, where the level has several rows,
// its rank (the "rank" column, else its place among the level's rows):
// "c=4 #2". t itself is not changed.
func moveLong(t *Table, width int) (*Table, []string) {
	nat, text := layout(t)
	if rowWidth(nat) <= width || len(t.Rows) == 0 {
		return t, nil
	}
	var cand []int
	for i := 1; i < len(nat); i++ {
		if text[i] && nat[i] > minMove {
			cand = append(cand, i)
		}
	}
	slices.SortStableFunc(cand, func(a, b int) int { return nat[b] - nat[a] })
	keys := rowKeys(t)
	out := *t
	out.Rows = make([][]string, len(t.Rows))
	for r, row := range t.Rows {
		out.Rows[r] = slices.Clone(row)
	}
	var block []string
	for _, i := range cand {
		if rowWidth(nat) <= width {
			break
		}
		block = append(block, t.Columns[i]+":")
		nat[i] = runes(t.Columns[i])
		for r, row := range out.Rows {
			if i >= len(row) || row[i] == "" || row[i] == "-" {
				continue
			}
			block = append(block, "  "+keys[r]+": "+row[i])
			row[i] = "→ " + keys[r]
			nat[i] = max(nat[i], runes(row[i]))
		}
	}
	return &out, block
}

// rowKeys names each row of t by its first cell and, where that cell
// leads several rows, the row's rank: its "rank" column when t has one,
// else its place among them (1, 2, ...).
func rowKeys(t *Table) []string {
	count := map[string]int{}
	for _, r := range t.Rows {
		if len(r) > 0 {
			count[r[0]]++
		}
	}
	rank := slices.Index(t.Columns, "rank")
	seen := map[string]int{}
	keys := make([]string, len(t.Rows))
	for i, r := range t.Rows {
		if len(r) == 0 {
			keys[i] = fmt.Sprintf("#%d", i+1)
			continue
		}
		seen[r[0]]++
		keys[i] = r[0]
		if count[r[0]] > 1 {
			k := strconv.Itoa(seen[r[0]])
			if rank > 0 && rank < len(r) && r[rank] != "" && r[rank] != "-" {
				k = r[rank]
				if f, err := strconv.ParseFloat(k, 64); err == nil && f == float64(int(f)) {
					k = strconv.Itoa(int(f)) // a rank formatted "2.00" keys as 2
				}
			}
			keys[i] += " #" + k
		}
	}
	return keys
}

// aligned lays cells out in columns of widths, two spaces apart: text
// columns left-aligned, the others right-aligned; no trailing spaces.
func aligned(cells []string, widths []int, text []bool) string {
	var b strings.Builder
	for i, c := range cells[:min(len(cells), len(widths))] {
		if i > 0 {
			b.WriteString("  ")
		}
		pad := strings.Repeat(" ", max(0, widths[i]-runes(c)))
		if text[i] {
			b.WriteString(c + pad)
		} else {
			b.WriteString(pad + c)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// rowWidth is the width of a row of columns of widths.
func rowWidth(widths []int) int {
	total := -2
	for _, wd := range widths {
		total += wd + 2
	}
	return total
}
