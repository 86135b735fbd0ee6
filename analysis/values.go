package analysis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/bundle"
	"github.com/asrprof/asrprof/trace/events"
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
	if step > 0 {
		for i := start; i < end; i += step {
			out = append(out, l.at(i))
		}
	} else {
		for i := start; i > end; i += step {
			out = append(out, l.at(i))
		}
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
func (v *mapView) keys() []string {
	ks := make([]string, 0, len(v.m))
	for k := range v.m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
func (v *mapView) Iterate() starlark.Iterator {
	ks := v.keys()
	return &viewIter{l: &listView{typ: "keys", n: len(ks), at: func(i int) starlark.Value { return starlark.String(ks[i]) }}}
}
func (v *mapView) Items() []starlark.Tuple {
	var out []starlark.Tuple
	for _, k := range v.keys() {
		out = append(out, starlark.Tuple{starlark.String(k), toValue(v.m[k])})
	}
	return out
}
func (v *mapView) AttrNames() []string {
	return append([]string{"get", "items", "keys", "values"}, v.keys()...)
}
func (v *mapView) Attr(name string) (starlark.Value, error) {
	switch name {
	case "get":
		return starlark.NewBuiltin("get", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var key string
			var def starlark.Value = starlark.None
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &key, &def); err != nil {
				return nil, err
			}
			if x, ok := v.m[key]; ok {
				return toValue(x), nil
			}
			return def, nil
		}), nil
	case "keys":
		return starlark.NewBuiltin("keys", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			var out []starlark.Value
			for _, k := range v.keys() {
				out = append(out, starlark.String(k))
			}
			return starlark.NewList(out), nil
		}), nil
	case "items":
		return starlark.NewBuiltin("items", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			var out []starlark.Value
			for _, t := range v.Items() {
				out = append(out, t)
			}
			return starlark.NewList(out), nil
		}), nil
	case "values":
		return starlark.NewBuiltin("values", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			var out []starlark.Value
			for _, k := range v.keys() {
				out = append(out, toValue(v.m[k]))
			}
			return starlark.NewList(out), nil
		}), nil
	}
	if x, ok := v.m[name]; ok {
		return toValue(x), nil
	}
	return nil, nil
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
		out := make([]starlark.Value, len(v))
		for i, e := range v {
			out[i] = toValue(e)
		}
		l := starlark.NewList(out)
		l.Freeze()
		return l
	case map[string]any:
		d := starlark.NewDict(len(v))
		ks := make([]string, 0, len(v))
		for k := range v {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			d.SetKey(starlark.String(k), toValue(v[k]))
		}
		d.Freeze()
		return d
	case []float64:
		out := make([]starlark.Value, len(v))
		for i, e := range v {
			out[i] = starlark.Float(e)
		}
		l := starlark.NewList(out)
		l.Freeze()
		return l
	}
	// Anything else goes through JSON.
	b, err := json.Marshal(x)
	if err != nil {
		return starlark.String(fmt.Sprint(x))
	}
	v, err := decodeJSON(b)
	if err != nil {
		return starlark.String(string(b))
	}
	return toValue(v)
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

var captureAttrs = []string{"cpu_profiles", "cuda", "dir", "event_names", "events_count", "files", "gpu", "join_stats",
	"levels", "manifest", "name", "requests", "results", "sched", "span_names", "spans_count"}

func (v *captureValue) AttrNames() []string { return captureAttrs }

func (v *captureValue) Attr(name string) (starlark.Value, error) {
	c := v.c
	switch name {
	case "dir":
		return starlark.String(c.Dir), nil
	case "name":
		return starlark.String(filepath.Base(c.Dir)), nil
	case "requests":
		return &listView{typ: "requests", n: len(c.Requests), at: func(i int) starlark.Value {
			return &requestValue{c: c, i: i}
		}}, nil
	case "levels":
		return levelsValue(c.Bundle.Manifest.Levels), nil
	case "manifest":
		return toValue(c.Bundle.Manifest), nil
	case "results":
		return toValue(c.Results), nil
	case "files":
		fs, err := c.Bundle.Files()
		if err != nil {
			return nil, err
		}
		out := make([]starlark.Value, len(fs))
		for i, f := range fs {
			out[i] = starlark.String(f)
		}
		return starlark.NewList(out), nil
	case "gpu", "sched", "cuda":
		file := map[string]string{"gpu": bundle.GPUFile, "sched": bundle.SchedFile, "cuda": bundle.CUDAFile}[name]
		rows, err := c.Rows(file)
		if err != nil {
			return nil, err
		}
		typ := name + "_rows"
		return &listView{typ: typ, n: len(rows), at: func(i int) starlark.Value {
			return &mapView{typ: name + "_row", m: rows[i]}
		}}, nil
	case "cpu_profiles":
		ps, err := c.profiles()
		if err != nil {
			return nil, err
		}
		return jsonValue(ps)
	case "span_names", "event_names", "join_stats", "spans_count", "events_count":
		ix, err := c.join()
		if err != nil {
			return nil, err
		}
		switch name {
		case "span_names":
			return stringList(c.spanSet), nil
		case "event_names":
			return stringList(c.eventSet), nil
		case "spans_count":
			return starlark.MakeInt(c.spanN), nil
		case "events_count":
			return starlark.MakeInt(ix.Stats().Events), nil
		}
		return toValue(ix.Stats()), nil
	}
	return nil, nil
}

func stringList(ss []string) *starlark.List {
	out := make([]starlark.Value, len(ss))
	for i, s := range ss {
		out[i] = starlark.String(s)
	}
	l := starlark.NewList(out)
	l.Freeze()
	return l
}

func levelsValue(ls []trace.LevelRun) starlark.Value {
	out := make([]starlark.Value, len(ls))
	for i, l := range ls {
		out[i] = starlarkstruct.FromStringDict(starlark.String("pass"), starlark.StringDict{
			"level":         starlark.String(l.Level),
			"concurrency":   starlark.MakeInt(l.Concurrency),
			"rate":          starlark.Float(l.Rate),
			"repeat":        starlark.MakeInt(l.Repeat),
			"warmup":        starlark.Bool(l.Warmup),
			"start_unix_ns": starlark.MakeInt64(l.StartUnixNs),
			"end_unix_ns":   starlark.MakeInt64(l.EndUnixNs),
			"wall_s":        starlark.Float(float64(l.EndUnixNs-l.StartUnixNs) / 1e9),
		})
	}
	lst := starlark.NewList(out)
	lst.Freeze()
	return lst
}

// requestValue is one request of capture.requests.
type requestValue struct {
	c *Capture
	i int
}

var _ starlark.HasAttrs = (*requestValue)(nil)

func (v *requestValue) String() string {
	return fmt.Sprintf("<request %s %s>", v.c.Requests[v.i].ID, v.c.Requests[v.i].Level)
}
func (v *requestValue) Type() string          { return "request" }
func (v *requestValue) Freeze()               {}
func (v *requestValue) Truth() starlark.Bool  { return true }
func (v *requestValue) Hash() (uint32, error) { return uint32(v.i), nil }

var requestAttrs = []string{"audio_duration_s", "audio_s", "chunk_gaps_s", "end_unix_ns", "error", "error_kind", "errors",
	"events", "first_byte_unix_ns", "first_token_unix_ns", "hyp", "http_status", "id", "index",
	"intended_unix_ns", "lang", "latency_s", "level", "ok", "ref", "repeat", "request_id", "sample_id",
	"scored", "server_request_id", "span", "spans", "spans_named", "start_unix_ns", "status", "trace_id", "ttft_s",
	"upload_done_unix_ns", "warmup",
	// realtime sessions (None for file requests)
	"final_after_stop_s", "finals", "server_errors", "first_update_s", "lag_growth_s", "lag_max_s", "lag_p95_s",
	"lag_source", "partials", "send_late_max_s"}

// optFloat is a Starlark float, or None when the field is absent.
func optFloat(x *float64) starlark.Value {
	if x == nil {
		return starlark.None
	}
	return starlark.Float(*x)
}

func (v *requestValue) AttrNames() []string { return requestAttrs }

func (v *requestValue) Attr(name string) (starlark.Value, error) {
	r := &v.c.Requests[v.i]
	switch name {
	case "id":
		return starlark.String(r.ID), nil
	case "index":
		return starlark.MakeInt(v.i), nil
	case "sample_id":
		return starlark.String(r.SampleID), nil
	case "level":
		return starlark.String(r.Level), nil
	case "repeat":
		return starlark.MakeInt(r.Repeat), nil
	case "warmup":
		return starlark.Bool(r.Warmup), nil
	case "trace_id":
		return starlark.String(r.TraceID), nil
	case "request_id":
		return starlark.String(r.RequestID), nil
	case "server_request_id":
		return starlark.String(r.ServerRequestID), nil
	case "intended_unix_ns":
		return starlark.MakeInt64(r.IntendedUnixNs), nil
	case "start_unix_ns":
		return starlark.MakeInt64(r.StartUnixNs), nil
	case "upload_done_unix_ns":
		return starlark.MakeInt64(r.UploadDoneUnixNs), nil
	case "first_byte_unix_ns":
		return starlark.MakeInt64(r.FirstByteUnixNs), nil
	case "first_token_unix_ns":
		return starlark.MakeInt64(r.FirstTokenUnixNs), nil
	case "end_unix_ns":
		return starlark.MakeInt64(r.EndUnixNs), nil
	case "latency_s":
		return starlark.Float(r.LatencyS), nil
	case "ttft_s":
		return starlark.Float(r.TTFTS), nil
	case "chunk_gaps_s":
		return toValue(r.ChunkGapsS), nil
	case "audio_duration_s":
		return starlark.Float(r.AudioDurationS), nil
	case "first_update_s":
		return optFloat(r.FirstUpdateS), nil
	case "final_after_stop_s":
		return optFloat(r.FinalAfterStopS), nil
	case "lag_p95_s":
		return optFloat(r.LagP95S), nil
	case "lag_max_s":
		return optFloat(r.LagMaxS), nil
	case "lag_growth_s":
		return optFloat(r.LagGrowthS), nil
	case "send_late_max_s":
		return optFloat(r.SendLateMaxS), nil
	case "lag_source":
		return starlark.String(r.LagSource), nil
	case "partials":
		return starlark.MakeInt(r.Partials), nil
	case "finals":
		return starlark.MakeInt(r.Finals), nil
	case "server_errors":
		return starlark.MakeInt(r.ServerErrors), nil
	case "audio_s":
		return starlark.Float(r.AudioS), nil
	case "http_status":
		return starlark.MakeInt(r.HTTPStatus), nil
	case "status":
		return starlark.String(r.Status), nil
	case "ok":
		return starlark.Bool(r.Status == trace.StatusOK), nil
	case "error_kind":
		return starlark.String(r.ErrorKind), nil
	case "error":
		return starlark.String(r.Error), nil
	case "hyp":
		return starlark.String(r.Hyp), nil
	case "ref":
		return starlark.String(r.Ref), nil
	case "lang":
		return starlark.String(r.Lang), nil
	case "scored":
		return starlark.Bool(r.Scored), nil
	case "errors":
		if r.Errors == nil {
			return starlark.None, nil
		}
		e := r.Errors
		return starlarkstruct.FromStringDict(starlark.String("errors"), starlark.StringDict{
			"sub": starlark.MakeInt(e.Sub), "del": starlark.MakeInt(e.Del),
			"ins": starlark.MakeInt(e.Ins), "ref_words": starlark.MakeInt(e.RefWords),
		}), nil
	case "spans":
		ix, err := v.c.join()
		if err != nil {
			return nil, err
		}
		ss := ix.Spans(v.i)
		return &listView{typ: "spans", n: len(ss), at: func(i int) starlark.Value { return &spanValue{s: &ss[i]} }}, nil
	case "span", "spans_named":
		ix, err := v.c.join()
		if err != nil {
			return nil, err
		}
		ss := ix.Spans(v.i)
		first := name == "span"
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var want string
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &want); err != nil {
				return nil, err
			}
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
		}), nil
	case "events":
		ix, err := v.c.join()
		if err != nil {
			return nil, err
		}
		es := ix.Events(v.i)
		return &listView{typ: "events", n: len(es), at: func(i int) starlark.Value { return &eventValue{e: &es[i]} }}, nil
	}
	return nil, nil
}

// spanValue is one span of request.spans.
type spanValue struct{ s *spans.Span }

var _ starlark.HasAttrs = (*spanValue)(nil)

func (v *spanValue) String() string        { return fmt.Sprintf("<span %s %s>", v.s.Name, v.s.SpanID) }
func (v *spanValue) Type() string          { return "span" }
func (v *spanValue) Freeze()               {}
func (v *spanValue) Truth() starlark.Bool  { return true }
func (v *spanValue) Hash() (uint32, error) { return starlark.String(v.s.SpanID).Hash() }

var spanAttrs = []string{"attr", "attrs", "duration_s", "end_unix_ns", "is_client", "kind", "name",
	"parent_span_id", "service", "span_id", "start_unix_ns", "status_code", "trace_id"}

func (v *spanValue) AttrNames() []string { return spanAttrs }

func (v *spanValue) Attr(name string) (starlark.Value, error) {
	s := v.s
	switch name {
	case "name":
		return starlark.String(s.Name), nil
	case "trace_id":
		return starlark.String(s.TraceID), nil
	case "span_id":
		return starlark.String(s.SpanID), nil
	case "parent_span_id":
		return starlark.String(s.ParentSpanID), nil
	case "service":
		return starlark.String(s.Service), nil
	case "kind":
		return starlark.String(s.Kind), nil
	case "start_unix_ns":
		return starlark.MakeInt64(s.StartUnixNs), nil
	case "end_unix_ns":
		return starlark.MakeInt64(s.EndUnixNs), nil
	case "duration_s":
		return starlark.Float(float64(s.EndUnixNs-s.StartUnixNs) / 1e9), nil
	case "status_code":
		return starlark.String(s.StatusCode), nil
	case "is_client":
		return starlark.Bool(s.IsClient()), nil
	case "attrs":
		return &mapView{typ: "attrs", m: s.Attrs}, nil
	case "attr":
		return starlark.NewBuiltin("attr", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var key string
			var def starlark.Value = starlark.None
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &key, &def); err != nil {
				return nil, err
			}
			if x, ok := s.Attrs[key]; ok {
				return toValue(x), nil
			}
			return def, nil
		}), nil
	}
	return nil, nil
}

// eventValue is one event of request.events.
type eventValue struct{ e *events.Event }

var _ starlark.HasAttrs = (*eventValue)(nil)

func (v *eventValue) String() string        { return fmt.Sprintf("<event %s %s>", v.e.EventName, v.e.Stage) }
func (v *eventValue) Type() string          { return "event" }
func (v *eventValue) Freeze()               {}
func (v *eventValue) Truth() starlark.Bool  { return true }
func (v *eventValue) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: event") }

var eventAttrs = []string{"event_name", "metadata", "pid", "request_id", "run_id", "stage", "timestamp_ns"}

func (v *eventValue) AttrNames() []string { return eventAttrs }

func (v *eventValue) Attr(name string) (starlark.Value, error) {
	e := v.e
	switch name {
	case "request_id":
		return starlark.String(e.RequestID), nil
	case "stage":
		return starlark.String(e.Stage), nil
	case "event_name":
		return starlark.String(e.EventName), nil
	case "timestamp_ns":
		return starlark.MakeInt64(e.TimestampNs), nil
	case "run_id":
		return starlark.String(e.RunID), nil
	case "pid":
		return starlark.MakeInt(e.PID), nil
	case "metadata":
		return &mapView{typ: "metadata", m: e.Metadata}, nil
	}
	return nil, nil
}

// jsonValue turns a Go value into frozen Starlark values through its JSON form.
func jsonValue(x any) (starlark.Value, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return toValue(v), nil
}
