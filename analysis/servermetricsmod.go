package analysis

import (
	"math"
	"slices"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
)

// The servermetrics module: the server's own Prometheus /metrics, as the
// metrics probe recorded them (server_metrics.jsonl), read under a metrics
// map that says which metric is the queue wait, the prefill, the decode...
// (analysis/engine.ReadServerMetrics; docs/ANALYSIS.md, "The server's own
// /metrics"):
//
//	load("servermetrics", "levels", "passes", "info", "ROLES", "GAUGES")
//	levels(capture, metrics_map = "")  # [struct(level, passes, server,
//	                                   #   roles = {role: struct(count, mean_ms, p50_ms, p95_ms)},
//	                                   #   gauges = {role: struct(mean, max, scrapes)})]
//	passes(capture, metrics_map = "")  # [struct(level, repeat, warmup, start_unix_ns, end_unix_ns,
//	                                   #   from_unix_ns, to_unix_ns, server, roles, gauges)]
//	info(capture, metrics_map = "")    # struct(file, server, source, unit, names = {role: metric})
//
// metrics_map is the path of a user's map file (options["metrics_map"]),
// whose servers are tried before the built-in ones (vLLM, SGLang); "" for
// the built-in ones alone. levels are in run order, over the scored passes
// (warmup left out); passes are every pass the probe summarised, warmup
// included. A role the server has no metric for, or that saw nothing in
// the pass, is not in roles or gauges; p50_ms and p95_ms are None for a
// metric without buckets.
func serverMetricsModule() *starlarkstruct.Module {
	return newModule("servermetrics", "servermetrics.", map[string]builtinFunc{
		"levels": serverMetricsLevels, "passes": serverMetricsPasses, "info": serverMetricsInfo,
	}, starlark.StringDict{"ROLES": stringList(engine.MetricsHistogramRoles), "GAUGES": stringList(engine.MetricsGaugeRoles)})
}

// ServerMetrics returns what the bundle's server_metrics.jsonl says under
// the metrics map at path ("" for the built-in one; engine.LoadMetricsMap),
// read once per map.
func (c *Capture) ServerMetrics(path string) (*engine.ServerMetrics, error) {
	return c.metrics.get(path, func() (*engine.ServerMetrics, error) {
		m, err := engine.LoadMetricsMap(path)
		if err != nil {
			return nil, err
		}
		return engine.ReadServerMetrics(c.Bundle.Path(bundle.ServerMetricsFile), m)
	})
}

// hasServerMetrics reports whether server_metrics.jsonl holds a metric of
// the built-in metrics map.
func (c *Capture) hasServerMetrics() bool {
	if !c.Bundle.Has(bundle.ServerMetricsFile) {
		return false
	}
	sm, err := c.ServerMetrics("")
	return err == nil && sm.HasRoles()
}

// readMetrics unpacks (capture, metrics_map = "") and reads.
func readMetrics(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (*Capture, *engine.ServerMetrics, error) {
	var cv *captureValue
	var path string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "metrics_map?", &path); err != nil {
		return nil, nil, err
	}
	sm, err := cv.c.ServerMetrics(path)
	return cv.c, sm, err
}

// nanNone is x, or None when it is NaN.
func nanNone(x float64) starlark.Value {
	return noneUnless(!math.IsNaN(x), starlark.Float(x))
}

// rolesValue is {role: struct(count, mean_ms, p50_ms, p95_ms)}, roles in
// engine.MetricsHistogramRoles order.
func rolesValue(rs map[string]engine.HistStats) *starlark.Dict {
	return roleDict(engine.MetricsHistogramRoles, rs, func(h engine.HistStats) starlark.Value {
		return structOf(starlark.StringDict{
			"count": starlark.MakeInt64(int64(math.Round(h.Count))), "mean_ms": starlark.Float(1000 * h.MeanS),
			"p50_ms": nanNone(1000 * h.P50S), "p95_ms": nanNone(1000 * h.P95S),
		})
	})
}

// gaugesValue is {role: struct(mean, max, scrapes)}.
func gaugesValue(gs map[string]engine.GaugeStats) *starlark.Dict {
	return roleDict(engine.MetricsGaugeRoles, gs, func(g engine.GaugeStats) starlark.Value { return goStruct("struct", g, nil) })
}

// roleDict is {role: f(m[role])} of the roles m has, in the order of roles.
func roleDict[T any](roles []string, m map[string]T, f func(T) starlark.Value) *starlark.Dict {
	d := starlark.NewDict(len(m))
	for _, role := range roles {
		if x, ok := m[role]; ok {
			d.SetKey(starlark.String(role), f(x))
		}
	}
	return d
}

// levels(capture, metrics_map = ""): per level, in run order, over its
// scored passes (engine.ServerMetrics.Levels); [] when the file is
// absent or holds none of the map's names.
func serverMetricsLevels(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	c, sm, err := readMetrics(b, args, kw)
	if err != nil {
		return nil, err
	}
	if !sm.HasRoles() {
		return starlark.NewList(nil), nil
	}
	order, err := runOrder(c)
	if err != nil {
		return nil, err
	}
	return starlark.NewList(valuesOf(sm.Levels(order), func(l engine.MetricsLevel) starlark.Value {
		return goStruct("struct", l, starlark.StringDict{"server": starlark.String(sm.Server), "roles": rolesValue(l.Roles), "gauges": gaugesValue(l.Gauges)})
	})), nil
}

// passes(capture, metrics_map = ""): every pass the probe summarised, in
// the order they began, warmup included.
func serverMetricsPasses(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	_, sm, err := readMetrics(b, args, kw)
	if err != nil {
		return nil, err
	}
	if !sm.HasRoles() {
		return starlark.NewList(nil), nil
	}
	return starlark.NewList(valuesOf(sm.Passes, func(p engine.MetricsPass) starlark.Value {
		return goStruct("struct", p, starlark.StringDict{"server": starlark.String(sm.Server), "roles": rolesValue(p.Roles), "gauges": gaugesValue(p.Gauges)})
	})), nil
}

// info(capture, metrics_map = ""): file (whether the bundle has
// server_metrics.jsonl), server ("" when the file holds none of the map's
// names), source (where its names come from), unit of its histograms, and
// names, {role: metric name} of the roles the file holds, in role order.
func serverMetricsInfo(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	_, sm, err := readMetrics(b, args, kw)
	if err != nil {
		return nil, err
	}
	names := roleDict(slices.Concat(engine.MetricsHistogramRoles, engine.MetricsGaugeRoles), sm.Names, func(n string) starlark.Value { return starlark.String(n) })
	return goStruct("struct", *sm, starlark.StringDict{"names": names}), nil
}
