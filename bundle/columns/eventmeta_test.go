package columns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
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
	e.MetaRows, e.MetaText = []int32{0}, []string{`{"last_step":9}`}
	p := filepath.Join(dir, EventsTable)
	if err := writeEvents(p, e, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	cols, err := readColumns(p, []string{"metadata"}, map[string]bool{"metadata": true})
	if err != nil {
		t.Fatal(err)
	}
	st := cols[0].str
	if got := []string{st.At(0), st.At(1)}; got[0] != `{"last_step":9}` || got[1] != "" {
		t.Errorf("metadata read back %q", got)
	}
}

// Events' metadata read from events.jsonl lands on its own rows, across the
// reader's chunks (the file is over chunkBytes), from memory and again
// from events.parquet; so do the other columns, where blank lines and a
// truncated last line move the rows after them up.
func TestEventMetadataFromJSONL(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), full(0))
	var b strings.Builder
	n := 0
	for b.Len() < chunkBytes+chunkBytes/2 {
		meta := ""
		if n%7 == 3 {
			meta = fmt.Sprintf(`,"metadata":{"i":%d}`, n)
		}
		fmt.Fprintf(&b, `{"request_id":"srv-1","stage":"s%d","event_name":"e","timestamp_ns":%d,"run_id":"r","pid":1%s}`+"\n", n%3, n, meta)
		if n%997 == 5 {
			b.WriteString("\n \n")
		}
		n++
	}
	b.WriteString(`{"request_id":"srv-1","sta`)
	if err := os.WriteFile(filepath.Join(dir, bundle.EventsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(from string) {
		t.Helper()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Wait()
		got, err := s.EventMetadata()
		if err != nil || len(got) != n {
			t.Fatalf("%s: %d rows of metadata (%v), want %d", from, len(got), err, n)
		}
		for i, m := range got {
			want := ""
			if i%7 == 3 {
				want = fmt.Sprintf(`{"i":%d}`, i)
			}
			if m != want {
				t.Fatalf("%s: row %d metadata %q, want %q", from, i, m, want)
			}
		}
		e, err := s.Events()
		if err != nil || e.Len() != n {
			t.Fatalf("%s: %d events (%v), want %d", from, e.Len(), err, n)
		}
		for i := range n {
			if e.TimestampNs[i] != int64(i) || e.Stage.At(i) != fmt.Sprintf("s%d", i%3) || e.RequestIndex[i] != 0 {
				t.Fatalf("%s: row %d: timestamp %d, stage %q, request %d; want %d, s%d, 0", from, i, e.TimestampNs[i], e.Stage.At(i), e.RequestIndex[i], i, i%3)
			}
		}
	}
	check("events.jsonl")
	check("events.parquet")
}
