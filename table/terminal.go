package table

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

// DefaultWidth is the width of a terminal whose size is unknown.
const DefaultWidth = 120

// TerminalWidth is the width in columns of w when w is a terminal
// (DefaultWidth when its size is unknown), and 0 when it is not: a file,
// a pipe, a buffer.
func TerminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
		return cols
	}
	return DefaultWidth
}

// minWrap is the narrowest a wrapped text column gets; maxWord is the
// longest word that wrapping never cuts (a knob such as
// "requests_per_s" stays whole).
const (
	minWrap = 12
	maxWord = 24
)

// writeTerminal writes t for a terminal width columns wide: columns of
// text (every cell not a number) left-aligned, numbers right-aligned as
// in writeText; when a row would be wider than the terminal, the widest
// text columns are narrowed, their cells wrapped at spaces onto more
// lines as a block under their header. Numbers are never wrapped: when
// narrowing the text is not enough, the columns are split into groups
// that each fit, every group led by the first column (the level), so
// that no line is wider than the terminal and each rule is as wide as
// its rows.
func writeTerminal(w io.Writer, t *Table, width int) {
	say := func(ss ...string) { // wrapped
		for _, s := range ss {
			for _, l := range wrap(s, width) {
				fmt.Fprintln(w, l)
			}
		}
	}
	if len(t.Columns) == 0 { // a message: its title and notes
		say(slices.DeleteFunc(append([]string{t.Title}, t.Notes...), func(s string) bool { return s == "" })...)
		return
	}
	if t.Title != "" {
		say(t.Title)
	}
	for g, cols := range columnGroups(t, width) {
		if g > 0 {
			fmt.Fprintln(w)
		}
		sub := project(t, cols)
		nat, text := layout(sub)
		writeRows(w, sub, fit(sub, nat, text, width), text)
	}
	say(t.Notes...)
}

// writeRows writes t's header, its rule (as wide as the rows) and its
// rows, each cell wrapped to its column's width; a row takes as many
// lines as its tallest cell.
func writeRows(w io.Writer, t *Table, widths []int, text []bool) {
	n := len(t.Columns)
	line := func(cells []string) {
		parts := make([][]string, n)
		rows := 1
		for i := range n {
			parts[i] = wrap(at(cells, i), widths[i])
			rows = max(rows, len(parts[i]))
		}
		for k := range rows {
			ln := make([]string, n)
			for i := range ln {
				ln[i] = at(parts[i], k)
			}
			fmt.Fprintln(w, aligned(ln, widths, text))
		}
	}
	line(t.Columns)
	fmt.Fprintln(w, strings.Repeat("-", max(rowWidth(widths), 0)))
	for _, r := range t.Rows {
		line(r)
	}
}

// columnGroups splits t's columns into groups whose rows fit width once
// their text is wrapped (fit), each led by column 0; one group when the
// whole table fits. A group of the first column and one other that
// still does not fit stays as it is (its floors are wider than width).
func columnGroups(t *Table, width int) [][]int {
	all := make([]int, len(t.Columns))
	for i := range all {
		all[i] = i
	}
	fits := func(cols []int) bool {
		sub := project(t, cols)
		nat, text := layout(sub)
		return rowWidth(fit(sub, nat, text, width)) <= width
	}
	if fits(all) || len(all) < 3 {
		return [][]int{all}
	}
	var groups [][]int
	cur := []int{0}
	for _, i := range all[1:] {
		next := append(slices.Clone(cur), i)
		if len(cur) > 1 && !fits(next) {
			groups = append(groups, cur)
			next = []int{0, i}
		}
		cur = next
	}
	return append(groups, cur)
}

// project is t with only the columns cols, in that order.
func project(t *Table, cols []int) *Table {
	sub := &Table{Name: t.Name, Columns: make([]string, len(cols))}
	for j, i := range cols {
		sub.Columns[j] = t.Columns[i]
	}
	for _, r := range t.Rows {
		row := make([]string, len(cols))
		for j, i := range cols {
			row[j] = at(r, i)
		}
		sub.Rows = append(sub.Rows, row)
	}
	return sub
}

// fit returns the column widths that make a row at most width wide by
// narrowing the text columns, to the largest common cap that fits but
// none below its floor: minWrap, its header's longest word and its cells'
// longest word up to maxWord. Number columns keep their width (a number
// is never split). A table whose floors are wider than width stays wider
// (columnGroups then splits it).
func fit(t *Table, nat []int, text []bool, width int) []int {
	floor := make([]int, len(nat))
	for i, h := range t.Columns {
		floor[i] = max(longestWord(h), minWrap)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(nat) && text[i] {
				floor[i] = max(floor[i], min(longestWord(c), maxWord))
			}
		}
	}
	// capped is nat with the text columns capped at c, none below its floor.
	capped := func(c int) []int {
		widths := slices.Clone(nat)
		for i := range widths {
			if text[i] {
				widths[i] = min(widths[i], max(c, floor[i]))
			}
		}
		return widths
	}
	lo, hi := 0, slices.Max(nat) // a table here has a column at least
	for lo < hi {
		if mid := (lo + hi + 1) / 2; rowWidth(capped(mid)) <= width {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return capped(lo)
}

// wrap breaks s at spaces into lines of at most width runes; a word
// longer than width is cut.
func wrap(s string, width int) []string {
	if width <= 0 || runes(s) <= width {
		return []string{s}
	}
	var lines []string
	cur := ""
	for _, word := range words(s) {
		for runes(word) > width { // cut a word that fits no line
			if cur != "" {
				lines = append(lines, cur)
				cur = ""
			}
			r := []rune(word)
			lines = append(lines, string(r[:width]))
			word = string(r[width:])
		}
		switch {
		case cur == "":
			cur = word
		case runes(cur)+1+runes(word) <= width:
			cur += " " + word
		default:
			lines = append(lines, cur)
			cur = word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}

// layout gives each column's natural width (its widest cell or header)
// and whether it is text: the first column (the level) always, any other
// where a cell does not read as a number. Text is left-aligned, numbers
// right-aligned, on a terminal and in a file alike.
func layout(t *Table) (nat []int, text []bool) {
	n := len(t.Columns)
	nat, text = make([]int, n), make([]bool, n)
	for i, c := range t.Columns {
		nat[i] = runes(c)
		text[i] = i == 0
	}
	for _, r := range t.Rows {
		for i, c := range r[:min(len(r), n)] {
			nat[i] = max(nat[i], runes(c))
			text[i] = text[i] || !numeric(c)
		}
	}
	return nat, text
}

// numeric reports whether a cell reads as a number (right-aligned): it
// starts with a digit, after a sign, "~" or "±"; "-" and "" (no value)
// are numeric too, so they decide nothing.
func numeric(c string) bool {
	c = strings.TrimLeft(strings.TrimSpace(c), "~±+-−× ")
	switch strings.ToLower(c) {
	case "", "inf", "nan", "n/a":
		return true
	}
	r, _ := utf8.DecodeRuneInString(c)
	if r == '.' && len(c) > 1 {
		r, _ = utf8.DecodeRuneInString(c[1:])
	}
	return unicode.IsDigit(r)
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// words splits s at spaces for wrap, keeping "a / b" (a mean and its p95)
// one word.
func words(s string) []string {
	var out []string
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		if f[i] == "/" && len(out) > 0 && i+1 < len(f) {
			out[len(out)-1] += " / " + f[i+1]
			i++
			continue
		}
		out = append(out, f[i])
	}
	return out
}

func longestWord(s string) int {
	n := 0
	for _, w := range words(s) {
		n = max(n, runes(w))
	}
	return n
}
