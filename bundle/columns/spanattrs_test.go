package columns

import (
	"path/filepath"
	"testing"
)

// Spans' attributes go into spans.parquet as JSON text and come back, for
// the engine's Attr (numbers) and AttrString (a router's worker name).
func TestSpanAttributesRoundTrip(t *testing.T) {
	one := func(v string) Strings {
		var b dictBuilder
		b.addString(v)
		b.addString(v)
		return mergeStrings([]*dictBuilder{&b})
	}
	s := &Spans{RequestIndex: []int32{0, 1}, TraceID: []string{"t", "u"}, SpanID: []string{"a", "b"}, ParentSpanID: []string{"", ""},
		Name: one("route"), Service: one("asrprof-router"), Kind: one("SERVER"), StatusCode: one("UNSET"),
		StartUnixNs: []int64{1, 2}, EndUnixNs: []int64{3, 4},
		Attributes: []string{`{"router.worker":"w\"1","router.worker.in_flight":2}`, ""}}
	p := filepath.Join(t.TempDir(), SpansTable)
	if err := writeSpans(p, s, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpans(p)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := got.AttrString(0, "router.worker"); !ok || w != `w"1` {
		t.Errorf("router.worker read back %q, %v", w, ok)
	}
	if n, ok := got.Attr(0, "router.worker.in_flight"); !ok || n != 2 {
		t.Errorf("router.worker.in_flight read back %v, %v", n, ok)
	}
	if _, ok := got.AttrString(1, "router.worker"); ok || got.Attributes[1] != "" {
		t.Errorf("a span without attributes read back %q", got.Attributes[1])
	}
}
