package analysis

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
)

// The attribution module: where each request's client latency went, state
// by state (analysis/engine.Attribute; docs/ANALYSIS.md, "Where the time
// went"), computed in Go over the capture's tables and its per-thread time
// bins:
//
//	load("attribution", "levels", "requests", "STATES")
//	levels(capture, preset)    # [struct(level, n, missing, latency_mean_ms, states = {state: struct(share, mean_ms, p95_ms)},
//	                           #         thread, threads, running_util, pass_util, gpu, clock_offset_ms, clock_how, admission_at_cap, run_cap, admission_in_ff)]
//	requests(capture, preset)  # [struct(index, request_id, level, repeat, warmup, latency_ms, telemetry, ms = {state: ms})]
//	levels(..., thread = "my-sched")  # the serving thread's name, when no span or event names it
//
// preset is a declared preset (a stage preset's SPEC), or None: then no
// request has telemetry and all of its time is unattributed.
func attributionModule() *starlarkstruct.Module {
	return newModule("attribution", "attribution.", map[string]builtinFunc{"levels": attributionLevels, "requests": attributionRequests},
		starlark.StringDict{"STATES": stringList(engine.AttributionStates)})
}

// attribute runs engine.Attribute over the capture.
func attribute(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (*Capture, *engine.Attribution, error) {
	var cv *captureValue
	var pv starlark.Value = starlark.None
	var thread string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "preset?", &pv, "thread?", &thread); err != nil {
		return nil, nil, err
	}
	c := cv.c
	rc, err := c.Tables.RequestCols()
	if err != nil {
		return nil, nil, err
	}
	in := engine.AttributionInput{Reqs: rc, Rows: &columns.StageRows{}, Thread: thread, Segments: c.segments.Load()}
	switch p := pv.(type) {
	case *presetValue:
		if in.Rows, err = c.StageRows(p.p); err != nil {
			return nil, nil, err
		}
		if in.RequestTID, in.RequestPID, err = runningThreadHints(c, p.p, rc.N); err != nil {
			return nil, nil, err
		}
	case starlark.NoneType:
	default:
		return nil, nil, fmt.Errorf("%s: preset is %s, want a declared preset (a stage preset's SPEC) or None", b.Name(), pv.Type())
	}
	if in.Sched, in.CUDA, _, err = engine.ReadThreadBins(c.Bundle.Dir); err != nil {
		return nil, nil, err
	}
	if len(in.Sched) > 0 {
		if in.GPU, _, err = engine.ReadGPU(c.Bundle.Path(bundle.GPUFile)); err != nil {
			return nil, nil, err
		}
	}
	if w, err := c.Workers(); err != nil {
		return nil, nil, err
	} else if len(w.Names) > 1 {
		in.Worker = w.Of
	}
	if in.Levels, err = runOrder(c); err != nil {
		return nil, nil, err
	}
	a := engine.Attribute(in)
	c.lastAttr.Store(a)
	return c, a, nil
}

// runOrder is the levels in the order the capture ran them (the
// manifest's passes, then any other level the requests name), as
// lib/common.star's level_order.
func runOrder(c *Capture) ([]string, error) {
	lvs, err := c.RequestLevels()
	var out []string
	for _, lv := range append(valuesOf(c.Bundle.Manifest.Levels, func(l model.LevelRun) string { return l.Level }), lvs...) {
		if !slices.Contains(out, lv) {
			out = append(out, lv)
		}
	}
	return out, err
}

// runningThreadHints returns, per request, the thread id that a span of
// its running stage names in its attribute thread.id (OpenTelemetry's
// name), and the process its running stage's event names (pid); nil
// where the telemetry names none. Only the spans of the first forward's
// (else the decode tail's) name are read, and none once the first 64 of
// them name no thread.
func runningThreadHints(c *Capture, p *engine.Preset, n int) (tids, pids []int64, err error) {
	var pt engine.Point
	for _, name := range []string{"decode tail", "first forward"} {
		for _, s := range p.Stages {
			if s.Name == name && (s.From.Span != "" || s.From.Event != "") {
				pt = s.From
			}
		}
	}
	switch {
	case pt.Span != "":
		if !slices.Contains(c.Tables.SpanNames(), pt.Span) {
			return nil, nil, nil
		}
		s, err := c.Tables.Spans()
		if err != nil {
			return nil, nil, err
		}
		code := s.Name.Code(pt.Span)
		seen, found := 0, false
		for j, cd := range s.Name.Codes {
			i := int(s.RequestIndex[j])
			if cd != code || i < 0 || i >= n {
				continue
			}
			if seen++; seen > 64 && !found {
				break
			}
			if v, ok := s.Attr(j, "thread.id"); ok && v != 0 {
				if tids == nil {
					tids = make([]int64, n)
				}
				tids[i], found = int64(v), true
			}
		}
	case pt.Event != "":
		if !c.HasEvents() {
			return nil, nil, nil
		}
		e, err := c.Tables.Events()
		if err != nil {
			return nil, nil, err
		}
		code := e.EventName.Code(pt.Event)
		if code < 0 || len(e.PID) != len(e.EventName.Codes) {
			return nil, nil, nil
		}
		for j, cd := range e.EventName.Codes {
			if i := int(e.RequestIndex[j]); cd == code && i >= 0 && i < n && e.PID[j] != 0 {
				if pids == nil {
					pids = make([]int64, n)
				}
				pids[i] = e.PID[j]
			}
		}
	}
	return tids, pids, nil
}

func structOf(d starlark.StringDict) *starlarkstruct.Struct {
	return starlarkstruct.FromStringDict(starlarkstruct.Default, d)
}

// levels(capture, preset = None, thread = ""): per level over its
// measured (non-warmup, successful) requests, each state's share of
// their summed latency and its mean and p95 per request (ms); the
// serving thread (thread: the first scored pass's; threads: every scored
// pass's) with its on-CPU share while requests ran (running_util) and
// over the pass (pass_util), None without sched bins; gpu: the GPU's
// time over the running bins (busy, idle_host, idle_gpu_wait,
// idle_runnable, idle_off, adding up to 1), None without util samples.
func attributionLevels(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	_, a, err := attribute(b, args, kw)
	if err != nil {
		return nil, err
	}
	return starlark.NewList(valuesOf(a.Levels, func(l engine.LevelStates) starlark.Value {
		extra := starlark.StringDict{"states": statesValue(engine.AttributionStates, l.States[:]),
			"thread": starlark.None, "running_util": starlark.None, "pass_util": starlark.None,
			"clock_offset_ms": starlark.Float(float64(a.ClockOffsetNs) / 1e6), "clock_how": starlark.String(a.ClockHow)}
		if len(l.Threads) > 0 {
			extra["thread"] = goValue(reflect.ValueOf(l.Threads[0]))
			extra["running_util"], extra["pass_util"] = starlark.Float(l.RunningUtil), starlark.Float(l.PassUtil)
		}
		return goStruct("struct", l, extra)
	})), nil
}

// statesValue is a level's states, {state: struct(share, mean_ms,
// p95_ms)}, named by names (engine.AttributionStates or BlackBoxStates).
func statesValue(names []string, sts []engine.StateStat) *starlark.Dict {
	d := starlark.NewDict(len(names))
	for s, name := range names {
		d.SetKey(starlark.String(name), goStruct("struct", sts[s], nil))
	}
	return d
}

// msView is a request's states, {state: ms} in the states' order (names;
// states in seconds), read-only: get, keys, items, values, [] and in
// work as on a dict. A Starlark dict a row cost 0.76 s of the default
// analyses over 100,000 requests (200,000 rows: attribution's and the
// black box's), nearly all of it building hash tables.
type msView struct {
	names  []string
	states []float64
}

var (
	_ starlark.IterableMapping = (*msView)(nil)
	_ starlark.HasAttrs        = (*msView)(nil)
)

func (v *msView) String() string {
	return "{" + strings.Join(valuesOf(v.Items(), func(t starlark.Tuple) string { return t[0].String() + ": " + t[1].String() }), ", ") + "}"
}
func (v *msView) Type() string               { return "states" }
func (v *msView) Freeze()                    {}
func (v *msView) Truth() starlark.Bool       { return len(v.names) > 0 }
func (v *msView) Hash() (uint32, error)      { return 0, fmt.Errorf("unhashable: states") }
func (v *msView) Len() int                   { return len(v.names) }
func (v *msView) Iterate() starlark.Iterator { return stringList(v.names).Iterate() }
func (v *msView) ms(s int) starlark.Value    { return starlark.Float(1000 * v.states[s]) }
func (v *msView) Get(k starlark.Value) (starlark.Value, bool, error) {
	s, ok := k.(starlark.String)
	if i := slices.Index(v.names, string(s)); ok && i >= 0 {
		return v.ms(i), true, nil
	}
	return nil, false, nil
}
func (v *msView) Items() []starlark.Tuple {
	out := make([]starlark.Tuple, len(v.names))
	for s, name := range v.names {
		out[s] = starlark.Tuple{starlark.String(name), v.ms(s)}
	}
	return out
}
func (v *msView) AttrNames() []string { return []string{"get", "items", "keys", "values"} }
func (v *msView) Attr(name string) (starlark.Value, error) {
	return dictMethod(v, name), nil
}

// requests(capture, preset = None, thread = ""): one row per successful
// request, warmup included, in requests.jsonl order: index, request_id,
// level, repeat, warmup, latency_ms, telemetry (whether the preset found
// its stages) and ms, {state: ms}, which adds up to latency_ms.
func attributionRequests(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	c, a, err := attribute(b, args, kw)
	if err != nil {
		return nil, err
	}
	reqs, err := c.Requests()
	if err != nil {
		return nil, err
	}
	rs := a.Requests
	return &listView{typ: "attribution_requests", n: len(rs), at: func(i int) starlark.Value {
		r := &rs[i]
		id := ""
		if r.Index < len(reqs) {
			id = reqs[r.Index].RequestID
		}
		return structOf(starlark.StringDict{
			"index": starlark.MakeInt(r.Index), "request_id": starlark.String(id), "level": starlark.String(r.Level),
			"repeat": starlark.MakeInt(r.Repeat), "warmup": starlark.Bool(r.Warmup), "latency_ms": starlark.Float(1000 * r.LatencyS),
			"telemetry": starlark.Bool(r.Telemetry), "ms": &msView{engine.AttributionStates, r.States[:]},
		})
	}}, nil
}
