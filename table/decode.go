package table

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Text is a Decode field that takes a cell's text, as the tables print it
// ("62 %" for a share, "-" for none).
type Text string

// Decode reads t's rows as values of the struct type T, so that a reader
// names the columns it reads once, in its row type, and never reads a cell
// by position. A field tagged `col:"name"` takes the typed value (Values)
// of the column so named (`col:"name|other"`: of either, for tables that
// name one column two ways); `col:"name,optional"` stays zero where t has
// no such column. A string takes a string (no value: ""; a row without typed
// values: its text), Text the text, float64 a number (no value: NaN), int
// and int64 an integral number, bool a bool, a pointer to one of these its
// value or nil. A column that t lacks is an error naming the table, the
// column and the columns t has; a value of another kind, an error naming
// the row (1-based) and the column.
func Decode[T any](t *Table) ([]T, error) {
	typ := reflect.TypeFor[T]()
	var fields, cols []int
	for i := range typ.NumField() {
		tag, ok := typ.Field(i).Tag.Lookup("col")
		name, opt, _ := strings.Cut(tag, ",")
		c := slices.IndexFunc(t.Columns, func(c string) bool { return slices.Contains(strings.Split(name, "|"), c) })
		if ok && c < 0 && opt != "optional" {
			return nil, fmt.Errorf("table %s has no column %q (its columns: %s)", t.Name, name, strings.Join(t.Columns, ", "))
		}
		if ok && c >= 0 && typ.Field(i).IsExported() {
			fields, cols = append(fields, i), append(cols, c)
		}
	}
	out := make([]T, max(len(t.Rows), len(t.Values)))
	for r := range out {
		row := reflect.ValueOf(&out[r]).Elem()
		for k, c := range cols {
			text := at(at(t.Rows, r), c)
			var v any = text // no typed values: the text
			if r < len(t.Values) && c < len(t.Values[r]) {
				v = t.Values[r][c]
			}
			if err := set(row.Field(fields[k]), v, text); err != nil {
				return nil, fmt.Errorf("table %s row %d, column %s: %w", t.Name, r+1, t.Columns[c], err)
			}
		}
	}
	return out, nil
}

// set stores cell v, printed as text, in field f (Decode's rules).
func set(f reflect.Value, v any, text string) error {
	if f.Kind() == reflect.Pointer {
		if v == nil {
			return nil
		}
		f.Set(reflect.New(f.Type().Elem()))
		f = f.Elem()
	}
	x, isNum := Number(v)
	switch {
	case f.Type() == reflect.TypeFor[Text]():
		f.SetString(text)
	case v == nil && f.Kind() != reflect.Float64:
	case f.Kind() == reflect.String:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%v is not a string", v)
		}
		f.SetString(s)
	case f.Kind() == reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%v is not a bool", v)
		}
		f.SetBool(b)
	case f.Kind() == reflect.Float64 && isNum:
		f.SetFloat(x)
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		if rv := reflect.ValueOf(v); rv.CanInt() {
			f.SetInt(rv.Int()) // whole: a float64 holds 53 bits
		} else if isNum && x == math.Trunc(x) {
			f.SetInt(int64(x))
		} else {
			return fmt.Errorf("%v is not an integer", v)
		}
	default:
		return fmt.Errorf("%v is not a number", v)
	}
	return nil
}

// Number reads a raw cell value (Values) as a number: any float or integer
// kind, or a json.Number; no value (nil) is NaN. ok is false for a value
// of another kind.
func Number(v any) (x float64, ok bool) {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		return f, err == nil
	}
	switch rv := reflect.ValueOf(v); {
	case v == nil:
		return math.NaN(), true
	case rv.CanFloat():
		return rv.Float(), true
	case rv.CanInt():
		return float64(rv.Int()), true
	}
	return 0, false
}
