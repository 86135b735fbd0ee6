package analysis

import (
	"maps"
	"slices"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// The blackbox module: where each request's client latency went, seen
// from outside the server (analysis/engine.BlackBox; docs/ANALYSIS.md,
// "Seen from outside"): the client's clock, the host's per-thread time
// bins, CUDA synchronize time and NVML, no server telemetry.
//
//	load("blackbox", "levels", "requests", "info", "STATES")
//	levels(capture)    # [struct(level, n, latency_mean_ms, states = {state: struct(share, mean_ms, p95_ms)},
//	                   #         req_s, service_alone_ms, in_flight, held_share, parallelism, parallelism_min, parallelism_max, passes, connects, slow_connects,
//	                   #         groups = {size: count}, grouped_share, batch_share, batch_max, batch_mode, shape, shape_n,
//	                   #         service_busy, gpu_busy (None without NVML), gpu, cores_held, overlap, busy_threads, threads = [struct(name, tid)],
//	                   #         serving_rest_share (None where unknown), cpu_per_request_s, cpu_vs_solo (0 where unknown))]
//	requests(capture)  # [struct(index, level, repeat, warmup, latency_ms, service_alone_ms, tid, ms = {state: ms})]
//	info(capture)      # struct(solo, solo_level, bins, cuda, gpu): where the baselines and the bins came from
func blackboxModule() *starlarkstruct.Module {
	return newModule("blackbox", "blackbox.", map[string]builtinFunc{"levels": blackboxLevels, "requests": blackboxRequests, "info": blackboxInfo},
		starlark.StringDict{"STATES": stringList(engine.BlackBoxStates)})
}

// blackBox is the capture's black-box attribution and what it stood on.
type blackBox struct {
	r *engine.BlackBoxResult
	bbSources
}

// bbSources is what the attribution stands on, read once: its input, the
// thread bins' file ("" for none), and whether synchronize times and NVML
// samples were there. info() needs only these, not the attribution.
type bbSources struct {
	in        engine.BlackBoxInput
	bins      string
	cuda, gpu bool
}

// blackbox computes the capture's black-box attribution once.
func (c *Capture) blackbox() (*blackBox, error) {
	return c.bb.get(func() (*blackBox, error) {
		src, err := c.bbSources()
		if err != nil {
			return nil, err
		}
		return &blackBox{engine.BlackBox(src.in), *src}, nil
	})
}

// bbSources reads the black box's sources once.
func (c *Capture) bbSources() (*bbSources, error) {
	return c.bbSrc.get(func() (*bbSources, error) {
		rc, err := c.Tables.RequestCols()
		if err != nil {
			return nil, err
		}
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		in := engine.BlackBoxInput{Reqs: rc, SampleID: valuesOf(reqs, func(r model.Request) string { return r.SampleID })}
		// the solo level: the closed-loop level of concurrency 1
		if i := slices.IndexFunc(c.Bundle.Manifest.Levels, func(l model.LevelRun) bool { return l.Concurrency == 1 && !l.Warmup }); i >= 0 {
			in.Solo = c.Bundle.Manifest.Levels[i].Level
		}
		out := &bbSources{}
		if in.Bins, in.CUDA, out.bins, err = engine.ReadThreadBins(c.Bundle.Dir); err != nil {
			return nil, err
		}
		if in.GPU, _, err = engine.ReadGPU(c.Bundle.Path(bundle.GPUFile)); err != nil {
			return nil, err
		}
		out.cuda, out.gpu = len(in.CUDA) > 0, len(in.GPU) > 0
		if in.Levels, err = runOrder(c); err != nil {
			return nil, err
		}
		out.in = in
		return out, nil
	})
}

func blackboxArgs(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (*blackBox, error) {
	var cv *captureValue
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv); err != nil {
		return nil, err
	}
	return cv.c.blackbox()
}

// info(capture): solo ("level": each sample's service alone is its
// median server time at solo_level; "quickest": no c=1 level, its
// quickest server time in the capture), bins (the thread bins' file,
// None without), cuda and gpu (whether synchronize time and NVML samples
// were there).
func blackboxInfo(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv); err != nil {
		return nil, err
	}
	bb, err := cv.c.bbSources()
	if err != nil {
		return nil, err
	}
	solo, from := bb.in.SoloOf()
	return structOf(starlark.StringDict{
		"solo": starlark.String(solo), "solo_level": starlark.String(from),
		"bins": noneUnless(bb.bins != "", starlark.String(bb.bins)), "cuda": starlark.Bool(bb.cuda), "gpu": starlark.Bool(bb.gpu),
	}), nil
}

func blackboxLevels(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	bb, err := blackboxArgs(b, args, kw)
	if err != nil {
		return nil, err
	}
	return starlark.NewList(valuesOf(bb.r.Levels, func(l engine.BlackBoxLevel) starlark.Value {
		groups := starlark.NewDict(len(l.Groups.Sizes))
		for _, k := range slices.Sorted(maps.Keys(l.Groups.Sizes)) {
			groups.SetKey(starlark.MakeInt(k), starlark.MakeInt(l.Groups.Sizes[k]))
		}
		extra := starlark.StringDict{"states": statesValue(engine.BlackBoxStates, l.States[:]), "groups": groups,
			"batch_share": starlark.Float(l.Groups.BatchShare), "grouped_share": starlark.Float(l.Groups.GroupedShare),
			"batch_max": starlark.MakeInt(l.Groups.BatchMax), "batch_mode": starlark.MakeInt(l.Groups.BatchMode),
			"gpu_busy": noneUnless(l.GPUBusy >= 0, starlark.Float(l.GPUBusy)), "serving_rest_share": noneUnless(l.ServingRestShare >= 0, starlark.Float(l.ServingRestShare))}
		return goStruct("struct", l, extra)
	})), nil
}

func blackboxRequests(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	bb, err := blackboxArgs(b, args, kw)
	if err != nil {
		return nil, err
	}
	rs := bb.r.Requests
	return &listView{typ: "blackbox_requests", n: len(rs), at: func(i int) starlark.Value {
		r := &rs[i]
		return structOf(starlark.StringDict{
			"index": starlark.MakeInt(r.Index), "level": starlark.String(r.Level), "repeat": starlark.MakeInt(r.Repeat),
			"warmup": starlark.Bool(r.Warmup), "latency_ms": starlark.Float(1000 * r.LatencyS),
			"service_alone_ms": starlark.Float(1000 * r.ServiceAloneS), "tid": starlark.MakeInt64(r.TID), "ms": &msView{engine.BlackBoxStates, r.States[:]},
		})
	}}, nil
}
