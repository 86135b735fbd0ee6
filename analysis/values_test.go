package analysis

import (
	"slices"
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
		for i := range c.reqs {
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
		{&requestValue{c: c, i: i}, 44},
		{&spanValue{s: &c.ix.Spans(i)[0]}, 13},
		{&eventValue{e: &ec.ix.Events(ei)[0]}, 7},
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
