package analysis

import (
	"reflect"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/bundle"
)

// The bundle module: the json names of the fields of capture.gpu's, capture.sched's and
// capture.cuda's rows,
// read from their records' tags (package bundle), so that a script names
// a field where Go declares it and a name no record has fails where the
// script says it (a struct has no such attribute) instead of reading None.
//
//	load("bundle", "gpu", "sched", "cuda")
//	r.get(sched.utilization)      # sched.jsonl's records (with proc's)
//	r.get(cuda.per_s)             # cuda.jsonl's
//	gpu.kind.period               # "period": the kinds of gpu.jsonl's records
//	r.get(gpu.period.util_mean)   # "util_mean": a field of a kind (the head's too)
func bundleModule() *starlarkstruct.Module {
	// A kind's record is the type GPURecord embeds under its name: GPUPeriod, "period".
	gpu, names := starlark.StringDict{}, starlark.StringDict{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[bundle.GPURecord]()) {
		if k := strings.ToLower(strings.TrimPrefix(f.Name, "GPU")); f.Anonymous && k != "head" {
			names[k] = starlark.String(k)
			gpu[k] = jsonNames(reflect.TypeFor[bundle.GPUHead](), f.Type.Elem())
		}
	}
	gpu["kind"] = starlarkstruct.FromStringDict(starlarkstruct.Default, names)
	return &starlarkstruct.Module{Name: "bundle", Members: starlark.StringDict{
		"gpu":   starlarkstruct.FromStringDict(starlarkstruct.Default, gpu),
		"sched": jsonNames(reflect.TypeFor[bundle.SchedRecord]()),
		"cuda":  jsonNames(reflect.TypeFor[bundle.CUDARecord]()),
	}}
}

// jsonNames is a struct of the json names of the fields of ts, each its
// own value: their own fields and those of the structs they embed, whose
// fields a record's JSON lines carry as its own.
func jsonNames(ts ...reflect.Type) *starlarkstruct.Struct {
	d := starlark.StringDict{}
	for _, t := range ts {
		for _, f := range reflect.VisibleFields(t) {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				d[name] = starlark.String(name)
			}
		}
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, d)
}
