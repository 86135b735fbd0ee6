package analysis

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"github.com/asrprof/asrprof/bundle"
)

// An event's Starlark attributes are bundle.Event's json names (read here
// from the tags), each the field's value.
func TestEventAttrsAreTheRecord(t *testing.T) {
	rt := reflect.TypeFor[bundle.Event]()
	var want []string
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(eventAttrs.names(), want) {
		t.Errorf("event attributes %v, want %v", eventAttrs.names(), want)
	}
	ev := &eventValue{e: &bundle.Event{RequestID: "r", Stage: "asr", EventName: "x", TimestampNs: 5, RunID: "run", PID: 7, Metadata: map[string]any{"k": "v"}}}
	for name, w := range map[string]starlark.Value{"request_id": starlark.String("r"), "stage": starlark.String("asr"), "event_name": starlark.String("x"),
		"timestamp_ns": starlark.MakeInt(5), "run_id": starlark.String("run"), "pid": starlark.MakeInt(7)} {
		if got, err := ev.Attr(name); err != nil || got.String() != w.String() {
			t.Errorf("event.%s = %v (%v), want %v", name, got, err, w)
		}
	}
	if m, err := ev.Attr("metadata"); err != nil || m.Type() != "metadata" {
		t.Errorf("event.metadata = %v (%v), want a metadata mapping", m, err)
	}
}

// The bundle module's names are the records' json names: a gpu period's
// util_mean, a util sample's util_pct, the kinds.
func TestBundleModuleNames(t *testing.T) {
	gpu := bundleModule().Members["gpu"].(starlark.HasAttrs)
	for _, c := range []struct{ kind, field, want string }{{"period", "util_mean", "util_mean"}, {"period", "kind", "kind"}, {"util", "util_pct", "util_pct"}, {"kind", "mem", "mem"}} {
		k, err := gpu.Attr(c.kind)
		if err != nil || k == nil {
			t.Fatalf("gpu.%s: %v", c.kind, err)
		}
		if v, err := k.(starlark.HasAttrs).Attr(c.field); err != nil || v != starlark.String(c.want) {
			t.Errorf("gpu.%s.%s = %v (%v), want %q", c.kind, c.field, v, err, c.want)
		}
	}
	// sched's and cuda's records, with sched's embedded run-queue part
	for _, c := range []struct{ rec, field string }{{"sched", "utilization"}, {"sched", "runq_p99_us"}, {"sched", "source"}, {"cuda", "per_s"}, {"cuda", "symbol"}} {
		m := bundleModule().Members[c.rec].(starlark.HasAttrs)
		if v, err := m.Attr(c.field); err != nil || v != starlark.String(c.field) {
			t.Errorf("%s.%s = %v (%v), want %q", c.rec, c.field, v, err, c.field)
		}
	}
	if v, _ := bundleModule().Members["sched"].(starlark.HasAttrs).Attr("per_s"); v != nil {
		t.Errorf("sched.per_s = %v: a sched record has no per_s", v)
	}
	kinds, _ := gpu.Attr("kind")
	want := []string{bundle.GPUKindDevice, bundle.GPUKindUtil, bundle.GPUKindPower, bundle.GPUKindMem, bundle.GPUKindClock, bundle.GPUKindTemp,
		bundle.GPUKindThrottle, bundle.GPUKindProc, bundle.GPUKindGPM, bundle.GPUKindPCIe, bundle.GPUKindPeriod}
	slices.Sort(want)
	if got := kinds.(starlark.HasAttrs).AttrNames(); !slices.Equal(got, want) {
		t.Errorf("gpu.kind has %v, want the kinds of gpu.jsonl %v", got, want)
	}
	if v, _ := gpu.Attr("util"); v != nil {
		if x, _ := v.(starlark.HasAttrs).Attr("util_mean"); x != nil {
			t.Errorf("gpu.util.util_mean = %v: a util sample has no util_mean", x)
		}
	}
}
