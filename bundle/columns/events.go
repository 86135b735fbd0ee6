package columns

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/parquet-go/parquet-go"

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
	n := 0
	for _, p := range parts {
		n += len(p.codes)
	}
	out := Strings{Codes: make([]int32, 0, n)}
	distinct := 0 // at most: the chunks' dictionaries' sizes
	for _, p := range parts {
		distinct += len(p.dict)
	}
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
// file order. RequestIndex is the request each event belongs to (its
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
	// The events that carry a metadata object: their rows, ascending, and
	// the object's JSON text. Most events carry none, so the column is
	// kept sparse (a string per event cost 16 MB per million events, all
	// of it scanned by the garbage collector). Both are nil when the
	// events were read from events.parquet (ReadEvents), which leaves the
	// column to EventMetadata.
	MetaRows []int32
	MetaText []string
	metadata []string // MetaText spread over every row, once asked for (EventMetadata)
}

func (e *Events) names() []string { return e.EventName.distinct(nil) }

// Len is the number of events.
func (e *Events) Len() int { return len(e.TimestampNs) }

type eventsPart struct {
	reqID, stage, name, run dictBuilder
	ts, pid                 []int64
	metaRows                []int32 // rows of the part
	metaText                []string
}

func newEventsPart(n int) *eventsPart {
	p := &eventsPart{ts: make([]int64, 0, n), pid: make([]int64, 0, n)}
	for _, d := range []*dictBuilder{&p.reqID, &p.stage, &p.name, &p.run} {
		d.codes = make([]int32, 0, n)
	}
	return p
}

// ReadEventsJSONL reads events.jsonl (the SGLang-Omni request profiler's
// lines) on every core and joins each event to reqs.
func ReadEventsJSONL(path string, reqs []model.Request) (*Events, error) {
	parts, err := scanLines(path, newEventsPart, func(p *eventsPart, b []byte, _ int) error {
		var rid, stage, name, run []byte
		var ts, pid int64
		var meta string
		err := scanObject(b, func(k []byte, v value) error {
			var err error
			switch string(k) {
			case "request_id", "stage", "event_name", "run_id":
				var s []byte
				if v.kind == 's' && !v.esc {
					s = v.raw
				} else {
					var x string
					x, err = v.str()
					s = []byte(x)
				}
				switch k[0] {
				case 'r':
					if k[1] == 'e' {
						rid = s
					} else {
						run = s
					}
				case 's':
					stage = s
				case 'e':
					name = s
				}
			case "timestamp_ns":
				ts, err = v.int64()
			case "pid":
				pid, err = v.int64()
			case "metadata":
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
		p.reqID.add(rid)
		p.stage.add(stage)
		p.name.add(name)
		p.run.add(run)
		p.ts = append(p.ts, ts)
		if meta != "" {
			p.metaRows = append(p.metaRows, int32(len(p.ts)-1))
			p.metaText = append(p.metaText, meta)
		}
		p.pid = append(p.pid, pid)
		return nil
	})
	if err != nil {
		return nil, err
	}
	e := &Events{}
	pick := func(f func(*eventsPart) *dictBuilder) Strings {
		ds := make([]*dictBuilder, len(parts))
		for i, p := range parts {
			ds[i] = f(p)
		}
		return mergeStrings(ds)
	}
	// The four columns merge at once (a request id per request: its
	// merge alone took ~40 ms).
	var wg sync.WaitGroup
	var byID map[string]int32
	wg.Go(func() { byID = eventKeys(reqs) })
	wg.Go(func() { e.RequestID = pick(func(p *eventsPart) *dictBuilder { return &p.reqID }) })
	wg.Go(func() { e.Stage = pick(func(p *eventsPart) *dictBuilder { return &p.stage }) })
	wg.Go(func() { e.EventName = pick(func(p *eventsPart) *dictBuilder { return &p.name }) })
	e.RunID = pick(func(p *eventsPart) *dictBuilder { return &p.run })
	n, m := 0, 0
	for _, p := range parts {
		n += len(p.ts)
		m += len(p.metaRows)
	}
	e.TimestampNs, e.PID = make([]int64, 0, n), make([]int64, 0, n)
	e.MetaRows, e.MetaText = make([]int32, 0, m), make([]string, 0, m)
	for _, p := range parts {
		base := int32(len(e.TimestampNs))
		for _, r := range p.metaRows {
			e.MetaRows = append(e.MetaRows, base+r)
		}
		e.MetaText = append(e.MetaText, p.metaText...)
		e.TimestampNs = append(e.TimestampNs, p.ts...)
		e.PID = append(e.PID, p.pid...)
	}
	wg.Wait()
	e.join(byID)
	return e, nil
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

type eventRow struct {
	RequestIndex *int32  `parquet:"request_index,optional"`
	RequestID    string  `parquet:"request_id"` // plain: an id per request, dictionary inserts cost more than Snappy over its runs
	Stage        string  `parquet:"stage,dict"`
	EventName    string  `parquet:"event_name,dict"`
	TimestampNs  int64   `parquet:"timestamp_ns"`
	RunID        string  `parquet:"run_id,dict"`
	PID          int64   `parquet:"pid"`
	Metadata     *string `parquet:"metadata,optional"` // JSON text
}

func writeEvents(path string, e *Events, meta map[string]string) error {
	return writeTable(path, meta, e.Len(), nil, func(w *parquet.GenericWriter[eventRow], lo, hi int) error {
		k, _ := slices.BinarySearch(e.MetaRows, int32(lo)) // the first event at or after lo with metadata
		return writeBatches(w, lo, hi, func(i int) eventRow {
			r := eventRow{RequestID: e.RequestID.At(i), Stage: e.Stage.At(i), EventName: e.EventName.At(i),
				TimestampNs: e.TimestampNs[i], RunID: e.RunID.At(i), PID: e.PID[i]}
			if e.RequestIndex[i] >= 0 {
				r.RequestIndex = &e.RequestIndex[i]
			}
			if k < len(e.MetaRows) && int(e.MetaRows[k]) == i {
				r.Metadata = &e.MetaText[k]
				k++
			}
			return r
		})
	})
}

// ReadEvents reads the columns of events.parquet that the stage engine
// needs (request_index, stage, event_name, timestamp_ns); the others stay
// empty.
func ReadEvents(path string) (*Events, error) {
	cols, err := readColumns(path, []string{"request_index", "stage", "event_name", "timestamp_ns"})
	if err != nil {
		return nil, err
	}
	return &Events{
		RequestIndex: cols[0].int32s(-1),
		Stage:        cols[1].strings(),
		EventName:    cols[2].strings(),
		TimestampNs:  cols[3].int64s(),
	}, nil
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
	cols, err := readColumnsPlain(s.Path(EventsTable), []string{"metadata"}, map[string]bool{"metadata": true})
	if err != nil {
		return nil, err
	}
	e.metadata = cols[0].str.values()
	return e.metadata, nil
}
