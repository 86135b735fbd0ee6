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
		"sched": jsonNames(visible(reflect.TypeFor[bundle.SchedRecord]())...),
		"cuda":  jsonNames(visible(reflect.TypeFor[bundle.CUDARecord]())...),
	}}
}

// visible is t and the structs it embeds, whose fields a record's JSON
// lines carry as its own.
func visible(t reflect.Type) []reflect.Type {
	out := []reflect.Type{t}
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			out = append(out, visible(ft)...)
		}
	}
	return out
}

// jsonNames is a struct of the json names of the fields of ts, each its own value.
func jsonNames(ts ...reflect.Type) *starlarkstruct.Struct {
	d := starlark.StringDict{}
	for _, t := range ts {
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				d[name] = starlark.String(name)
			}
		}
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, d)
}
