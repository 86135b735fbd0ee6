package analysis

import (
	"reflect"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/bundle"
)

// The bundle module: the json names of the fields of capture.gpu's rows,
// read from their records' tags (package bundle), so that a script names
// a field where Go declares it and a name no record has fails where the
// script says it (a struct has no such attribute) instead of reading None.
//
//	load("bundle", "gpu")
//	gpu.kind.period               # "period": the kinds of gpu.jsonl's records
//	r.get(gpu.period.util_mean)   # "util_mean": a field of a kind (the head's too)
func bundleModule() *starlarkstruct.Module {
	kinds := map[string]reflect.Type{
		bundle.GPUKindDevice: reflect.TypeFor[bundle.GPUDevice](), bundle.GPUKindUtil: reflect.TypeFor[bundle.GPUUtil](),
		bundle.GPUKindPower: reflect.TypeFor[bundle.GPUPower](), bundle.GPUKindMem: reflect.TypeFor[bundle.GPUMem](),
		bundle.GPUKindClock: reflect.TypeFor[bundle.GPUClock](), bundle.GPUKindTemp: reflect.TypeFor[bundle.GPUTemp](),
		bundle.GPUKindThrottle: reflect.TypeFor[bundle.GPUThrottle](), bundle.GPUKindProc: reflect.TypeFor[bundle.GPUProc](),
		bundle.GPUKindGPM: reflect.TypeFor[bundle.GPUGPM](), bundle.GPUKindPCIe: reflect.TypeFor[bundle.GPUPCIe](),
		bundle.GPUKindPeriod: reflect.TypeFor[bundle.GPUPeriod](),
	}
	gpu, names := starlark.StringDict{}, starlark.StringDict{}
	for k, t := range kinds {
		names[k] = starlark.String(k)
		gpu[k] = jsonNames(reflect.TypeFor[bundle.GPUHead](), t)
	}
	gpu["kind"] = starlarkstruct.FromStringDict(starlarkstruct.Default, names)
	return &starlarkstruct.Module{Name: "bundle", Members: starlark.StringDict{"gpu": starlarkstruct.FromStringDict(starlarkstruct.Default, gpu)}}
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
