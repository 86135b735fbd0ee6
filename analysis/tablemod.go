package analysis

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/table"
)

// Column types of the table module.
const (
	colAny   = "any"
	colStr   = "str"
	colInt   = "int"
	colFloat = "float"
)

type column struct {
	name, typ, format string
}

// tableValue is a table built by a script: typed columns, rows of values,
// notes. It renders through table.
type tableValue struct {
	name, title string
	cols        []column
	rows        [][]starlark.Value
	notes       []string
	frozen      bool
}

var _ starlark.HasAttrs = (*tableValue)(nil)

func (t *tableValue) String() string        { return fmt.Sprintf("<table %s: %d rows>", t.name, len(t.rows)) }
func (t *tableValue) Type() string          { return "table" }
func (t *tableValue) Freeze()               { t.frozen = true }
func (t *tableValue) Truth() starlark.Bool  { return true }
func (t *tableValue) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: table") }
func (t *tableValue) Len() int              { return len(t.rows) }

// cell is a value with its own display text: table.cell(value, text).
type cell struct {
	v    starlark.Value
	text string
}

func (c *cell) String() string        { return c.text }
func (c *cell) Type() string          { return "cell" }
func (c *cell) Freeze()               { c.v.Freeze() }
func (c *cell) Truth() starlark.Bool  { return c.v.Truth() }
func (c *cell) Hash() (uint32, error) { return c.v.Hash() }
func (c *cell) Attr(name string) (starlark.Value, error) {
	switch name {
	case "value":
		return c.v, nil
	case "text":
		return starlark.String(c.text), nil
	}
	return nil, nil
}
func (c *cell) AttrNames() []string { return []string{"text", "value"} }

func tableModule() *starlarkstruct.Module {
	return newModule("table", "table.", map[string]builtinFunc{
		"new": newTable, "message": newMessage, "cell": newCell, "sprintf": sprintf,
		"level_label": oneString(func(lv string) (starlark.Value, error) {
			return starlark.String(model.LevelLabel(lv)), nil
		}),
		// parse_level("c8") -> ("c", 8); ("r", 2.5); None for any other name
		// (model.ParseLevel, the one parser of level names).
		"parse_level": oneString(func(lv string) (starlark.Value, error) {
			c, r, ok := model.ParseLevel(lv)
			switch {
			case !ok:
				return starlark.None, nil
			case lv[0] == 'c':
				return starlark.Tuple{starlark.String("c"), starlark.MakeInt(c)}, nil
			}
			return starlark.Tuple{starlark.String("r"), starlark.Float(r)}, nil
		}),
	}, nil)
}

// newMessage: table.message(name, text) is a table without columns, which
// prints as its text and its notes alone (add_note) and adds no rows.
func newMessage(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name, text string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name, "text", &text); err != nil {
		return nil, err
	}
	return &tableValue{name: name, title: text}, nil
}

// newTable: table.new(name, columns, title="") where a column is "name" or
// ("name", type) or ("name", type, format); types are any, str, int, float;
// format is a Go fmt verb for numbers, e.g. "%.1f".
func newTable(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name, title string
	var colsV starlark.Iterable
	if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name, "columns", &colsV, "title?", &title); err != nil {
		return nil, err
	}
	t := &tableValue{name: name, title: title}
	for c := range starlark.Elements(colsV) {
		col := column{typ: colAny}
		switch x := c.(type) {
		case starlark.String:
			col.name = string(x)
		case starlark.Tuple:
			if len(x) < 1 || len(x) > 3 {
				return nil, fmt.Errorf("%s: column %s: want (name, type[, format])", b.Name(), x)
			}
			for i, dst := range []*string{&col.name, &col.typ, &col.format}[:len(x)] {
				s, ok := starlark.AsString(x[i])
				if !ok {
					return nil, fmt.Errorf("%s: column %s: element %d is not a string", b.Name(), x, i)
				}
				*dst = s
			}
		default:
			return nil, fmt.Errorf("%s: column is %s, want a string or a tuple", b.Name(), c.Type())
		}
		if !slices.Contains([]string{colAny, colStr, colInt, colFloat}, col.typ) {
			return nil, fmt.Errorf("%s: column %q: unknown type %q (want any, str, int or float)", b.Name(), col.name, col.typ)
		}
		t.cols = append(t.cols, col)
	}
	if len(t.cols) == 0 {
		return nil, fmt.Errorf("%s: a table needs at least one column", b.Name())
	}
	return t, nil
}

func newCell(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	var text string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "value", &v, "text", &text); err != nil {
		return nil, err
	}
	return &cell{v: v, text: text}, nil
}

var tableAttrs = []string{"add_note", "add_row", "column", "columns", "group_by", "name", "notes", "render", "rows", "sort", "title"}

func (t *tableValue) AttrNames() []string { return tableAttrs }

func (t *tableValue) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(t.name), nil
	case "title":
		return starlark.String(t.title), nil
	case "columns":
		return starlark.NewList(valuesOf(t.cols, func(c column) starlark.Value { return starlark.String(c.name) })), nil
	case "notes":
		return stringList(t.notes), nil
	case "rows":
		return starlark.NewList(valuesOf(t.rows, func(r []starlark.Value) starlark.Value {
			return starlark.NewList(append([]starlark.Value(nil), r...))
		})), nil
	case "add_row":
		return starlark.NewBuiltin("add_row", t.addRow), nil
	case "add_note":
		return starlark.NewBuiltin("add_note", oneString(func(s string) (starlark.Value, error) {
			if t.frozen {
				return nil, fmt.Errorf("add_note: table %s is frozen", t.name)
			}
			t.notes = append(t.notes, s)
			return starlark.None, nil
		})), nil
	case "column":
		return starlark.NewBuiltin("column", oneString(func(c string) (starlark.Value, error) {
			k, err := t.colIndex(c)
			if err != nil {
				return nil, err
			}
			return starlark.NewList(valuesOf(t.rows, func(r []starlark.Value) starlark.Value { return plain(r[k]) })), nil
		})), nil
	case "sort":
		return starlark.NewBuiltin("sort", t.sort), nil
	case "group_by":
		return starlark.NewBuiltin("group_by", oneString(t.groupBy)), nil
	case "render":
		return starlark.NewBuiltin("render", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			format := "text"
			if err := starlark.UnpackArgs(b.Name(), args, kw, "format?", &format); err != nil {
				return nil, err
			}
			var buf bytes.Buffer
			if err := table.Render(&buf, format, t.toTable()); err != nil {
				return nil, err
			}
			return starlark.String(buf.String()), nil
		}), nil
	}
	return nil, nil
}

// plain unwraps a cell to its value.
func plain(v starlark.Value) starlark.Value {
	if c, ok := v.(*cell); ok {
		return c.v
	}
	return v
}

func (t *tableValue) colIndex(name string) (int, error) {
	if i := slices.IndexFunc(t.cols, func(c column) bool { return c.name == name }); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("table %s has no column %q", t.name, name)
}

// addRow: t.add_row(v1, v2, ...) or t.add_row([v1, v2, ...]).
func (t *tableValue) addRow(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(kw) > 0 {
		return nil, fmt.Errorf("%s: unexpected keyword arguments", b.Name())
	}
	if t.frozen {
		return nil, fmt.Errorf("%s: table %s is frozen", b.Name(), t.name)
	}
	if len(t.cols) == 0 {
		return nil, fmt.Errorf("%s: %s is a message (table.message): it has no rows", b.Name(), t.name)
	}
	vals := []starlark.Value(args)
	if len(args) == 1 && len(t.cols) > 1 {
		if ix, ok := args[0].(starlark.Indexable); ok {
			if _, isStr := args[0].(starlark.String); !isStr {
				vals = make([]starlark.Value, ix.Len())
				for i := range vals {
					vals[i] = ix.Index(i)
				}
			}
		}
	}
	if len(vals) != len(t.cols) {
		return nil, fmt.Errorf("%s: table %s has %d columns, got %d values", b.Name(), t.name, len(t.cols), len(vals))
	}
	row := make([]starlark.Value, len(vals))
	for i, v := range vals {
		pv := plain(v)
		ok := true
		switch t.cols[i].typ {
		case colStr:
			_, ok = pv.(starlark.String)
		case colInt:
			_, ok = pv.(starlark.Int)
		case colFloat:
			switch n := pv.(type) {
			case starlark.Int:
				f, _ := starlark.AsFloat(n)
				if c, isCell := v.(*cell); isCell {
					v = &cell{v: starlark.Float(f), text: c.text}
				} else {
					v = starlark.Float(f)
				}
			case starlark.Float:
			default:
				ok = false
			}
		}
		if pv == starlark.None {
			ok = true
		}
		if !ok {
			return nil, fmt.Errorf("%s: column %q is %s, got %s %s", b.Name(), t.cols[i].name, t.cols[i].typ, pv.Type(), pv)
		}
		row[i] = v
	}
	t.rows = append(t.rows, row)
	return starlark.None, nil
}

// sort(column, reverse=False) sorts the rows in place (stable; None last)
// and returns the table.
func (t *tableValue) sort(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var col string
	reverse := false
	if err := starlark.UnpackArgs(b.Name(), args, kw, "column", &col, "reverse?", &reverse); err != nil {
		return nil, err
	}
	if t.frozen {
		return nil, fmt.Errorf("%s: table %s is frozen", b.Name(), t.name)
	}
	k, err := t.colIndex(col)
	if err != nil {
		return nil, err
	}
	var cmpErr error
	op := syntax.LT
	if reverse {
		op = syntax.GT
	}
	sort.SliceStable(t.rows, func(i, j int) bool {
		a, c := plain(t.rows[i][k]), plain(t.rows[j][k])
		if a == starlark.None || c == starlark.None {
			return a != starlark.None && c == starlark.None
		}
		less, err := starlark.Compare(op, a, c)
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		return less
	})
	if cmpErr != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), cmpErr)
	}
	return t, nil
}

// group_by(column) returns [(key, table), ...] in order of first appearance.
func (t *tableValue) groupBy(col string) (starlark.Value, error) {
	k, err := t.colIndex(col)
	if err != nil {
		return nil, err
	}
	var out []starlark.Value
	groups := map[string]*tableValue{}
	for _, r := range t.rows {
		key := plain(r[k])
		id := key.Type() + ":" + key.String()
		g, ok := groups[id]
		if !ok {
			g = &tableValue{name: t.name, title: t.title, cols: t.cols}
			groups[id] = g
			out = append(out, starlark.Tuple{key, g})
		}
		g.rows = append(g.rows, r)
	}
	return starlark.NewList(out), nil
}

// toTable converts t for rendering: typed values for JSON, formatted text.
func (t *tableValue) toTable() *table.Table {
	out := &table.Table{Name: t.name, Title: t.title, Notes: t.notes, Columns: valuesOf(t.cols, func(c column) string { return c.name })}
	out.Rows = make([][]string, 0, len(t.rows))
	out.Values = make([][]any, 0, len(t.rows))
	for _, r := range t.rows {
		texts := make([]string, len(r))
		vals := make([]any, len(r))
		for i, v := range r {
			vals[i] = fromValue(v)
			switch c, ok := v.(*cell); {
			case ok:
				texts[i] = c.text
			case t.cols[i].format != "" && vals[i] != nil:
				texts[i] = fmt.Sprintf(t.cols[i].format, vals[i])
			default:
				texts[i] = table.Format(vals[i])
			}
		}
		out.Rows = append(out.Rows, texts)
		out.Values = append(out.Values, vals)
	}
	return out
}

// sprintf(format, *args) formats with Go's fmt verbs ("%.2f", "%5d",
// "%s"), which Starlark's % operator lacks (no precision).
func sprintf(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) < 1 || len(kw) > 0 {
		return nil, fmt.Errorf("%s: want (format, *args)", b.Name())
	}
	f, ok := starlark.AsString(args[0])
	if !ok {
		return nil, fmt.Errorf("%s: format is %s, want a string", b.Name(), args[0].Type())
	}
	vals := valuesOf(args[1:], func(a starlark.Value) any {
		if a == starlark.None {
			return "-"
		}
		return fromValue(a)
	})
	return starlark.String(fmt.Sprintf(f, convertArgs(f, vals)...)), nil
}

// convertArgs makes vals fit the verbs of format f: a Starlark int given
// to a float verb (%f, %g, %e) becomes a float, an integral float given
// to %d an int, so that a number's Starlark type never prints as
// "%!f(int64=3)".
func convertArgs(f string, vals []any) []any {
	i := 0
	for j := 0; j < len(f) && i < len(vals); j++ {
		if f[j] != '%' {
			continue
		}
		j++
		for j < len(f) && strings.IndexByte("+-# 0123456789.*", f[j]) >= 0 {
			if f[j] == '*' { // a width or precision taken from the arguments
				i++
			}
			j++
		}
		if j >= len(f) || f[j] == '%' || i >= len(vals) {
			continue
		}
		switch v := vals[i].(type) {
		case int64:
			if strings.IndexByte("eEfFgG", f[j]) >= 0 {
				vals[i] = float64(v)
			}
		case float64:
			if f[j] == 'd' && v == float64(int64(v)) {
				vals[i] = int64(v)
			}
		}
		i++
	}
	return vals
}

// Index returns row i as a list of plain values (len(t) and t[i] work).
func (t *tableValue) Index(i int) starlark.Value {
	return starlark.NewList(valuesOf(t.rows[i], plain))
}
