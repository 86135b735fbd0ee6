package columns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// Probe files (gpu.jsonl, sched.jsonl, cuda.jsonl) are JSON objects whose
// fields differ between probes, GPUs and versions: their tables take one
// column per field name that any row has (sorted by name), every column
// nullable, typed by what the rows hold: int64 when every value is an
// integer, double when some are not, boolean, string; a field whose rows
// disagree on its type, or hold arrays or objects, is JSON text.

type colType int

const (
	colNone colType = iota
	colInt
	colFloat
	colBool
	colString
	colJSON
)

// Rows is a probe file read for its table.
type Rows struct {
	Objects []map[string]value
	raw     [][]byte // keeps the bytes the values point into
}

// ReadRowsJSONL reads a probe file's objects.
func ReadRowsJSONL(path string) (*Rows, error) {
	parts, err := scanLines(path, func(int) *Rows { return &Rows{} }, func(p *Rows, b []byte, _ int) error {
		b = bytes.Clone(b)
		m := map[string]value{}
		if err := scanObject(b, func(k []byte, v value) error {
			m[string(k)] = v
			return nil
		}); err != nil {
			return err
		}
		p.Objects = append(p.Objects, m)
		p.raw = append(p.raw, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &Rows{}
	for _, p := range parts {
		out.Objects = append(out.Objects, p.Objects...)
		out.raw = append(out.raw, p.raw...)
	}
	return out, nil
}

func kindOf(v value) colType {
	switch v.kind {
	case 'n':
		if _, err := strconv.ParseInt(string(v.raw), 10, 64); err == nil {
			return colInt
		}
		return colFloat
	case 'b':
		return colBool
	case 's':
		return colString
	case 'z':
		return colNone
	}
	return colJSON
}

func merge(a, b colType) colType {
	switch {
	case a == colNone:
		return b
	case b == colNone || a == b:
		return a
	case a == colInt && b == colFloat || a == colFloat && b == colInt:
		return colFloat
	}
	return colJSON
}

// writeRowsTable writes rows as a table of inferred columns (see above).
func writeRowsTable(path string, rows *Rows, meta map[string]string) error {
	types := map[string]colType{}
	for _, o := range rows.Objects {
		for k, v := range o {
			types[k] = merge(types[k], kindOf(v))
		}
	}
	names := slices.Sorted(maps.Keys(types)) // parquet.Group orders its fields by name too
	group := parquet.Group{}
	for k, t := range types {
		var n parquet.Node
		switch t {
		case colInt:
			n = parquet.Int(64)
		case colFloat:
			n = parquet.Leaf(parquet.DoubleType)
		case colBool:
			n = parquet.Leaf(parquet.BooleanType)
		case colString:
			n = parquet.String()
		default: // colJSON, or a field that is null in every row
			n = parquet.JSON()
		}
		group[k] = parquet.Optional(n)
	}
	return writeTable(path, meta, len(rows.Objects), parquet.NewSchema("rows", group), func(w *parquet.GenericWriter[any], lo, hi int) error {
		batch := make([]parquet.Row, 0, 1024)
		for i, o := range rows.Objects[lo:hi] {
			row := make(parquet.Row, len(names))
			for c, k := range names {
				v, ok := o[k]
				if !ok || v.isNull() {
					row[c] = parquet.Value{}.Level(0, 0, c)
					continue
				}
				var pv parquet.Value
				switch types[k] {
				case colInt:
					x, _ := v.int64()
					pv = parquet.Int64Value(x)
				case colFloat:
					x, _ := v.float64()
					pv = parquet.DoubleValue(x)
				case colBool:
					x, _ := v.bool()
					pv = parquet.BooleanValue(x)
				case colString:
					s, err := v.str()
					if err != nil {
						return fmt.Errorf("field %q: %w", k, err)
					}
					pv = parquet.ByteArrayValue([]byte(s))
				default:
					pv = parquet.ByteArrayValue(jsonText(v))
				}
				row[c] = pv.Level(0, 1, c)
			}
			if batch = append(batch, row); len(batch) == cap(batch) || lo+i == hi-1 {
				if _, err := w.WriteRows(batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		return nil
	})
}

// jsonText is a value's JSON text.
func jsonText(v value) []byte {
	if v.kind == 's' {
		s, _ := v.str()
		b, _ := json.Marshal(s)
		return b
	}
	return v.raw
}
