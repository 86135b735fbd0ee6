package analysis

import (
	"math"
	"slices"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
)

// The lengths module groups a capture's requests by the length of their
// audio (scripts/buckets.star; docs/ANALYSIS.md "Results by audio length"):
//
//	load("lengths", "split", "passes", "stage_summary")
//	sp = split(capture, options["length_buckets"])  # "auto", "off" or "5,15,30"
//	for b in sp.buckets:
//	    ps = passes(capture, sp, b.index)            # like capture.passes, the bucket's requests only
//	rows = stage_summary(capture, PRESET.spec, names, levels, sp)  # preset.stage_summary, a row per level and bucket
//
// The buckets are computed in Go (Capture.LengthSplit), and so are the
// passes' metrics (model/summary, as capture.passes).
func lengthsModule() *starlarkstruct.Module {
	return newModule("lengths", "lengths.", map[string]builtinFunc{
		"split": lengthSplit, "passes": lengthPasses, "stage_summary": lengthStageSummary,
	}, nil)
}

// splitValue is split()'s answer: struct(spec, auto, edges, buckets =
// [struct(index, name, lo, hi, requests, min_s, max_s)], empty, requests,
// unknown); hi is None for the last bucket.
type splitValue struct {
	*starlarkstruct.Struct
	sp *LengthSplit
}

func lengthSplit(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var spec string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "spec", &spec); err != nil {
		return nil, err
	}
	lb, err := ParseLengthBuckets(spec)
	if err != nil {
		return nil, err
	}
	sp, err := cv.c.LengthSplit(lb)
	if err != nil {
		return nil, err
	}
	var bs []starlark.Value
	for i, bk := range sp.Buckets {
		hi := noneUnless(!math.IsInf(bk.Hi, 1), starlark.Float(bk.Hi))
		bs = append(bs, goStruct("bucket", bk, starlark.StringDict{"index": starlark.MakeInt(i), "hi": hi}))
	}
	return &splitValue{sp: sp, Struct: goStruct("length_split", *sp, starlark.StringDict{
		"spec": starlark.String(lb.String()), "off": starlark.Bool(lb.Off), "buckets": starlark.NewList(bs), "empty": stringList(sp.Empty),
	})}, nil
}

// passes(capture, split, index): the metrics of every pass over bucket
// index's requests, as capture.passes has them.
func lengthPasses(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var sv *splitValue
	var k int
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "split", &sv, "index", &k); err != nil {
		return nil, err
	}
	ps, err := cv.c.BucketPasses(sv.sp, k)
	if err != nil {
		return nil, err
	}
	return passesValue(ps), nil
}

// stage_summary(capture, preset, names, levels, split): preset.stage_summary's
// rows per level and bucket (the row's bucket: its name), requests of
// unknown length left out.
func lengthStageSummary(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	var pv *presetValue
	var namesV, levelsV *starlark.List
	var sv *splitValue
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "preset", &pv, "names", &namesV, "levels", &levelsV, "split", &sv); err != nil {
		return nil, err
	}
	names, levels, rows, rc, err := stageInputs(b, cv, pv, namesV, levelsV)
	if err != nil {
		return nil, err
	}
	groups := valuesOf(sv.sp.Buckets, func(bk Bucket) string { return bk.Name })
	group := make([]string, rc.N)
	for i := range group {
		if i < len(sv.sp.Of) && sv.sp.Of[i] >= 0 {
			group[i] = groups[sv.sp.Of[i]]
		}
	}
	kept := slices.DeleteFunc(engine.SummarizeGroups(rc, rows, levels, names, group, groups), func(l engine.LevelStages) bool { return l.Worker == "" })
	return stageRowsValue(kept, names, "bucket"), nil
}
