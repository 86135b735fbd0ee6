package analysis

import (
	"fmt"
	"reflect"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/trace/spans"
)

// The preset module declares stage presets for the engine
// (analysis/engine) and runs them:
//
//	load("preset", "declare", "event", "span", "between", "span_start", "span_end", "attr", "rest")
//	SPEC = declare("myserver", requires = span_start("handle"), stages = {
//	    "queued→scheduled": span("wait"),
//	    "first forward": between(span_start("prefill"), event("first_token")),
//	    "total": span("handle"),
//	})
//
// stage_summary(capture, SPEC, names) is the stage table's rows, computed
// in Go over the capture's tables.
func presetModule() *starlarkstruct.Module {
	return newModule("preset", "preset.", map[string]builtinFunc{
		"event": eventPoint, "span_start": spanPoint(false), "span_end": spanPoint(true),
		"between": between, "declare": declare, "stage_summary": stageSummary,
		"span": stringStage(func(v []string) engine.Stage {
			return engine.Stage{From: engine.Point{Span: v[0]}, To: engine.Point{Span: v[0], End: true}}
		}, "name"),
		"attr": stringStage(func(v []string) engine.Stage { return engine.Stage{AttrSpan: v[0], Attr: v[1]} }, "span", "key"),
		"rest": stringStage(func([]string) engine.Stage { return engine.Stage{Rest: true} }),
		// gap(outer, inner): the first server span named outer less the
		// first named inner (a router's span around the worker's).
		"gap": stringStage(func(v []string) engine.Stage { return engine.Stage{Outer: v[0], Inner: v[1]} }, "outer", "inner"),
	}, nil)
}

// pointValue is an instant: event(...), span_start(...), span_end(...).
type pointValue struct{ p engine.Point }

func (v *pointValue) String() string        { return v.p.String() }
func (v *pointValue) Type() string          { return "point" }
func (v *pointValue) Freeze()               {}
func (v *pointValue) Truth() starlark.Bool  { return true }
func (v *pointValue) Hash() (uint32, error) { return starlark.String(v.p.String()).Hash() }

// stageValue is a stage's rule: between(...), span(...), attr(...), rest().
type stageValue struct{ s engine.Stage }

func (v *stageValue) String() string        { return v.s.String() }
func (v *stageValue) Type() string          { return "stage" }
func (v *stageValue) Freeze()               {}
func (v *stageValue) Truth() starlark.Bool  { return true }
func (v *stageValue) Hash() (uint32, error) { return starlark.String(v.s.String()).Hash() }

func eventPoint(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name, same string
	var last bool
	if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name, "last?", &last, "same_stage_as?", &same); err != nil {
		return nil, err
	}
	return &pointValue{engine.Point{Event: name, Last: last, SameStageAs: same}}, nil
}

func spanPoint(end bool) builtinFunc {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		var name string
		var last bool
		pairs := []any{"name", &name}
		if end {
			pairs = append(pairs, "last?", &last)
		}
		if err := starlark.UnpackArgs(b.Name(), args, kw, pairs...); err != nil {
			return nil, err
		}
		return &pointValue{engine.Point{Span: name, End: end, Last: last}}, nil
	}
}

func between(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var from, to *pointValue
	if err := starlark.UnpackArgs(b.Name(), args, kw, "start", &from, "end", &to); err != nil {
		return nil, err
	}
	return &stageValue{engine.Stage{From: from.p, To: to.p}}, nil
}

// stringStage is a stage builtin of the string parameters params, whose
// rule mk makes of their values.
func stringStage(mk func(v []string) engine.Stage, params ...string) builtinFunc {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		v := make([]string, len(params))
		pairs := make([]any, 0, 2*len(params))
		for i, p := range params {
			pairs = append(pairs, p, &v[i])
		}
		if err := starlark.UnpackArgs(b.Name(), args, kw, pairs...); err != nil {
			return nil, err
		}
		return &stageValue{mk(v)}, nil
	}
}

// declare(name, requires, stages): requires is a point, or "events" (the
// request has any event); stages maps each stage name to its rule, in
// order.
func declare(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name string
	var requires starlark.Value
	var stages *starlark.Dict
	if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name, "requires", &requires, "stages", &stages); err != nil {
		return nil, err
	}
	p := &engine.Preset{Name: name}
	switch r := requires.(type) {
	case *pointValue:
		p.Requires = r.p
	case starlark.String:
		if r != "events" {
			return nil, fmt.Errorf("%s: requires = %q: want a point (event(...), span_start(...)) or \"events\"", b.Name(), string(r))
		}
		p.RequiresEvents = true
	default:
		return nil, fmt.Errorf("%s: requires is %s, want a point or \"events\"", b.Name(), requires.Type())
	}
	for _, it := range stages.Items() {
		k, ok := starlark.AsString(it[0])
		if !ok {
			return nil, fmt.Errorf("%s: stage name %s is not a string", b.Name(), it[0])
		}
		sv, ok := it[1].(*stageValue)
		if !ok {
			return nil, fmt.Errorf("%s: stage %q is %s, want between(...), span(...), attr(...), gap(...) or rest()", b.Name(), k, it[1].Type())
		}
		st := sv.s
		st.Name = k
		p.Stages = append(p.Stages, st)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %v", b.Name(), err)
	}
	return &presetValue{p: p}, nil
}

// presetValue is a declared preset: .name, .stages (names),
// .decompose(r) and .bounds(r) for one request.
type presetValue struct{ p *engine.Preset }

var _ starlark.HasAttrs = (*presetValue)(nil)

func (v *presetValue) String() string        { return fmt.Sprintf("<preset %s>", v.p.Name) }
func (v *presetValue) Type() string          { return "preset" }
func (v *presetValue) Freeze()               {}
func (v *presetValue) Truth() starlark.Bool  { return true }
func (v *presetValue) Hash() (uint32, error) { return starlark.String(v.p.Name).Hash() }
func (v *presetValue) AttrNames() []string {
	return []string{"bounds", "decompose", "key", "name", "stages"}
}
func (v *presetValue) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(v.p.Name), nil
	case "key":
		return starlark.String(v.p.Key()), nil
	case "stages":
		return frozenList(v.p.Stages, func(s engine.Stage) starlark.Value { return starlark.String(s.Name) }), nil
	case "decompose", "bounds":
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var r *requestValue
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &r); err != nil {
				return nil, err
			}
			vals, ok, err := v.one(r)
			if err != nil || !ok {
				return starlark.None, err
			}
			d := starlark.NewDict(len(v.p.Stages))
			for k, s := range v.p.Stages {
				switch x := vals[k]; {
				case name == "bounds" && x.HasBounds:
					d.SetKey(starlark.String(s.Name), starlark.Tuple{starlark.MakeInt64(x.Start), starlark.MakeInt64(x.End)})
				case name == "decompose" && x.HasDur:
					d.SetKey(starlark.String(s.Name), starlark.Float(x.DurS))
				case name == "decompose": // the request lacks the stage
					d.SetKey(starlark.String(s.Name), starlark.None)
				}
			}
			return d, nil
		}), nil
	}
	return nil, nil
}

// one applies the preset to one request's joined spans and events.
func (v *presetValue) one(r *requestValue) ([]engine.StageValue, bool, error) {
	ix, err := r.c.join()
	if err != nil {
		return nil, false, err
	}
	vals, ok := engine.One(v.p, columns.EventsOf(ix.Events(r.i), 0), oneSpans(ix.Spans(r.i)))
	return vals, ok, nil
}

// oneSpans makes one request's spans table from its joined spans.
func oneSpans(ss []spans.Span) *columns.Spans {
	s := &columns.Spans{}
	for i := range ss {
		s.RequestIndex = append(s.RequestIndex, 0)
		s.SpanID = append(s.SpanID, ss[i].SpanID)
		appendCode(&s.Name, ss[i].Name)
		appendCode(&s.Service, ss[i].Service)
		s.StartUnixNs = append(s.StartUnixNs, ss[i].StartUnixNs)
		s.EndUnixNs = append(s.EndUnixNs, ss[i].EndUnixNs)
		s.AttrMaps = append(s.AttrMaps, ss[i].Attrs)
	}
	return s
}

// appendCode appends v's code to d, adding v to its names when new.
func appendCode(d *columns.Strings, v string) {
	c := d.Code(v)
	if c < 0 {
		c = int32(len(d.Dict))
		d.Dict = append(d.Dict, v)
	}
	d.Codes = append(d.Codes, c)
}

// stageSummary(capture, preset, names, levels, by_worker = False): the
// stage table's rows, [struct(level, worker, n, missing, stages = {name:
// struct(mean_ms, p95_ms, n) or None})], for the levels in order, over the
// measured (non-warmup) successful requests; by_worker: one row per level
// and worker (worker "" otherwise, and for requests no span names a
// worker for).
func stageSummary(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var pv *presetValue
	var namesV, levelsV *starlark.List
	var byWorker bool
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "preset", &pv, "names", &namesV, "levels", &levelsV, "by_worker?", &byWorker); err != nil {
		return nil, err
	}
	names, levels, rows, rc, err := stageInputs(b, cv, pv, namesV, levelsV)
	if err != nil {
		return nil, err
	}
	var group, groups []string // by worker: theirs
	if byWorker {
		w, err := cv.c.Workers()
		if err != nil {
			return nil, err
		}
		group = w.Of
		groups = w.Names
	}
	return stageRowsValue(engine.SummarizeGroups(rc, rows, levels, names, group, groups), names, "worker"), nil
}

// stageRowsValue is stage_summary's rows of levelsOut, each row's
// Worker under the name group ("worker"; lengths.stage_summary: "bucket").
func stageRowsValue(levelsOut []engine.LevelStages, names []string, group string) *starlark.List {
	return starlark.NewList(valuesOf(levelsOut, func(l engine.LevelStages) starlark.Value {
		st := starlark.NewDict(len(names))
		for _, n := range names {
			st.SetKey(starlark.String(n), goValue(reflect.ValueOf(l.Stages[n]))) // None for a stage the level lacks
		}
		return structOf(starlark.StringDict{
			"level": starlark.String(l.Level), group: starlark.String(l.Worker), "n": starlark.MakeInt(l.N), "missing": starlark.MakeInt(l.Missing), "stages": st,
		})
	}))
}

// stageInputs is what a stage_summary reads: its names and levels, the
// preset's stage rows and the requests' columns.
func stageInputs(b *starlark.Builtin, cv *captureValue, pv *presetValue, namesV, levelsV *starlark.List) (names, levels []string, rows *columns.StageRows, rc *columns.RequestCols, err error) {
	if names, err = stringArgs(b.Name(), namesV); err == nil {
		if levels, err = stringArgs(b.Name(), levelsV); err == nil {
			rows, rc, err = cv.c.stageCols(pv.p)
		}
	}
	return names, levels, rows, rc, err
}

func stringArgs(fname string, l *starlark.List) ([]string, error) {
	out := make([]string, l.Len())
	for i := range out {
		s, ok := starlark.AsString(l.Index(i))
		if !ok {
			return nil, fmt.Errorf("%s: element %d is %s, want a string", fname, i, l.Index(i).Type())
		}
		out[i] = s
	}
	return out, nil
}
