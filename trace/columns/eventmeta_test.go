package columns

import (
	"path/filepath"
	"testing"
)

// Events' metadata goes into events.parquet as JSON text and comes back.
func TestEventMetadataRoundTrip(t *testing.T) {
	dir := t.TempDir()
	e := &Events{}
	var d dictBuilder
	for _, s := range []string{"r1", "r1"} {
		d.addString(s)
	}
	e.RequestID = mergeStrings([]*dictBuilder{&d})
	one := func(v string) Strings {
		var b dictBuilder
		b.addString(v)
		b.addString(v)
		return mergeStrings([]*dictBuilder{&b})
	}
	e.Stage, e.EventName, e.RunID = one("asr"), one("stage_complete"), one("run")
	e.TimestampNs, e.PID = []int64{1, 2}, []int64{7, 7}
	e.RequestIndex = []int32{0, 0}
	e.Metadata = []string{`{"last_step":9}`, ""}
	p := filepath.Join(dir, EventsTable)
	if err := writeEvents(p, e, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	cols, err := readColumnsPlain(p, []string{"metadata"}, map[string]bool{"metadata": true})
	if err != nil {
		t.Fatal(err)
	}
	st := cols[0].strings()
	if got := []string{st.At(0), st.At(1)}; got[0] != `{"last_step":9}` || got[1] != "" {
		t.Errorf("metadata read back %q", got)
	}
}
