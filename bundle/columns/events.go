package columns

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/join"
)

// Strings is a column of strings, dictionary-coded: value i is
// Dict[Codes[i]]. Columns of few distinct values (event names, stages,
// levels) cost 4 bytes a row this way and compare as integers.
type Strings struct {
	Codes []int32
	Dict  []string
}

// At returns value i.
func (s *Strings) At(i int) string { return s.Dict[s.Codes[i]] }

// Code returns the code of v, or -1 when no row holds it.
func (s *Strings) Code(v string) int32 { return int32(slices.Index(s.Dict, v)) }

// values returns every row's value.
func (s *Strings) values() []string {
	out := make([]string, len(s.Codes))
	for i, c := range s.Codes {
		out[i] = s.Dict[c]
	}
	return out
}

// distinct returns the distinct values of the rows that keep accepts
// (every row when keep is nil), sorted.
func (s *Strings) distinct(keep func(row int) bool) []string {
	seen := make([]bool, len(s.Dict))
	for i, c := range s.Codes {
		if keep == nil || keep(i) {
			seen[c] = true
		}
	}
	var out []string
	for c, ok := range seen {
		if ok {
			out = append(out, s.Dict[c])
		}
	}
	sort.Strings(out)
	return out
}

// dictBuilder codes the strings of one chunk.
type dictBuilder struct {
	codes []int32
	dict  []string
	ix    map[string]int32
}

func (d *dictBuilder) add(b []byte) {
	// A file's rows come in runs (a request's events, one stage, one
	// run id): the last row's string is the likeliest.
	if n := len(d.codes); n > 0 && d.dict[d.codes[n-1]] == string(b) {
		d.codes = append(d.codes, d.codes[n-1])
		return
	}
	if c, ok := d.ix[string(b)]; ok { // string(b) here allocates nothing
		d.codes = append(d.codes, c)
		return
	}
	d.addString(string(b))
}

func (d *dictBuilder) addString(s string) {
	c, ok := d.ix[s]
	if !ok {
		if d.ix == nil {
			d.ix = map[string]int32{}
		}
		c = int32(len(d.dict))
		d.dict = append(d.dict, s)
		d.ix[s] = c
	}
	d.codes = append(d.codes, c)
}

// mergeStrings concatenates chunks' coded columns under one dictionary.
func mergeStrings(parts []*dictBuilder) Strings {
	n, distinct := 0, 0 // distinct at most: the chunks' dictionaries' sizes
	for _, p := range parts {
		n += len(p.codes)
		distinct += len(p.dict)
	}
	out := Strings{Codes: make([]int32, 0, n)}
	ix := make(map[string]int32, distinct)
	for _, p := range parts {
		remap := make([]int32, len(p.dict))
		for i, s := range p.dict {
			c, ok := ix[s]
			if !ok {
				c = int32(len(out.Dict))
				out.Dict = append(out.Dict, s)
				ix[s] = c
			}
			remap[i] = c
		}
		for _, c := range p.codes {
			out.Codes = append(out.Codes, remap[c])
		}
	}
	return out
}

// Events is the events table in memory, one entry per events.jsonl line in
// file order: a column per field of bundle.Event (bundle.EventFields),
// under the field's Go name (Strings for a string, []int64 for an
// integer), and RequestIndex, the request each event belongs to (its
// request_index; -1 for none): the request whose server_request_id, or
// request_id when the server sent none, is the event's request_id, as
// trace/join joins them.
type Events struct {
	RequestIndex []int32
	RequestID    Strings
	Stage        Strings
	EventName    Strings
	TimestampNs  []int64
	RunID        Strings
	PID          []int64
	// The metadata object (bundle.Event's one field of kind object): the
	// rows that carry one, ascending, and its JSON text. Most events carry
	// none, so the column is kept sparse (a string per event cost 16 MB
	// per million events, all of it scanned by the garbage collector).
	// Both are nil when the events were read from events.parquet
	// (ReadEvents), which leaves the column to EventMetadata.
	MetaRows []int32
	MetaText []string
	metadata []string // MetaText spread over every row, once asked for (EventMetadata)
}

// eventCol is one column of Events: field f of bundle.Event and where
// Events holds it.
type eventCol struct {
	f   *model.Field
	off uintptr // of the column in Events
}

func (c *eventCol) str(e *Events) *Strings { return (*Strings)(unsafe.Add(unsafe.Pointer(e), c.off)) }
func (c *eventCol) i64(e *Events) *[]int64 { return (*[]int64)(unsafe.Add(unsafe.Pointer(e), c.off)) }

// eventCols are Events' columns, one per field of bundle.Event but the
// object (metadata); it panics when Events lacks one.
var eventCols = func() []eventCol {
	var out []eventCol
	t := reflect.TypeFor[Events]()
	for i := range bundle.EventFields {
		f := &bundle.EventFields[i]
		if f.Kind == model.KindObject {
			continue
		}
		sf, ok := t.FieldByName(f.GoName)
		want := map[model.FieldKind]reflect.Type{model.KindString: reflect.TypeFor[Strings](), model.KindInt64: reflect.TypeFor[[]int64]()}[f.Kind]
		if !ok || sf.Type != want {
			panic(fmt.Sprintf("columns: Events.%s: want a %v for bundle.Event's %s", f.GoName, want, f.Name))
		}
		if f.Index >= len(eventLine{}.str) {
			panic("columns: bundle.Event has more fields than eventLine holds")
		}
		out = append(out, eventCol{f, sf.Offset})
	}
	return out
}()

// eventMeta is bundle.Event's object field (metadata).
var eventMeta = bundle.EventFields[slices.IndexFunc(bundle.EventFields, func(f model.Field) bool { return f.Kind == model.KindObject })]

func (e *Events) names() []string { return e.EventName.distinct(nil) }

// Len is the number of events.
func (e *Events) Len() int { return len(e.TimestampNs) }

// eventsPart is a chunk of events.jsonl read: its columns by field index.
type eventsPart struct {
	str      []dictBuilder
	i64      [][]int64
	metaRows []int32 // rows of the part
	metaText []string
	n        int // rows
}

// eventLine is one line's values, by field index (on the stack: a line
// held in the part cost a write barrier a field).
type eventLine struct {
	str [8][]byte
	i64 [8]int64
}

func newEventsPart(n int) *eventsPart {
	k := len(bundle.EventFields)
	p := &eventsPart{str: make([]dictBuilder, k), i64: make([][]int64, k)}
	for _, c := range eventCols {
		if c.f.Kind == model.KindString {
			p.str[c.f.Index].codes = make([]int32, 0, n)
		} else {
			p.i64[c.f.Index] = make([]int64, 0, n)
		}
	}
	return p
}

// ReadEventsJSONL reads events.jsonl (the SGLang-Omni request profiler's
// lines) on every core and joins each event to reqs.
func ReadEventsJSONL(path string, reqs []model.Request) (*Events, error) {
	parts, err := scanLines(path, newEventsPart, func(p *eventsPart, b []byte, _ int) error {
		var l eventLine
		var meta string
		next := 0
		err := scanObject(b, func(k []byte, v value) error {
			f := fieldNamed(bundle.EventFields, next, k)
			if f == nil {
				return nil
			}
			next = f.Index + 1
			var err error
			switch f.Kind {
			case model.KindString:
				if v.kind == 's' && !v.esc {
					l.str[f.Index] = v.raw
				} else {
					var x string
					x, err = v.str()
					l.str[f.Index] = []byte(x)
				}
			case model.KindInt64:
				l.i64[f.Index], err = v.int64()
			case model.KindObject:
				if v.kind == '{' && len(v.raw) > 2 {
					meta = string(v.raw)
				} else if v.kind != '{' && !v.isNull() {
					err = fmt.Errorf("want an object, got %s", v.what())
				}
			}
			return fieldErr(k, err)
		})
		if err != nil {
			return err
		}
		p.add(&l, meta)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var byID map[string]int32
	var wg sync.WaitGroup
	wg.Go(func() { byID = eventKeys(reqs) })
	e := mergeEvents(parts)
	wg.Wait()
	e.join(byID)
	return e, nil
}

// add appends line l (and its metadata's JSON text, "" for none) to p.
func (p *eventsPart) add(l *eventLine, meta string) {
	for _, c := range eventCols {
		if i := c.f.Index; c.f.Kind == model.KindString {
			p.str[i].add(l.str[i])
		} else {
			p.i64[i] = append(p.i64[i], l.i64[i])
		}
	}
	if meta != "" {
		p.metaRows = append(p.metaRows, int32(p.n))
		p.metaText = append(p.metaText, meta)
	}
	p.n++
}

// mergeEvents concatenates parts into one table, RequestIndex left out.
// The string columns of several parts merge at once (a request id per
// request: its merge alone took ~40 ms).
func mergeEvents(parts []*eventsPart) *Events {
	e := &Events{MetaRows: []int32{}, MetaText: []string{}} // not nil: not read from events.parquet
	var wg sync.WaitGroup
	for _, c := range eventCols {
		i, c := c.f.Index, &c
		if c.f.Kind == model.KindString {
			merge := func() {
				ds := make([]*dictBuilder, len(parts))
				for k, p := range parts {
					ds[k] = &p.str[i]
				}
				*c.str(e) = mergeStrings(ds)
			}
			if len(parts) > 1 {
				wg.Go(merge)
			} else {
				merge()
			}
			continue
		}
		xs := make([][]int64, len(parts))
		for k, p := range parts {
			xs[k] = p.i64[i]
		}
		*c.i64(e) = slices.Concat(xs...)
	}
	base := int32(0)
	for _, p := range parts {
		for _, r := range p.metaRows {
			e.MetaRows = append(e.MetaRows, base+r)
		}
		e.MetaText = append(e.MetaText, p.metaText...)
		base += int32(p.n)
	}
	wg.Wait()
	return e
}

// EventsOf is the table of evs, every event of request ix; the metadata
// is left out (MetaRows empty).
func EventsOf(evs []bundle.Event, ix int32) *Events {
	p := newEventsPart(len(evs))
	for i := range evs {
		var l eventLine
		for _, c := range eventCols {
			at := unsafe.Add(unsafe.Pointer(&evs[i]), c.f.Offset)
			if c.f.Kind == model.KindString {
				l.str[c.f.Index] = []byte(*(*string)(at))
			} else {
				l.i64[c.f.Index] = *(*int64)(at)
			}
		}
		p.add(&l, "")
	}
	e := mergeEvents([]*eventsPart{p})
	e.RequestIndex = slices.Repeat([]int32{ix}, len(evs))
	return e
}

// eventKeys maps the id that a request's events carry (join.EventKey) to
// the request; the first request of an id wins.
func eventKeys(reqs []model.Request) map[string]int32 {
	byID := make(map[string]int32, len(reqs))
	for i := len(reqs) - 1; i >= 0; i-- {
		if id := join.EventKey(&reqs[i]); id != "" {
			byID[id] = int32(i)
		}
	}
	return byID
}

// join sets RequestIndex, from the requests' eventKeys: once per distinct
// request id, not per event.
func (e *Events) join(byID map[string]int32) {
	owner := make([]int32, len(e.RequestID.Dict))
	for c, id := range e.RequestID.Dict {
		owner[c] = -1
		if i, ok := byID[id]; ok {
			owner[c] = i
		}
	}
	e.RequestIndex = make([]int32, len(e.RequestID.Codes))
	for i, c := range e.RequestID.Codes {
		e.RequestIndex[i] = owner[c]
	}
}

// eventSchema is events.parquet's schema: request_index, then a column
// per field of bundle.Event (a string plain unless its tag says dict: a
// request id is one per request, and dictionary inserts cost more than
// Snappy over its runs; the object as optional JSON text).
var eventSchema = func() *parquet.Schema {
	fs := []reflect.StructField{{Name: "F0", Type: reflect.TypeFor[*int32](), Tag: `parquet:"request_index,optional"`}}
	for _, f := range bundle.EventFields {
		t, tag := reflect.TypeFor[int64](), ""
		switch {
		case f.Kind == model.KindObject:
			t, tag = reflect.TypeFor[*string](), ",optional"
		case f.Kind == model.KindString:
			t = reflect.TypeFor[string]()
			if f.Dict {
				tag = ",dict"
			}
		}
		fs = append(fs, reflect.StructField{Name: fmt.Sprintf("F%d", len(fs)), Type: t, Tag: reflect.StructTag(fmt.Sprintf(`parquet:"%s%s"`, f.Name, tag))})
	}
	return parquet.NewSchema("eventRow", parquet.SchemaOf(reflect.New(reflect.StructOf(fs)).Interface()))
}()

// writeEvents writes events.parquet, 4096 rows at a time, column by
// column (a part of writeTable is at most one row group).
func writeEvents(path string, e *Events, meta map[string]string) error {
	return writeTable(path, meta, e.Len(), eventSchema, func(w *parquet.GenericWriter[any], lo, hi int) error {
		cw := w.ColumnWriters()
		vals := make([]parquet.Value, 0, 4096)
		k, _ := slices.BinarySearch(e.MetaRows, int32(lo)) // the first event at or after lo with metadata
		for b := lo; b < hi; b += cap(vals) {
			// write writes column c of rows [b, end).
			write := func(c int, value func(i int) parquet.Value) error {
				for i := b; i < min(hi, b+cap(vals)); i++ {
					vals = append(vals, value(i))
				}
				defer func() { vals = vals[:0] }()
				// 64 rows a call, as GenericWriter.Write writes a row
				// type's: the pages end where they did.
				for v := vals; len(v) > 0; v = v[min(64, len(v)):] {
					if _, err := cw[c].WriteRowValues(v[:min(64, len(v))]); err != nil {
						return err
					}
				}
				return nil
			}
			err := write(0, func(i int) parquet.Value {
				if e.RequestIndex[i] < 0 {
					return parquet.Value{}.Level(0, 0, 0)
				}
				return parquet.Int32Value(e.RequestIndex[i]).Level(0, 1, 0)
			})
			for _, c := range eventCols {
				if err != nil {
					break
				}
				if c.f.Kind == model.KindString {
					s := c.str(e)
					err = write(1+c.f.Index, func(i int) parquet.Value {
						v := s.Dict[s.Codes[i]]
						return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(v), len(v)))
					})
				} else {
					x := *c.i64(e)
					err = write(1+c.f.Index, func(i int) parquet.Value { return parquet.Int64Value(x[i]) })
				}
			}
			if err != nil {
				return err
			}
			m := 1 + eventMeta.Index
			if err := write(m, func(i int) parquet.Value {
				if k < len(e.MetaRows) && int(e.MetaRows[k]) == i {
					k++
					t := e.MetaText[k-1]
					return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(t), len(t))).Level(0, 1, m)
				}
				return parquet.Value{}.Level(0, 0, m)
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReadEvents reads the columns of events.parquet that the stage engine
// needs (request_index, stage, event_name, timestamp_ns); the other
// columns stay empty.
func ReadEvents(path string) (*Events, error) {
	cols, err := readColumns(path, []string{"request_index", "stage", "event_name", "timestamp_ns"}, nil)
	if err != nil {
		return nil, err
	}
	e := &Events{RequestIndex: cols[0].int32s(-1)}
	for _, col := range cols[1:] {
		c := &eventCols[slices.IndexFunc(eventCols, func(c eventCol) bool { return c.f.Name == col.name })]
		if c.f.Kind == model.KindString {
			*c.str(e) = col.str
		} else {
			*c.i64(e) = col.int64s()
		}
	}
	return e, nil
}

// EventMetadata returns each event's metadata as JSON text ("" when it has
// none), in the events table's order. ReadEvents leaves the column out:
// it is read here, once, when a script asks for it.
func (s *Set) EventMetadata() ([]string, error) {
	e, err := s.Events()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.metadata != nil || e.Len() == 0 {
		return e.metadata, nil
	}
	if e.MetaRows != nil { // read from events.jsonl
		e.metadata = make([]string, e.Len())
		for k, r := range e.MetaRows {
			e.metadata[r] = e.MetaText[k]
		}
		return e.metadata, nil
	}
	if _, ok := s.rec.Tables[EventsTable]; !ok {
		return nil, nil
	}
	cols, err := readColumns(s.Path(EventsTable), []string{eventMeta.Name}, map[string]bool{eventMeta.Name: true})
	if err != nil {
		return nil, err
	}
	e.metadata = cols[0].str.values()
	return e.metadata, nil
}
