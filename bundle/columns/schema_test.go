package columns

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// events.parquet's columns are request_index and bundle.Event's json
// names, in the record's order, a string dictionary-coded exactly where
// its tag says parquet:",dict"; an event with every field set comes back
// from events.jsonl, from events.parquet and from EventsOf the same. The
// names are read here from the struct's tags, not from EventFields: a
// column list kept apart from the record would drift from it.
func TestEventColumnsAreTheRecord(t *testing.T) {
	rt := reflect.TypeFor[bundle.Event]()
	want, dict := []string{"request_index"}, map[string]bool{}
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
		dict[name] = rt.Field(i).Tag.Get("parquet") == ",dict"
	}
	ev := bundle.Event{RequestID: "srv-1", Stage: "asr", EventName: "scheduler_first_emit", TimestampNs: 1764480000123456789,
		RunID: "run-1", PID: 4242, Metadata: map[string]any{"batch": 3.0}}
	if v := reflect.ValueOf(ev); slices.ContainsFunc(reflect.VisibleFields(rt), func(f reflect.StructField) bool { return v.FieldByIndex(f.Index).IsZero() }) {
		t.Fatalf("the test's event %+v leaves a field zero: it would not see it lost", ev)
	}
	dir := t.TempDir()
	jl, pq := filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "events.parquet")
	writeJSONL(t, jl, ev)
	e, err := ReadEventsJSONL(jl, []model.Request{{ServerRequestID: "srv-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeEvents(pq, e, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range pf.Metadata().RowGroups[0].Columns {
		name := c.MetaData.PathInSchema[0]
		got = append(got, name)
		if d := slices.Contains(c.MetaData.Encoding, format.RLEDictionary); d != dict[name] {
			t.Errorf("column %s dictionary-coded: %v, want %v (the record's tag)", name, d, dict[name])
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events.parquet's columns %v, want %v (request_index, then bundle.Event's json names)", got, want)
	}
	cols, err := readColumns(pq, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cols[0].int32s(-1)[0] != 0 || cols[1].str.At(0) != ev.RequestID || cols[2].str.At(0) != ev.Stage || cols[3].str.At(0) != ev.EventName ||
		cols[4].int64s()[0] != ev.TimestampNs || cols[5].str.At(0) != ev.RunID || cols[6].int64s()[0] != ev.PID || cols[7].str.At(0) != `{"batch":3}` {
		t.Errorf("events.parquet's row does not hold the event %+v", ev)
	}
	// Every column of the table (Events), from events.jsonl and from the record.
	one := EventsOf([]bundle.Event{ev}, 0)
	one.MetaRows, one.MetaText = e.MetaRows, e.MetaText
	if !reflect.DeepEqual(one, e) {
		t.Errorf("EventsOf:\n%+v\nevents.jsonl:\n%+v", one, e)
	}
}

// RequestCols is the same from requests.jsonl and from requests.parquet,
// and each of its columns is the request field of its name.
func TestRequestColsAreTheRecord(t *testing.T) {
	dir := t.TempDir()
	a, b := full(0), full(1)
	b.Level, b.Status, b.Repeat, b.LatencyS = "c16", "failed", 3, 2.5
	writeJSONL(t, filepath.Join(dir, bundle.RequestsFile), a, b)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromJSONL, err := s.RequestCols()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has(RequestsTable) {
		t.Fatal("no requests table written")
	}
	fromParquet, err := s.RequestCols()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSONL, fromParquet) {
		t.Errorf("RequestCols from requests.jsonl:\n%+v\nfrom requests.parquet:\n%+v", fromJSONL, fromParquet)
	}
	v, reqs := reflect.ValueOf(fromParquet).Elem(), []model.Request{a, b}
	for i := 1; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		for r := range reqs {
			want := reflect.ValueOf(reqs[r]).FieldByName(name)
			got := v.Field(i)
			var g any
			if s, ok := got.Interface().(Strings); ok {
				g = s.At(r)
			} else {
				g = got.Index(r).Interface()
			}
			if !want.IsValid() || !reflect.DeepEqual(reflect.ValueOf(g).Convert(want.Type()).Interface(), want.Interface()) {
				t.Errorf("RequestCols.%s[%d] = %v, want request field %s = %v", name, r, g, name, want)
			}
		}
	}
}
