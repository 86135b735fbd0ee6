package table

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Decode reads t's rows as values of the struct type T, so that a reader
// names the columns it needs once, in its row type, and never reads a
// cell by position: each field tagged `col:"name"` takes the column of
// that name (`col:"name,optional"`: the field stays zero where t has no
// such column). A field takes the cell's typed value (Values):
//   - string: a string; no value is ""; a row without typed values
//     gives its text
//   - Text: the cell as printed (Rows: "62 %" for a share, "-" for none)
//   - float64: a number (float64, float32, int, int64, json.Number); no
//     value is NaN
//   - int, int64: an integral number; bool: a bool; no value is zero
//   - a pointer to one of these: nil where there is no value
//   - any: the value as it is (a stage's record)
//
// A column T names that t lacks is an error naming the table, the column
// and the columns t has; a value of another kind is an error naming the
// row (1-based) and the column.
func Decode[T any](t *Table) ([]T, error) {
	typ := reflect.TypeFor[T]()
	type field struct {
		index, col int
		name       string
	}
	var fields []field
	for i := range typ.NumField() {
		tag, ok := typ.Field(i).Tag.Lookup("col")
		if !ok || !typ.Field(i).IsExported() {
			continue
		}
		name, opt, _ := strings.Cut(tag, ",")
		c := slices.Index(t.Columns, name)
		if c < 0 && opt != "optional" {
			return nil, fmt.Errorf("table %s has no column %q (its columns: %s)", t.Name, name, strings.Join(t.Columns, ", "))
		}
		if c >= 0 {
			fields = append(fields, field{i, c, name})
		}
	}
	out := make([]T, max(len(t.Rows), len(t.Values)))
	for r := range out {
		row := reflect.ValueOf(&out[r]).Elem()
		for _, f := range fields {
			var v any
			text := ""
			if r < len(t.Rows) && f.col < len(t.Rows[r]) {
				text = t.Rows[r][f.col]
			}
			if r < len(t.Values) && f.col < len(t.Values[r]) {
				v = t.Values[r][f.col]
			} else {
				v = text // no typed values: the text
			}
			if err := set(row.Field(f.index), v, text); err != nil {
				return nil, fmt.Errorf("table %s row %d, column %s: %w", t.Name, r+1, f.name, err)
			}
		}
	}
	return out, nil
}

// Text is a Decode field that takes a cell's text, as the tables print it.
type Text string

// set stores cell v (text: as printed) in field f (Decode's rules).
func set(f reflect.Value, v any, text string) error {
	if f.Kind() == reflect.Pointer {
		if v == nil {
			return nil
		}
		f.Set(reflect.New(f.Type().Elem()))
		f = f.Elem()
	}
	switch f.Kind() {
	case reflect.Interface:
		if v != nil {
			f.Set(reflect.ValueOf(v))
		}
		return nil
	case reflect.String:
		if f.Type() == reflect.TypeFor[Text]() {
			f.SetString(text)
			return nil
		}
		if x, ok := v.(string); ok || v == nil {
			f.SetString(x)
			return nil
		}
		return fmt.Errorf("%v is not a string", v)
	case reflect.Bool:
		if b, ok := v.(bool); ok || v == nil {
			f.SetBool(b)
			return nil
		}
		return fmt.Errorf("%v is not a bool", v)
	}
	x, ok := asFloat(v)
	switch f.Kind() {
	case reflect.Float64:
		if ok {
			f.SetFloat(x)
			return nil
		}
		return fmt.Errorf("%v is not a number", v)
	case reflect.Int, reflect.Int64:
		if v == nil {
			return nil
		}
		if ok && x == math.Trunc(x) {
			f.SetInt(int64(x))
			return nil
		}
		return fmt.Errorf("%v is not an integer", v)
	}
	return fmt.Errorf("a field of kind %s cannot hold a cell", f.Kind())
}

// asFloat reads a numeric cell; no value is NaN.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case nil:
		return math.NaN(), true
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}
