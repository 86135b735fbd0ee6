package analysis

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/trace/columns"
	"github.com/asrprof/asrprof/trace/events"
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
		"between": between, "span": spanStage, "attr": attrStage, "rest": restStage, "gap": gapStage,
		"declare": declare, "stage_summary": stageSummary,
	})
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
		if end {
			if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name, "last?", &last); err != nil {
				return nil, err
			}
		} else if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name); err != nil {
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

func spanStage(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "name", &name); err != nil {
		return nil, err
	}
	return &stageValue{engine.Stage{From: engine.Point{Span: name}, To: engine.Point{Span: name, End: true}}}, nil
}

func attrStage(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var span, key string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "span", &span, "key", &key); err != nil {
		return nil, err
	}
	return &stageValue{engine.Stage{AttrSpan: span, Attr: key}}, nil
}

func restStage(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kw); err != nil {
		return nil, err
	}
	return &stageValue{engine.Stage{Rest: true}}, nil
}

// gap(outer, inner): the first server span named outer less the first
// named inner (a router's span around the worker's).
func gapStage(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var outer, inner string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "outer", &outer, "inner", &inner); err != nil {
		return nil, err
	}
	return &stageValue{engine.Stage{Outer: outer, Inner: inner}}, nil
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
		var names []string
		for _, s := range v.p.Stages {
			names = append(names, s.Name)
		}
		return stringList(names), nil
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
			for _, s := range v.p.Stages {
				if name == "decompose" {
					var x starlark.Value = starlark.None
					if p := vals.Seconds[s.Name]; p != nil {
						x = starlark.Float(*p)
					}
					d.SetKey(starlark.String(s.Name), x)
				} else if bd, ok := vals.Bounds[s.Name]; ok {
					d.SetKey(starlark.String(s.Name), starlark.Tuple{starlark.MakeInt64(bd[0]), starlark.MakeInt64(bd[1])})
				}
			}
			return d, nil
		}), nil
	}
	return nil, nil
}

// one applies the preset to one request's joined spans and events.
func (v *presetValue) one(r *requestValue) (engine.Values, bool, error) {
	ix, err := r.c.join()
	if err != nil {
		return engine.Values{}, false, err
	}
	vals, ok := engine.One(v.p, oneEvents(ix.Events(r.i)), oneSpans(ix.Spans(r.i)))
	return vals, ok, nil
}

// oneEvents and oneSpans make one request's tables from its joined
// records.
func oneEvents(evs []events.Event) *columns.Events {
	e := &columns.Events{}
	var name, stage dict
	for i := range evs {
		e.RequestIndex = append(e.RequestIndex, 0)
		e.EventName.Codes = append(e.EventName.Codes, name.code(evs[i].EventName))
		e.Stage.Codes = append(e.Stage.Codes, stage.code(evs[i].Stage))
		e.TimestampNs = append(e.TimestampNs, evs[i].TimestampNs)
	}
	e.EventName.Dict, e.Stage.Dict = name.names, stage.names
	return e
}

func oneSpans(ss []spans.Span) *columns.Spans {
	s := &columns.Spans{}
	var name, svc dict
	for i := range ss {
		s.RequestIndex = append(s.RequestIndex, 0)
		s.SpanID = append(s.SpanID, ss[i].SpanID)
		s.Name.Codes = append(s.Name.Codes, name.code(ss[i].Name))
		s.Service.Codes = append(s.Service.Codes, svc.code(ss[i].Service))
		s.StartUnixNs = append(s.StartUnixNs, ss[i].StartUnixNs)
		s.EndUnixNs = append(s.EndUnixNs, ss[i].EndUnixNs)
		s.AttrMaps = append(s.AttrMaps, ss[i].Attrs)
	}
	s.Name.Dict, s.Service.Dict = name.names, svc.names
	return s
}

type dict struct {
	names []string
	ix    map[string]int32
}

func (d *dict) code(s string) int32 {
	if c, ok := d.ix[s]; ok {
		return c
	}
	if d.ix == nil {
		d.ix = map[string]int32{}
	}
	d.ix[s] = int32(len(d.names))
	d.names = append(d.names, s)
	return d.ix[s]
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
	names, err := stringArgs(b.Name(), namesV)
	if err != nil {
		return nil, err
	}
	levels, err := stringArgs(b.Name(), levelsV)
	if err != nil {
		return nil, err
	}
	rows, rc, err := cv.c.stageCols(pv.p)
	if err != nil {
		return nil, err
	}
	var levelsOut []engine.LevelStages
	if byWorker {
		w, err := cv.c.Workers()
		if err != nil {
			return nil, err
		}
		levelsOut = engine.SummarizeWorkers(rc, rows, levels, names, w)
	} else {
		levelsOut = engine.Summarize(rc, rows, levels, names)
	}
	return stageRowsValue(levelsOut, names, "worker"), nil
}

// stageRowsValue is stage_summary's rows of levelsOut, each row's
// Worker under the name group ("worker"; lengths.stage_summary: "bucket").
func stageRowsValue(levelsOut []engine.LevelStages, names []string, group string) *starlark.List {
	var out []starlark.Value
	for _, l := range levelsOut {
		st := starlark.NewDict(len(names))
		for _, n := range names {
			var x starlark.Value = starlark.None
			if s := l.Stages[n]; s != nil {
				x = structOf(starlark.StringDict{
					"mean_ms": starlark.Float(s.MeanMs), "p95_ms": starlark.Float(s.P95Ms), "n": starlark.MakeInt(s.N),
				})
			}
			st.SetKey(starlark.String(n), x)
		}
		out = append(out, structOf(starlark.StringDict{
			"level": starlark.String(l.Level), group: starlark.String(l.Worker), "n": starlark.MakeInt(l.N), "missing": starlark.MakeInt(l.Missing), "stages": st,
		}))
	}
	return starlark.NewList(out)
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
