package analysis

import (
	"encoding/json"
	"reflect"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle/columns"
)

// The evidence module gives the diagnosis what the stage table does not,
// computed in Go over the capture's tables (analysis/engine):
//
//	load("evidence", "occupancy", "event_meta")
//	occupancy(capture, preset, "first forward", "decode tail")  # {level: struct(mean, max)}
//	event_meta(capture, "stage_complete", "last_step")           # [struct(level, repeat, min, max, sum, n)]
//	occupancy(..., worker = "w0"), event_meta(..., worker = "w0") # over one worker's requests (behind a router)
//	workers(capture)                                             # struct(names, routed, confirmed, mismatched, unnamed)
//	balance(capture, preset, levels)                             # [struct(level, worker, requests, ok, busy_s, latency_mean_s, total_mean_s, total_rtf)]
func evidenceModule() *starlarkstruct.Module {
	return newModule("evidence", "evidence.", map[string]builtinFunc{
		"occupancy": occupancy, "event_meta": eventMeta, "workers": workersFn, "balance": balanceFn,
	}, nil)
}

// occupancy(capture, preset, from_stage, to_stage): per level, how many
// measured requests were between the start of from_stage and the end of
// to_stage at once: mean (time-weighted over each pass, averaged over the
// passes), max, and busy (the share of the time at least one was; busy_s:
// that time in seconds per pass).
func occupancy(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var pv *presetValue
	var from, to, worker string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "preset", &pv, "from_stage", &from, "to_stage", &to, "worker?", &worker); err != nil {
		return nil, err
	}
	rows, rc, err := cv.c.stageCols(pv.p)
	if err != nil {
		return nil, err
	}
	if rc, err = onlyWorker(cv.c, rc, worker); err != nil {
		return nil, err
	}
	occ := engine.Occupancies(rc, rows, from, to)
	out := starlark.NewDict(len(occ))
	for lv, o := range occ {
		out.SetKey(starlark.String(lv), goStruct("struct", o, nil))
	}
	return out, nil
}

// event_meta(capture, event_name, key): per scored pass, min, max, sum
// and count of a number in the metadata of each measured request's first
// event of that name.
func eventMeta(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var name, key, worker string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "event_name", &name, "key", &key, "worker?", &worker); err != nil {
		return nil, err
	}
	rc, err := cv.c.Tables.RequestCols()
	if err != nil {
		return nil, err
	}
	ev, err := cv.c.Tables.Events()
	if err != nil {
		return nil, err
	}
	meta, err := cv.c.Tables.EventMetadata()
	if err != nil {
		return nil, err
	}
	// Each request's first event of the name (table order is file order).
	byReq := make([]string, rc.N)
	if code := ev.EventName.Code(name); code >= 0 && len(meta) == len(ev.EventName.Codes) {
		done := make([]bool, rc.N)
		for j, c := range ev.EventName.Codes {
			if i := int(ev.RequestIndex[j]); c == code && i >= 0 && i < rc.N && !done[i] {
				byReq[i], done[i] = meta[j], true
			}
		}
	}
	first := func(i int) (map[string]any, bool) { // none ("") is no JSON: nil, false
		var m map[string]any
		return m, json.Unmarshal([]byte(byReq[i]), &m) == nil
	}
	if rc, err = onlyWorker(cv.c, rc, worker); err != nil {
		return nil, err
	}
	return goValue(reflect.ValueOf(engine.EventMeta(rc, first, key))), nil
}

// workers(capture): which workers served the requests (engine.FindWorkers):
// names (sorted), routed (requests a router span names a worker for),
// confirmed (of those, whose worker spans name the same instance),
// mismatched (whose worker spans name another) and unnamed (measured
// requests no span names a worker for).
func workersFn(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv); err != nil {
		return nil, err
	}
	w, err := cv.c.Workers()
	if err != nil {
		return nil, err
	}
	rc, err := cv.c.Tables.RequestCols()
	if err != nil {
		return nil, err
	}
	unnamed := 0
	for i := 0; i < rc.N && i < len(w.Of); i++ {
		if !rc.Warmup[i] && w.Of[i] == "" {
			unnamed++
		}
	}
	return goStruct("struct", *w, starlark.StringDict{"names": stringList(w.Names), "unnamed": starlark.MakeInt(unnamed)}), nil
}

// balance(capture, preset, levels): each level's share per worker
// (engine.Balance) over the scored passes: requests (any status), ok,
// busy_s (time with one of its requests inside the server's total, summed
// over the passes), latency_mean_s and total_mean_s of its ok requests, and
// total_rtf (server total per second of their audio; 0 when unknown).
func balanceFn(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var pv *presetValue
	var levelsV *starlark.List
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "preset", &pv, "levels", &levelsV); err != nil {
		return nil, err
	}
	levels, err := stringArgs(b.Name(), levelsV)
	if err != nil {
		return nil, err
	}
	w, err := cv.c.Workers()
	if err != nil {
		return nil, err
	}
	rows, rc, err := cv.c.stageCols(pv.p)
	if err != nil {
		return nil, err
	}
	return goValue(reflect.ValueOf(engine.Balance(rc, rows, w, levels))), nil
}

// onlyWorker returns rc with the requests of every worker but worker
// marked warmup, so that the evidence counts only worker's ("": rc as it
// is).
func onlyWorker(c *Capture, rc *columns.RequestCols, worker string) (*columns.RequestCols, error) {
	if worker == "" {
		return rc, nil
	}
	w, err := c.Workers()
	if err != nil {
		return nil, err
	}
	cp := *rc
	cp.Warmup = make([]bool, len(rc.Warmup))
	for i := range cp.Warmup {
		cp.Warmup[i] = rc.Warmup[i] || i >= len(w.Of) || w.Of[i] != worker
	}
	return &cp, nil
}
