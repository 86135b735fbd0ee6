package columns

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/asrprof/asrprof/model"
)

// requests.parquet is derived from model.RequestFields: a row per line of
// requests.jsonl, request_index (the line's position among the requests,
// from 0: what spans and events point at, and r.index in Starlark), then
// every field under its JSON name in the struct's order; a struct is
// flattened (errors: errors_sub, errors_del, errors_ins and
// errors_ref_words, null without scoring). Realtime-only fields are null
// for file requests; every other field keeps requests.jsonl's zero when it
// is absent there.

// requestLeaf is one column of requests.parquet: field f, or sub-field
// sub of struct field f.
type requestLeaf struct {
	name   string // the column's path: "errors_sub", "chunk_gaps_s.list.element"
	f, sub *model.Field
}

// requestLeaves are requests.parquet's columns after request_index.
var requestLeaves = func() []requestLeaf {
	var out []requestLeaf
	for i := range model.RequestFields {
		f := &model.RequestFields[i]
		switch f.Kind {
		case model.KindStruct:
			for k := range f.Sub {
				out = append(out, requestLeaf{f.Name + "_" + f.Sub[k].Name, f, &f.Sub[k]})
			}
		case model.KindFloats:
			out = append(out, requestLeaf{f.Name + ".list.element", f, nil})
		default:
			out = append(out, requestLeaf{f.Name, f, nil})
		}
	}
	return out
}()

// requestSchema is requests.parquet's schema: that of a struct made from
// requestLeaves (model's tag parquet:",dict" passed on).
var requestSchema = func() *parquet.Schema {
	fs := []reflect.StructField{{Name: "F", Type: reflect.TypeFor[int32](), Tag: `parquet:"request_index"`}}
	for _, l := range requestLeaves {
		name, _, _ := strings.Cut(l.name, ".")
		t, tag := l.f.Type, ""
		switch {
		case l.sub != nil:
			t, tag = reflect.TypeFor[*int32](), ",optional"
		case l.f.Kind == model.KindInt:
			t = reflect.TypeFor[int32]()
		case l.f.Kind == model.KindOptFloat:
			tag = ",optional"
		case l.f.Kind == model.KindFloats:
			tag = ",list"
		case l.f.Dict:
			tag = ",dict"
		}
		fs = append(fs, reflect.StructField{Name: fmt.Sprintf("F%d", len(fs)), Type: t, Tag: reflect.StructTag(fmt.Sprintf(`parquet:"%s%s"`, name, tag))})
	}
	return parquet.NewSchema("requestRow", parquet.SchemaOf(reflect.New(reflect.StructOf(fs)).Interface()))
}()

// field is field f of the record at p. T must be the Go type of f (the
// hot paths here read and set fields by offset: by reflection, writing
// and reading requests.parquet took twice as long); model derives f.Kind
// from that type, and the switches on f.Kind below pick T by it.
func field[T any](p unsafe.Pointer, f *model.Field) *T { return (*T)(unsafe.Add(p, f.Offset)) }

// ReadRequestsJSONL reads requests.jsonl on every core. Like every bundle
// reader it drops a truncated last line; a bad line is an error that
// names the file, the line and the field. The lines are counted first
// and each is decoded into its place in one slice (concatenating the
// chunks' records, ~400 bytes each, cost more than decoding them). Both
// passes read the file through a few reused chunk buffers: on this
// project's test machines, reading 58 MB into fresh memory and counting
// its lines took 0.26 s, more than decoding them on two cores (0.15 s).
func ReadRequestsJSONL(path string) ([]model.Request, error) {
	n, err := countLines(path)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]model.Request, n)
	used := make([]bool, n) // false: a blank line, or a dropped truncated one
	_, err = scanLines(path, func(int) struct{} { return struct{}{} }, func(_ struct{}, l []byte, no int) error {
		if no > n {
			return nil // written after the count: a capture still running
		}
		r, next := unsafe.Pointer(&out[no-1]), 0
		err := scanObject(l, func(k []byte, v value) error {
			f := fieldNamed(model.RequestFields, next, k)
			if f == nil {
				return nil
			}
			next = f.Index + 1
			return fieldErr(k, setField(r, f, v))
		})
		if err != nil {
			out[no-1] = model.Request{} // a truncated last line is dropped, not an error
			return err
		}
		used[no-1] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	k := 0
	for i := range out {
		if used[i] {
			if k != i {
				out[k] = out[i]
			}
			k++
		}
	}
	return out[:k:k], nil
}

// fieldNamed returns the field of fs named k, nil for none, looking from
// the i-th on: encoding/json writes them in order, so it is that one or
// one of the next (as fast as the hand-written switch on the name was).
func fieldNamed(fs []model.Field, i int, k []byte) *model.Field {
	if i < len(fs) && fs[i].Name == string(k) {
		return &fs[i]
	}
	for j := range fs {
		if f := &fs[(i+j)%len(fs)]; f.Name == string(k) {
			return f
		}
	}
	return nil
}

// setField sets field f of the record at p to v as encoding/json would
// (null leaves the zero; a struct's unknown names are ignored).
func setField(p unsafe.Pointer, f *model.Field, v value) (err error) {
	switch f.Kind {
	case model.KindString:
		*field[string](p, f), err = v.str()
	case model.KindInt:
		var x int64
		x, err = v.int64()
		*field[int](p, f) = int(x)
	case model.KindInt64:
		*field[int64](p, f), err = v.int64()
	case model.KindFloat:
		*field[float64](p, f), err = v.float64()
	case model.KindBool:
		*field[bool](p, f), err = v.bool()
	case model.KindOptFloat:
		x := field[*float64](p, f)
		if *x = nil; !v.isNull() {
			var y float64
			y, err = v.float64()
			*x = &y
		}
	case model.KindFloats:
		*field[[]float64](p, f), err = floats(v)
	case model.KindStruct:
		x := field[unsafe.Pointer](p, f)
		if *x = nil; v.isNull() {
			return nil
		}
		if v.kind != '{' {
			return fmt.Errorf("want an object, got %s", v.what())
		}
		e := reflect.New(f.Type.Elem()).UnsafePointer()
		*x = e
		return scanObject(v.raw, func(k []byte, v value) error {
			if s := fieldNamed(f.Sub, 0, k); s != nil {
				return fieldErr(k, setField(e, s, v))
			}
			return nil
		})
	}
	return err
}

// appendColumn appends column c's values (leaf l) of reqs. Those of a
// required column need no levels (they go to the column's own writer,
// and Value.Level cost a fifth of the writing).
func appendColumn(vals []parquet.Value, reqs []model.Request, l *requestLeaf, c int) []parquet.Value {
	null := parquet.Value{}.Level(0, 0, c)
	switch l.f.Kind {
	case model.KindString: // the writer copies the bytes: no copy of its own
		return values(vals, reqs, l.f, func(s string) parquet.Value {
			return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
		})
	case model.KindInt:
		return values(vals, reqs, l.f, func(x int) parquet.Value { return parquet.Int32Value(int32(x)) })
	case model.KindInt64:
		return values(vals, reqs, l.f, parquet.Int64Value)
	case model.KindFloat:
		return values(vals, reqs, l.f, parquet.DoubleValue)
	case model.KindBool:
		return values(vals, reqs, l.f, parquet.BooleanValue)
	case model.KindOptFloat:
		return values(vals, reqs, l.f, func(x *float64) parquet.Value {
			if x == nil {
				return null
			}
			return parquet.DoubleValue(*x).Level(0, 1, c)
		})
	case model.KindStruct:
		return values(vals, reqs, l.f, func(e unsafe.Pointer) parquet.Value {
			if e == nil {
				return null
			}
			return parquet.Int32Value(int32(*field[int](e, l.sub))).Level(0, 1, c)
		})
	}
	for i := range reqs { // model.KindFloats
		xs := *field[[]float64](unsafe.Pointer(&reqs[i]), l.f)
		for j, x := range xs {
			vals = append(vals, parquet.DoubleValue(x).Level(min(j, 1), 1, c))
		}
		if len(xs) == 0 {
			vals = append(vals, null) // an empty list
		}
	}
	return vals
}

// values appends value(x) for field f (a T) of every request of reqs.
func values[T any](vals []parquet.Value, reqs []model.Request, f *model.Field, value func(T) parquet.Value) []parquet.Value {
	for i := range reqs {
		vals = append(vals, value(*field[T](unsafe.Pointer(&reqs[i]), f)))
	}
	return vals
}

// setter sets field f (a T) of rs, the requests from row lo on, to
// value(row).
func setter[T any](f *model.Field, value func(row int) T) func(rs []model.Request, lo int) {
	return func(rs []model.Request, lo int) {
		for i := range rs {
			*field[T](unsafe.Pointer(&rs[i]), f) = value(lo + i)
		}
	}
}

// writeRequests writes requests.parquet, column by column, straight to the
// columns' writers (a part of writeTable is at most one row group).
func writeRequests(path string, reqs []model.Request, meta map[string]string) error {
	return writeTable(path, meta, len(reqs), requestSchema, func(w *parquet.GenericWriter[any], lo, hi int) error {
		cw := w.ColumnWriters()
		const batch = 4096
		vals := make([]parquet.Value, 0, batch)
		for i := lo; i < hi; i += batch {
			j := min(hi, i+batch)
			for c := range len(requestLeaves) + 1 {
				if c == 0 {
					for k := i; k < j; k++ {
						vals = append(vals, parquet.Int32Value(int32(k)))
					}
				} else {
					vals = appendColumn(vals, reqs[i:j], &requestLeaves[c-1], c)
				}
				if _, err := cw[c].WriteRowValues(vals); err != nil {
					return err
				}
				vals = vals[:0]
			}
		}
		return nil
	})
}

// ReadRequests reads requests.parquet back into the records of
// requests.jsonl, in their order, column by column (a row reader took
// 2.5 µs a request).
func ReadRequests(path string) ([]model.Request, error) {
	var names []string
	plain := map[string]bool{} // strings of many values: ids, texts
	for _, l := range requestLeaves {
		names = append(names, l.name)
		plain[l.name] = l.f.Kind == model.KindString && !l.f.Dict
	}
	cols, err := readColumns(path, names, plain)
	if err != nil {
		return nil, err
	}
	n := cols[0].n
	for _, col := range cols {
		if col.n != n {
			return nil, fmt.Errorf("%s: column %s has %d rows, %s %d", path, col.name, col.n, cols[0].name, n)
		}
	}
	sets := make([]func(rs []model.Request, lo int), len(cols))
	for c, col := range cols {
		l := &requestLeaves[c]
		switch l.f.Kind {
		case model.KindString:
			sets[c] = setter(l.f, col.str.At)
		case model.KindInt:
			x := col.int32s(0)
			sets[c] = setter(l.f, func(i int) int { return int(x[i]) })
		case model.KindInt64:
			x := col.int64s()
			sets[c] = setter(l.f, func(i int) int64 { return x[i] })
		case model.KindFloat:
			x := col.f64
			sets[c] = setter(l.f, func(i int) float64 { return x[i] })
		case model.KindBool:
			x := col.b
			sets[c] = setter(l.f, func(i int) bool { return x[i] })
		case model.KindOptFloat:
			x, ok := col.f64, col.valid
			sets[c] = setter(l.f, func(i int) *float64 {
				if ok != nil && !ok[i] {
					return nil
				}
				return &x[i]
			})
		case model.KindFloats:
			sets[c] = setter(l.f, func(i int) []float64 {
				if i < len(col.lists) && len(col.lists[i]) > 0 {
					return col.lists[i]
				}
				return nil
			})
		case model.KindStruct: // made by the first of its columns, filled by each
			x := col.int32s(0)
			sets[c] = func(rs []model.Request, lo int) {
				for i := range rs {
					e := field[unsafe.Pointer](unsafe.Pointer(&rs[i]), l.f)
					if col.valid == nil || col.valid[lo+i] {
						if *e == nil {
							*e = reflect.New(l.f.Type.Elem()).UnsafePointer()
						}
						*field[int](*e, l.sub) = int(x[lo+i])
					}
				}
			}
		}
	}
	// Every column for a block of rows at a time: the block's records stay
	// in the cache (a column at a time over all of them took 35 % longer).
	out := make([]model.Request, n)
	for lo := 0; lo < n; lo += 256 {
		for _, set := range sets {
			set(out[lo:min(n, lo+256)], lo)
		}
	}
	return out, nil
}
