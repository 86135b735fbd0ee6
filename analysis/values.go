package analysis

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/spans"
)

// listView is a read-only, Go-backed Starlark sequence: elements are made
// on access, nothing is copied up front.
type listView struct {
	typ string
	n   int
	at  func(i int) starlark.Value
}

var (
	_ starlark.Sliceable = (*listView)(nil)
	_ starlark.Sequence  = (*listView)(nil)
)

func (l *listView) String() string        { return fmt.Sprintf("<%s of %d>", l.typ, l.n) }
func (l *listView) Type() string          { return l.typ }
func (l *listView) Freeze()               {}
func (l *listView) Truth() starlark.Bool  { return l.n > 0 }
func (l *listView) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: %s", l.typ) }
func (l *listView) Len() int              { return l.n }
func (l *listView) Index(i int) starlark.Value {
	return l.at(i)
}
func (l *listView) Iterate() starlark.Iterator { return &viewIter{l: l} }
func (l *listView) Slice(start, end, step int) starlark.Value {
	var out []starlark.Value
	for i := start; step > 0 && i < end || step < 0 && i > end; i += step {
		out = append(out, l.at(i))
	}
	return starlark.NewList(out)
}

type viewIter struct {
	l *listView
	i int
}

func (it *viewIter) Next(p *starlark.Value) bool {
	if it.i >= it.l.n {
		return false
	}
	*p = it.l.at(it.i)
	it.i++
	return true
}
func (it *viewIter) Done() {}

// mapView is a read-only Starlark mapping over a Go map (span attributes,
// event metadata, probe rows). Fields are also readable as attributes
// (row.cpu_s) when their names are identifiers; get, keys, items and values
// work as on a dict.
type mapView struct {
	typ string
	m   map[string]any
}

var (
	_ starlark.IterableMapping = (*mapView)(nil)
	_ starlark.HasAttrs        = (*mapView)(nil)
)

func (v *mapView) String() string {
	b, _ := json.Marshal(v.m)
	return string(b)
}
func (v *mapView) Type() string          { return v.typ }
func (v *mapView) Freeze()               {}
func (v *mapView) Truth() starlark.Bool  { return len(v.m) > 0 }
func (v *mapView) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: %s", v.typ) }
func (v *mapView) Len() int              { return len(v.m) }
func (v *mapView) Get(k starlark.Value) (starlark.Value, bool, error) {
	s, ok := k.(starlark.String)
	if !ok {
		return nil, false, nil
	}
	x, ok := v.m[string(s)]
	if !ok {
		return nil, false, nil
	}
	return toValue(x), true, nil
}
func (v *mapView) keys() []string             { return slices.Sorted(maps.Keys(v.m)) }
func (v *mapView) Iterate() starlark.Iterator { return stringList(v.keys()).Iterate() }
func (v *mapView) Items() []starlark.Tuple {
	return valuesOf(v.keys(), func(k string) starlark.Tuple { return starlark.Tuple{starlark.String(k), toValue(v.m[k])} })
}
func (v *mapView) AttrNames() []string {
	return append([]string{"get", "items", "keys", "values"}, v.keys()...)
}
func (v *mapView) Attr(name string) (starlark.Value, error) {
	if name == "get" { // its key a string, as span.attr's
		return starlark.NewBuiltin("get", getFn(v.m)), nil
	}
	if m := dictMethod(v, name); m != nil {
		return m, nil
	}
	if x, ok := v.m[name]; ok {
		return toValue(x), nil
	}
	return nil, nil
}

// dictMethod is m's get, keys, items or values as on a dict, made of its
// Get and Items (keys, items and values: a new list, in Items' order);
// nil for another name.
func dictMethod(m starlark.IterableMapping, name string) starlark.Value {
	if name == "get" {
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var k, d starlark.Value = nil, starlark.None
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &k, &d); err != nil {
				return nil, err
			}
			if x, ok, _ := m.Get(k); ok {
				return x, nil
			}
			return d, nil
		})
	}
	f := map[string]func(starlark.Tuple) starlark.Value{
		"keys":   func(t starlark.Tuple) starlark.Value { return t[0] },
		"items":  func(t starlark.Tuple) starlark.Value { return t },
		"values": func(t starlark.Tuple) starlark.Value { return t[1] },
	}[name]
	if f == nil {
		return nil
	}
	return starlark.NewBuiltin(name, func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return starlark.NewList(valuesOf(m.Items(), f)), nil
	})
}

// toValue converts a decoded JSON or OTLP attribute value to Starlark.
func toValue(x any) starlark.Value {
	switch v := x.(type) {
	case nil:
		return starlark.None
	case bool:
		return starlark.Bool(v)
	case string:
		return starlark.String(v)
	case int:
		return starlark.MakeInt(v)
	case int64:
		return starlark.MakeInt64(v)
	case uint64:
		return starlark.MakeUint64(v)
	case float64:
		return starlark.Float(v)
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return starlark.MakeInt64(i)
		}
		f, _ := v.Float64()
		return starlark.Float(f)
	case []byte:
		return starlark.Bytes(v)
	case []any:
		return frozenList(v, toValue)
	case map[string]any:
		d := starlark.NewDict(len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			d.SetKey(starlark.String(k), toValue(v[k]))
		}
		d.Freeze()
		return d
	case []float64:
		return frozenList(v, func(e float64) starlark.Value { return starlark.Float(e) })
	}
	// Anything else goes through JSON.
	v, err := jsonValue(x)
	if err != nil {
		return starlark.String(fmt.Sprint(x))
	}
	return v
}

// fromValue converts a Starlark value to Go for table cells and JSON.
func fromValue(v starlark.Value) any {
	switch x := v.(type) {
	case starlark.NoneType:
		return nil
	case starlark.Bool:
		return bool(x)
	case starlark.String:
		return string(x)
	case starlark.Int:
		if i, ok := x.Int64(); ok {
			return i
		}
		f, _ := starlark.AsFloat(x)
		return f
	case starlark.Float:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case *starlark.Dict:
		m := map[string]any{}
		for _, it := range x.Items() {
			k, ok := starlark.AsString(it[0])
			if !ok {
				k = it[0].String()
			}
			m[k] = fromValue(it[1])
		}
		return m
	case starlark.Indexable:
		out := make([]any, x.Len())
		for i := range out {
			out[i] = fromValue(x.Index(i))
		}
		return out
	case *cell:
		return fromValue(x.v)
	}
	return v.String()
}

// attrTable is a Starlark value's attributes: name → accessor. A value's
// AttrNames are the table's names, sorted (names), so the two cannot
// disagree.
type attrTable[V any] map[string]func(V) (starlark.Value, error)

func (t attrTable[V]) names() []string {
	return slices.Sorted(maps.Keys(t))
}

// attr looks name up in t: (nil, nil) for an unknown name, as HasAttrs
// wants.
func (t attrTable[V]) attr(v V, name string) (starlark.Value, error) {
	if f, ok := t[name]; ok {
		return f(v)
	}
	return nil, nil
}

// identity implements == and != by identity for the values whose
// CompareSameType uses it; other comparisons are errors.
func identity(op syntax.Token, x, y starlark.Value, same bool) (bool, error) {
	switch op {
	case syntax.EQL:
		return same, nil
	case syntax.NEQ:
		return !same, nil
	}
	return false, fmt.Errorf("%s %s %s not supported", x.Type(), op, y.Type())
}

// captureValue is the `capture` a script sees.
type captureValue struct {
	c *Capture
}

var _ starlark.HasAttrs = (*captureValue)(nil)

func (v *captureValue) String() string        { return fmt.Sprintf("<capture %s>", filepath.Base(v.c.Dir)) }
func (v *captureValue) Type() string          { return "capture" }
func (v *captureValue) Freeze()               {}
func (v *captureValue) Truth() starlark.Bool  { return true }
func (v *captureValue) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: capture") }

func (v *captureValue) AttrNames() []string { return captureAttrs.names() }
func (v *captureValue) Attr(name string) (starlark.Value, error) {
	return captureAttrs.attr(v, name)
}

var captureAttrs = attrTable[*captureValue]{
	"dir":  func(v *captureValue) (starlark.Value, error) { return starlark.String(v.c.Dir), nil },
	"name": func(v *captureValue) (starlark.Value, error) { return starlark.String(filepath.Base(v.c.Dir)), nil },
	"requests": func(v *captureValue) (starlark.Value, error) {
		c := v.c
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		return &listView{typ: "requests", n: len(reqs), at: func(i int) starlark.Value {
			return &requestValue{c: c, i: i}
		}}, nil
	},
	"levels": func(v *captureValue) (starlark.Value, error) {
		return frozenList(v.c.Bundle.Manifest.Levels, func(l model.LevelRun) starlark.Value {
			return goStruct("pass", l, starlark.StringDict{"wall_s": starlark.Float(cmp.Or(l.WallS, float64(l.EndUnixNs-l.StartUnixNs)/1e9))})
		}), nil
	},
	"passes":   captured((*Capture).Passes, passesValue),
	"manifest": func(v *captureValue) (starlark.Value, error) { return toValue(v.c.Bundle.Manifest), nil },
	"results":  func(v *captureValue) (starlark.Value, error) { return toValue(v.c.Results), nil },
	"files":    captured(func(c *Capture) ([]string, error) { return c.Bundle.Files() }, stringList),
	"gpu":      probeRows("gpu", bundle.GPUFile),
	"sched":    probeRows("sched", bundle.SchedFile),
	"cuda":     probeRows("cuda", bundle.CUDAFile),
	// Realtime sessions' update lags over session time (realtime_lags.jsonl).
	"realtime_lags": probeRows("realtime_lags", bundle.RealtimeLagsFile),
	"cpu_profiles": func(v *captureValue) (starlark.Value, error) {
		ps, err := v.c.profiles()
		if err != nil {
			return nil, err
		}
		return jsonValue(ps)
	},
	// From the tables, without the join.
	"span_names":  func(v *captureValue) (starlark.Value, error) { return stringList(v.c.Tables.SpanNames()), nil },
	"event_names": func(v *captureValue) (starlark.Value, error) { return stringList(v.c.Tables.EventNames()), nil },
	"spans_count": func(v *captureValue) (starlark.Value, error) {
		return starlark.MakeInt(v.c.Tables.Rows(columns.SpansTable)), nil
	},
	"events_count": func(v *captureValue) (starlark.Value, error) {
		return starlark.MakeInt(v.c.Tables.Rows(columns.EventsTable)), nil
	},
	"request_levels": captured((*Capture).RequestLevels, stringList),
	"join_stats":     captured((*Capture).join, func(ix *join.Index) starlark.Value { return toValue(ix.Stats()) }),
	// Capacity (docs/CAPACITY.md): asrprof sensitivity's result, and the
	// --find-max search's path and answer.
	"sensitivity": sensitivityValue,
	"search":      searchValue,
}

// probeRows is capture.gpu, .sched, .cuda: the rows of a probe file.
func probeRows(name, file string) func(*captureValue) (starlark.Value, error) {
	return func(v *captureValue) (starlark.Value, error) {
		rows, err := v.c.Rows(file)
		if err != nil {
			return nil, err
		}
		return &listView{typ: name + "_rows", n: len(rows), at: func(i int) starlark.Value {
			return &mapView{typ: name + "_row", m: rows[i]}
		}}, nil
	}
}

// captured is an attribute of the capture: conv of what get reads.
func captured[T any, V starlark.Value](get func(*Capture) (T, error), conv func(T) V) func(*captureValue) (starlark.Value, error) {
	return func(v *captureValue) (starlark.Value, error) {
		x, err := get(v.c)
		if err != nil {
			return nil, err
		}
		return conv(x), nil
	}
}

// valuesOf is f of each of xs.
func valuesOf[T, V any](xs []T, f func(T) V) []V {
	out := make([]V, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// frozenList is a frozen list of f of each of xs.
func frozenList[T any](xs []T, f func(T) starlark.Value) *starlark.List {
	l := starlark.NewList(valuesOf(xs, f))
	l.Freeze()
	return l
}

func stringList(ss []string) *starlark.List {
	return frozenList(ss, func(s string) starlark.Value { return starlark.String(s) })
}

// noneUnless is v when ok, else None (a value the capture lacks).
func noneUnless(ok bool, v starlark.Value) starlark.Value {
	if !ok {
		return starlark.None
	}
	return v
}

// goStruct is x, a Go struct, as a Starlark struct named name: each
// exported field under its name in snake case (LatencyMeanMs:
// latency_mean_ms; a `star:"-"` tag leaves it out) as goValue makes it,
// then extra's entries, which replace fields of the same name.
func goStruct(name string, x any, extra starlark.StringDict) *starlarkstruct.Struct {
	v := reflect.ValueOf(x)
	d := starlark.StringDict{}
	for _, f := range reflect.VisibleFields(v.Type()) {
		if f.IsExported() && !f.Anonymous && f.Tag.Get("star") != "-" {
			d[snake(f.Name)] = goValue(v.FieldByIndex(f.Index))
		}
	}
	maps.Copy(d, extra)
	return starlarkstruct.FromStringDict(starlark.String(name), d)
}

// goValue is v in Starlark: a number, string or bool as itself, a nil
// pointer as None, a slice or an array as a list, a struct as goStruct's.
func goValue(v reflect.Value) starlark.Value {
	switch v.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return starlark.MakeInt64(v.Int())
	case reflect.Float64:
		return starlark.Float(v.Float())
	case reflect.Pointer:
		if v.IsNil() {
			return starlark.None
		}
		return goValue(v.Elem())
	case reflect.Slice, reflect.Array:
		out := make([]starlark.Value, v.Len())
		for i := range out {
			out[i] = goValue(v.Index(i))
		}
		return starlark.NewList(out)
	case reflect.Struct:
		return goStruct("struct", v.Interface(), nil)
	}
	return toValue(v.Interface())
}

// snake is a Go name in snake case: IdleGPUWait is idle_gpu_wait, P95Ms
// p95_ms.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) && (!unicode.IsUpper(rune(name[i-1])) || i+1 < len(name) && unicode.IsLower(rune(name[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// passesValue is capture.passes: one mapping per pass (passFields).
func passesValue(ps []model.PassMetrics) starlark.Value {
	return &listView{typ: "passes", n: len(ps), at: func(i int) starlark.Value {
		return &mapView{typ: "pass_metrics", m: passFields(ps[i])}
	}}
}

// passFields is what a script sees of one pass's metrics: every field of
// model.PassMetrics under its results.json name (an optional metric the
// pass lacks, such as TTFT without streaming, is None), its coverage
// flattened (total, evaluated, skipped, failed, failure_kinds), and done:
// the requests that succeeded (total − failed).
func passFields(pm model.PassMetrics) map[string]any {
	m := map[string]any{}
	rv := reflect.ValueOf(pm)
	for _, f := range reflect.VisibleFields(rv.Type()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch x := rv.FieldByIndex(f.Index).Interface().(type) {
		case model.Coverage:
			m["total"], m["evaluated"], m["skipped"], m["failed"], m["empty_ref"], m["failure_kinds"] = x.Total, x.Evaluated, x.Skipped, x.Failed, x.EmptyRef, anyMap(x.FailureKinds)
		case map[string]int: // slo_misses
			m[name] = anyMap(x)
		case *float64:
			if x == nil {
				m[name] = nil
			} else {
				m[name] = *x
			}
		default:
			m[name] = x
		}
	}
	m["done"] = pm.Coverage.Total - pm.Coverage.Failed
	return m
}

// anyMap is m with its values as any.
func anyMap(m map[string]int) map[string]any {
	out := make(map[string]any, len(m))
	for k, n := range m {
		out[k] = n
	}
	return out
}

// requestValue is one request of capture.requests. Two are == when they
// are the same request of the same capture.
type requestValue struct {
	c *Capture
	i int
}

var (
	_ starlark.HasAttrs   = (*requestValue)(nil)
	_ starlark.Comparable = (*requestValue)(nil)
)

func (v *requestValue) String() string {
	return fmt.Sprintf("<request %s %s>", v.c.reqs.v[v.i].ID, v.c.reqs.v[v.i].Level)
}
func (v *requestValue) Type() string          { return "request" }
func (v *requestValue) Freeze()               {}
func (v *requestValue) Truth() starlark.Bool  { return true }
func (v *requestValue) Hash() (uint32, error) { return uint32(v.i), nil }
func (v *requestValue) CompareSameType(op syntax.Token, y starlark.Value, _ int) (bool, error) {
	return identity(op, v, y, *v == *y.(*requestValue))
}

func (v *requestValue) AttrNames() []string { return requestAttrs.names() }
func (v *requestValue) Attr(name string) (starlark.Value, error) {
	return requestAttrs.attr(v, name)
}

// requestAttr is one attribute of a request.
type requestAttr = func(*requestValue) (starlark.Value, error)

// requestAttrs are a request's attributes: every field of
// model.RequestFields under its JSON name, then index, ok and the join.
var requestAttrs = fieldAttrs(model.RequestFields, func(v *requestValue) reflect.Value {
	return reflect.ValueOf(&v.c.reqs.v[v.i]).Elem()
}, requestExtraAttrs)

// fieldAttrs are the attributes of a record of fields fs, which rec finds
// for a value (an object field as a mapping), then extra's.
func fieldAttrs[V any](fs []model.Field, rec func(V) reflect.Value, extra attrTable[V]) attrTable[V] {
	t := attrTable[V]{}
	for _, f := range fs {
		t[f.Name] = func(v V) (starlark.Value, error) {
			x := rec(v).Field(f.Index)
			if f.Kind == model.KindObject {
				return &mapView{typ: f.Name, m: x.Interface().(map[string]any)}, nil
			}
			return fieldValue(x, &f), nil
		}
	}
	maps.Copy(t, extra)
	return t
}

// fieldValue is field f's value x in Starlark: None for a nil pointer (a
// realtime-only field of a file request, errors without scoring), a
// struct named after the field for a struct.
func fieldValue(x reflect.Value, f *model.Field) starlark.Value {
	switch f.Kind {
	case model.KindString:
		return starlark.String(x.String())
	case model.KindInt, model.KindInt64:
		return starlark.MakeInt64(x.Int())
	case model.KindFloat:
		return starlark.Float(x.Float())
	case model.KindBool:
		return starlark.Bool(x.Bool())
	case model.KindFloats:
		return toValue(x.Interface())
	}
	if x.IsNil() {
		return starlark.None
	}
	if f.Kind == model.KindOptFloat {
		return starlark.Float(x.Elem().Float())
	}
	d := starlark.StringDict{}
	for i, s := range f.Sub {
		d[s.Name] = fieldValue(x.Elem().Field(s.Index), &f.Sub[i])
	}
	return starlarkstruct.FromStringDict(starlark.String(f.Name), d)
}

// requestExtraAttrs are the attributes of a request that are not fields.
var requestExtraAttrs = attrTable[*requestValue]{
	"index": func(v *requestValue) (starlark.Value, error) { return starlark.MakeInt(v.i), nil },
	"ok": func(v *requestValue) (starlark.Value, error) {
		return starlark.Bool(v.c.reqs.v[v.i].Status == model.StatusOK), nil
	},
	// The join.
	"spans": joinedRequest(func(ss []spans.Span, _ []bundle.Event) starlark.Value {
		return &listView{typ: "spans", n: len(ss), at: func(i int) starlark.Value { return &spanValue{s: &ss[i]} }}
	}),
	"span":        spanLookup("span"),
	"spans_named": spanLookup("spans_named"),
	"events": joinedRequest(func(_ []spans.Span, es []bundle.Event) starlark.Value {
		return &listView{typ: "events", n: len(es), at: func(i int) starlark.Value { return &eventValue{e: &es[i]} }}
	}),
}

// spanLookup is r.span(name) (the first server span of that name, or
// None) and r.spans_named(name) (all of them).
func spanLookup(name string) requestAttr {
	first := name == "span"
	return joinedRequest(func(ss []spans.Span, _ []bundle.Event) starlark.Value {
		return starlark.NewBuiltin(name, oneString(func(want string) (starlark.Value, error) {
			var out []starlark.Value
			for i := range ss {
				if ss[i].Name == want && !ss[i].IsClient() {
					if first {
						return &spanValue{s: &ss[i]}, nil
					}
					out = append(out, &spanValue{s: &ss[i]})
				}
			}
			if first {
				return starlark.None, nil
			}
			return starlark.NewList(out), nil
		}))
	})
}

// joinedRequest is an attribute of a request made of its spans and events
// (the join's).
func joinedRequest(f func([]spans.Span, []bundle.Event) starlark.Value) requestAttr {
	return func(v *requestValue) (starlark.Value, error) {
		ix, err := v.c.join()
		if err != nil {
			return nil, err
		}
		return f(ix.Spans(v.i), ix.Events(v.i)), nil
	}
}

// spanValue is one span of request.spans. Two are == when they are the
// same span of the same capture.
type spanValue struct{ s *spans.Span }

var (
	_ starlark.HasAttrs   = (*spanValue)(nil)
	_ starlark.Comparable = (*spanValue)(nil)
)

func (v *spanValue) String() string        { return fmt.Sprintf("<span %s %s>", v.s.Name, v.s.SpanID) }
func (v *spanValue) Type() string          { return "span" }
func (v *spanValue) Freeze()               {}
func (v *spanValue) Truth() starlark.Bool  { return true }
func (v *spanValue) Hash() (uint32, error) { return starlark.String(v.s.SpanID).Hash() }
func (v *spanValue) CompareSameType(op syntax.Token, y starlark.Value, _ int) (bool, error) {
	return identity(op, v, y, v.s == y.(*spanValue).s)
}

func (v *spanValue) AttrNames() []string { return spanAttrs.names() }
func (v *spanValue) Attr(name string) (starlark.Value, error) {
	return spanAttrs.attr(v, name)
}

// spanAttrs are a span's attributes: every field of spans.Span under its
// JSON name (its attributes as a mapping), then duration_s, is_client and
// attr(key, default = None).
var spanAttrs = fieldAttrs(model.FieldsOf(reflect.TypeFor[spans.Span]()), func(v *spanValue) reflect.Value {
	return reflect.ValueOf(v.s).Elem()
}, attrTable[*spanValue]{
	"duration_s": func(v *spanValue) (starlark.Value, error) {
		return starlark.Float(float64(v.s.EndUnixNs-v.s.StartUnixNs) / 1e9), nil
	},
	"is_client": func(v *spanValue) (starlark.Value, error) { return starlark.Bool(v.s.IsClient()), nil },
	"attr":      func(v *spanValue) (starlark.Value, error) { return starlark.NewBuiltin("attr", getFn(v.s.Attrs)), nil },
})

// eventValue is one event of request.events. Two are == when they are the
// same event of the same capture.
type eventValue struct{ e *bundle.Event }

var (
	_ starlark.HasAttrs   = (*eventValue)(nil)
	_ starlark.Comparable = (*eventValue)(nil)
)

func (v *eventValue) String() string        { return fmt.Sprintf("<event %s %s>", v.e.EventName, v.e.Stage) }
func (v *eventValue) Type() string          { return "event" }
func (v *eventValue) Freeze()               {}
func (v *eventValue) Truth() starlark.Bool  { return true }
func (v *eventValue) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: event") }
func (v *eventValue) CompareSameType(op syntax.Token, y starlark.Value, _ int) (bool, error) {
	return identity(op, v, y, v.e == y.(*eventValue).e)
}

func (v *eventValue) AttrNames() []string { return eventAttrs.names() }
func (v *eventValue) Attr(name string) (starlark.Value, error) {
	return eventAttrs.attr(v, name)
}

// eventAttrs are an event's attributes: every field of bundle.EventFields
// under its JSON name (the metadata object as a mapping).
var eventAttrs = fieldAttrs(bundle.EventFields, func(v *eventValue) reflect.Value { return reflect.ValueOf(v.e).Elem() }, nil)

// jsonValue turns a Go value into frozen Starlark values through its JSON form.
func jsonValue(x any) (starlark.Value, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return jsonBytes(b)
}

// jsonBytes is JSON b as frozen Starlark values (numbers keep their digits).
func jsonBytes(b []byte) (starlark.Value, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	return toValue(v), nil
}
