package analysis

import (
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// Every attribute a value lists resolves, the list is sorted and complete,
// and an unknown name is not an attribute.
func TestAttrTables(t *testing.T) {
	load := func(name string) (*Capture, int) {
		dir, _ := writeFixture(t, name)
		c, err := loadT(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := c.join()
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.reqs.v {
			if len(ix.Spans(i)) > 0 || len(ix.Events(i)) > 0 {
				return c, i
			}
		}
		t.Fatalf("%s: no request with spans or events", name)
		return nil, 0
	}
	c, i := load("refserver") // spans
	ec, ei := load("sglang")  // events
	for _, tc := range []struct {
		v     starlark.HasAttrs
		names int
	}{
		{&captureValue{c: c}, 21}, // realtime_lags
		{&requestValue{c: c, i: i}, 45},
		{&spanValue{s: &c.ix.v.Spans(i)[0]}, 13},
		{&eventValue{e: &ec.ix.v.Events(ei)[0]}, 7},
	} {
		names := tc.v.AttrNames()
		if !slices.IsSorted(names) || len(names) != tc.names {
			t.Errorf("%s: %d names, sorted %v; want %d sorted: %v", tc.v.Type(), len(names), slices.IsSorted(names), tc.names, names)
		}
		for _, n := range names {
			if x, err := tc.v.Attr(n); err != nil || x == nil {
				t.Errorf("%s.%s = %v, %v", tc.v.Type(), n, x, err)
			}
		}
		if x, err := tc.v.Attr("no_such_attr"); x != nil || err != nil {
			t.Errorf("%s.no_such_attr = %v, %v", tc.v.Type(), x, err)
		}
	}
}

// Every built-in module has its members, and each builtin is named as its
// errors have always named it: "module.member" (stats: "member").
func TestModuleNames(t *testing.T) {
	want := map[string]string{
		"stats":       "bootstrap_ci compare count histogram linregress mannwhitney max mean median metrics min percentile power_note stdev sum summary",
		"preset":      "attr between declare event gap rest span span_end span_start stage_summary",
		"evidence":    "balance event_meta occupancy workers",
		"table":       "cell level_label message new parse_level sprintf",
		"attribution": "STATES levels requests",
		"lengths":     "passes split stage_summary",
		"bundle":      "cuda gpu sched",
	}
	mods := builtinModules()
	for name, members := range want {
		m := mods[name]
		if m == nil {
			t.Errorf("no module %s", name)
			continue
		}
		if got := strings.Join(m.Members.Keys(), " "); got != members {
			t.Errorf("%s: members %s, want %s", name, got, members)
		}
		for k, v := range m.Members {
			b, ok := v.(*starlark.Builtin)
			if !ok {
				continue
			}
			wantName := name + "." + k
			if name == "stats" {
				wantName = k
			}
			if b.Name() != wantName {
				t.Errorf("%s.%s is named %s, want %s", name, k, b.Name(), wantName)
			}
		}
	}
}
