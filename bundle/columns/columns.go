// Package columns derives a capture bundle's tables: Apache Parquet files,
// in the bundle's tables/ folder, made from its crash-safe sources
// (requests.jsonl, events.jsonl, spans.otlp and the probes' JSONL files),
// for the analysis engine and for users' own tools (DuckDB, pandas,
// polars; docs/BUNDLE.md).
//
// The sources stay the truth: a table is derived, and Open rebuilds it
// whenever its sources changed (size or modification time) or it was
// written by another Version of this package, as recorded in
// tables/tables.json. Tables are written through a temporary file and a
// rename, so a reader never sees half of one; a bundle that cannot be
// written to (a read-only copy) is analysed from the tables held in
// memory.
//
// The per-request stage boundaries (stages.parquet) depend on a stage
// preset, which this package does not know: the analysis engine computes
// them and hands them to WriteStages, and Stages returns them while they
// are fresh for the same preset.
package columns

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// Version is the tables' format version. Raise it whenever a table's
// columns or their meaning change: Open then rebuilds older tables.
// (4: stages.parquet no longer repeats the request's ids, level and the
// preset, which requests.parquet and the file's metadata hold; 3:
// spans.parquet keeps the spans' attributes; 2 wrote nulls.)
const Version = 4

// The tables folder, its record, and its tables.
const (
	Dir           = "tables"
	ManifestFile  = "tables.json"
	RequestsTable = "requests.parquet"
	EventsTable   = "events.parquet"
	SpansTable    = "spans.parquet"
	GPUSamples    = "gpu_samples.parquet"
	GPUPeriods    = "gpu_periods.parquet"
	SchedTable    = "sched.parquet"
	CUDATable     = "cuda.parquet"
	StagesTable   = "stages.parquet"
)

// sources lists each preset-independent table's source files; every
// table but requests also depends on requests.jsonl (its request_index
// column is the join).
var sources = map[string][]string{
	RequestsTable: {bundle.RequestsFile},
	EventsTable:   {bundle.EventsFile, bundle.RequestsFile},
	SpansTable:    {bundle.SpansFile, bundle.RequestsFile},
	GPUSamples:    {bundle.GPUFile},
	GPUPeriods:    {bundle.GPUFile},
	SchedTable:    {bundle.SchedFile},
	CUDATable:     {bundle.CUDAFile},
}

// source is what the record keeps of a source file to tell it changed.
type source struct {
	Size        int64 `json:"size"`
	MtimeUnixNs int64 `json:"mtime_unix_ns"`
}

type entry struct {
	Rows    int               `json:"rows"`
	Sources map[string]source `json:"sources"`
	// Events and spans: the distinct event names; the distinct names of
	// the server's spans (client spans left out). Sorted.
	Names []string `json:"names,omitempty"`
	// Stage boundaries only: the preset, and its declaration's text.
	Preset string `json:"preset,omitempty"`
	Spec   string `json:"spec,omitempty"`
}

type record struct {
	Version int              `json:"version"`
	Schema  string           `json:"schema"` // schemaID
	Tables  map[string]entry `json:"tables"`
}

// schemaID fingerprints the columns this binary writes. Tables written
// with others are rebuilt even where Version was not raised: a request
// field added to model (connected_unix_ns was) left older tables "fresh"
// and every analysis failing on the missing column.
var schemaID = func() string {
	h := sha256.New()
	for _, s := range []*parquet.Schema{requestSchema, eventSchema, parquet.SchemaOf(new(stageRow)), parquet.SchemaOf(new(spanRow))} {
		io.WriteString(h, s.String())
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}()

// Set is a bundle's tables. Each is read the first time it is asked for
// (Requests, RequestCols, Events, Spans), unless Open had to build it and
// so holds it already. A Set is safe for concurrent use.
type Set struct {
	// Bundle is the bundle directory.
	Bundle string

	pending []chan struct{} // table writes still under way (Wait), closed when done; under mu
	waitMu  sync.Mutex      // one Wait at a time
	dirty   bool            // the record changed: Wait saves it; under mu
	// writeErr says why the tables could not be written (they are then
	// used from memory; Wait returns it); under mu.
	writeErr error

	mu       sync.Mutex
	rec      record
	requests []model.Request // all of requests.parquet, once read or built
	reqCols  *RequestCols
	hasReqs  bool // requests.jsonl exists
	events   *Events
	spans    *Spans
	loaded   map[string]error
}

// Path returns the path of a table (or of the record) in the bundle.
func (s *Set) Path(table string) string { return filepath.Join(s.Bundle, Dir, table) }

// current returns the state of a table's sources; ok is false when its
// first (main) source is absent.
func current(dir string, srcs []string) (map[string]source, bool) {
	out := map[string]source{}
	for i, name := range srcs {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			if i == 0 {
				return nil, false
			}
			continue
		}
		out[name] = source{Size: fi.Size(), MtimeUnixNs: fi.ModTime().UnixNano()}
	}
	return out, true
}

// fresh reports whether table is on disk, of this Version, and made from
// the sources as they are now.
func (s *Set) fresh(table string, now map[string]source) bool {
	s.mu.Lock()
	e, ok := s.rec.Tables[table]
	version := s.rec.Version
	s.mu.Unlock()
	if version != Version || !ok || !maps.Equal(e.Sources, now) {
		return false
	}
	_, err := os.Stat(s.Path(table))
	return err == nil
}

// Open opens the tables of the bundle in dir, first building every table
// whose sources exist and that is missing or stale. It fails on a source
// it cannot read (naming the file, line and field); it does not fail when
// the tables cannot be written (Wait says why; they are used from
// memory). When it fails, the tables it was already writing are finished
// first: no temporary file is left behind.
func Open(dir string) (*Set, error) {
	s := &Set{Bundle: dir, loaded: map[string]error{}}
	if err := s.open(); err != nil {
		s.Wait()
		return nil, err
	}
	return s, nil
}

// open is Open on s, whose Bundle is set; on an error Open waits for the
// tables open had started writing.
func (s *Set) open() error {
	dir := s.Bundle
	// A record that is absent, unreadable, or of another Version or schema is a new one.
	if b, err := bundle.ReadFile(s.Path(ManifestFile)); err != nil || json.Unmarshal(b, &s.rec) != nil || s.rec.Version != Version || s.rec.Schema != schemaID || s.rec.Tables == nil {
		s.rec = record{Version: Version, Schema: schemaID, Tables: map[string]entry{}}
	}
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		s.writeErr = err
	}
	src := jsonlBytes(dir)
	hugeHeap(int(src)) // the tables built or read from here on: at most about their sources' size
	// Building from JSONL holds the heap to about the sources' size (their
	// columns are a fraction of the text) until the tables are written.
	var release func()
	build := func() {
		if release == nil && src >= minLimitBytes {
			release = limitHeap(src)
		}
	}
	defer func() {
		if release == nil {
			return
		}
		s.mu.Lock()
		pending := slices.Clone(s.pending)
		s.mu.Unlock()
		go func() {
			for _, ch := range pending {
				<-ch
			}
			release()
		}()
	}()
	// Requests first: every other table joins them.
	requestsBuilt := false
	if now, ok := current(dir, sources[RequestsTable]); ok {
		s.hasReqs = true
		if requestsBuilt = !s.fresh(RequestsTable, now); requestsBuilt {
			build()
			reqs, err := ReadRequestsJSONL(filepath.Join(dir, bundle.RequestsFile))
			if err != nil {
				return err
			}
			s.requests, s.loaded[RequestsTable] = reqs, nil
			s.write(RequestsTable, entry{Rows: len(reqs), Sources: now}, func(p string, m map[string]string) error { return writeRequests(p, reqs, m) })
		}
	}
	stale := func(table string) (map[string]source, bool) {
		now, ok := current(dir, sources[table])
		if !ok {
			s.mu.Lock()
			delete(s.rec.Tables, table)
			s.mu.Unlock()
			return nil, false
		}
		return now, requestsBuilt || !s.fresh(table, now)
	}
	// Events and spans join the requests.
	if now, ok := stale(EventsTable); ok {
		build()
		reqs, err := s.Requests()
		var e *Events
		if err == nil {
			e, err = ReadEventsJSONL(filepath.Join(dir, bundle.EventsFile), reqs)
		}
		if err != nil {
			return err
		}
		s.events, s.loaded[EventsTable] = e, nil
		s.write(EventsTable, entry{Rows: e.Len(), Sources: now, Names: e.names()}, func(p string, m map[string]string) error { return writeEvents(p, e, m) })
	}
	if now, ok := stale(SpansTable); ok {
		reqs, err := s.Requests()
		var sp *Spans
		if err == nil {
			sp, err = ReadSpansOTLP(filepath.Join(dir, bundle.SpansFile), reqs)
		}
		if err != nil {
			return err
		}
		s.spans, s.loaded[SpansTable] = sp, nil
		s.write(SpansTable, entry{Rows: sp.Len(), Sources: now, Names: sp.serverNames()}, func(p string, m map[string]string) error { return writeSpans(p, sp, m) })
	}
	var gpu *Rows
	for _, t := range []string{GPUSamples, GPUPeriods, SchedTable, CUDATable} {
		now, ok := stale(t)
		if !ok {
			continue
		}
		src, rows := sources[t][0], gpu
		if src != bundle.GPUFile || gpu == nil {
			var err error
			if rows, err = ReadRowsJSONL(filepath.Join(dir, src)); err != nil {
				return err
			}
			if src == bundle.GPUFile {
				gpu = rows
			}
		}
		// gpu.jsonl's period records are a table of their own.
		isPeriod := func(o map[string]value) bool { v, ok := o["kind"]; return ok && string(v.raw) == "period" }
		switch t {
		case GPUSamples:
			rows = &Rows{Objects: slices.DeleteFunc(slices.Clone(rows.Objects), isPeriod), raw: rows.raw}
		case GPUPeriods:
			rows = &Rows{Objects: slices.DeleteFunc(slices.Clone(rows.Objects), func(o map[string]value) bool { return !isPeriod(o) }), raw: rows.raw}
		}
		s.write(t, entry{Rows: len(rows.Objects), Sources: now}, func(p string, m map[string]string) error { return writeRowsTable(p, rows, m) })
	}
	// The stage boundaries depend on the requests and on the preset's
	// sources; the engine checks them (Stages).
	return nil
}

// Wait waits for the tables that Open (and WriteStages) are still writing
// in the background, so that analyses run while they are written, and
// records them in tables/tables.json. It returns why they could not be
// written, if they could not (they were used from memory all the same).
// Callers that built a Set call it before they exit; it may be called more
// than once.
func (s *Set) Wait() error {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	for {
		s.mu.Lock()
		pending := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(pending) == 0 {
			break
		}
		for _, ch := range pending {
			<-ch
		}
	}
	s.mu.Lock()
	dirty := s.dirty && s.writeErr == nil
	s.dirty = false
	s.mu.Unlock()
	if dirty {
		s.fail(s.saveRecord())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return fmt.Errorf("writing the tables of %s: %w", s.Bundle, s.writeErr)
	}
	return nil
}

// failed reports whether a write failed already.
func (s *Set) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErr != nil
}

// fail keeps err as why the tables could not be written, unless a write
// failed before (nil changes nothing).
func (s *Set) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr == nil {
		s.writeErr = err
	}
}

// write writes table with f in the background (Wait), unless a write
// failed before, and then records it as e.
func (s *Set) write(table string, e entry, f func(path string, meta map[string]string) error) {
	if s.failed() {
		return
	}
	s.background(func() {
		if err := f(s.Path(table), map[string]string{"asrprof.tables.version": strconv.Itoa(Version)}); err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		s.rec.Tables[table] = e
		s.dirty = true
		s.mu.Unlock()
	})
}

// background runs f (a write) on its own goroutine; Wait waits for it.
func (s *Set) background(f func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.pending = append(s.pending, ch)
	s.mu.Unlock()
	go func() {
		defer close(ch)
		f()
	}()
}

// saveRecord writes tables/tables.json (atomically). Callers hold no lock.
func (s *Set) saveRecord() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bundle.WriteJSON(s.Path(ManifestFile), s.rec)
}

// derived is a small derived value kept as JSON (tables/NAME.json), valid
// while its sources and key are as they were.
type derived struct {
	Version int               `json:"version"`
	Key     string            `json:"key"`
	Sources map[string]source `json:"sources"`
	Value   json.RawMessage   `json:"value"`
}

var derivedSources = []string{bundle.RequestsFile, bundle.ManifestFile}

// Derived reads tables/name.json into v when it was saved by SaveDerived
// with the same key from the sources (requests.jsonl, manifest.json) as
// they are now; ok is false otherwise. The analysis keeps the per-pass
// metrics there (model/summary over 100,000 requests took 0.27 s).
func (s *Set) Derived(name, key string, v any) (ok bool) {
	b, err := bundle.ReadFile(s.Path(name + ".json"))
	if err != nil {
		return false
	}
	var d derived
	now, _ := current(s.Bundle, derivedSources)
	if json.Unmarshal(b, &d) != nil || d.Version != Version || d.Key != key || !maps.Equal(d.Sources, now) {
		return false
	}
	return json.Unmarshal(d.Value, v) == nil
}

// SaveDerived writes v as tables/name.json for Derived, in the background
// (Wait).
func (s *Set) SaveDerived(name, key string, v any) {
	if s.failed() {
		return
	}
	now, _ := current(s.Bundle, derivedSources)
	val, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.background(func() {
		b, err := json.Marshal(derived{Version: Version, Key: key, Sources: now, Value: val})
		if err != nil {
			return
		}
		bundle.ReplaceFile(s.Path(name+".json"), b)
	})
}

// Requests returns every request of requests.jsonl, in order (from
// requests.parquet, or from what Open built); none when the bundle has no
// requests.jsonl.
func (s *Set) Requests() ([]model.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err, ok := s.loaded[RequestsTable]; ok {
		return s.requests, err
	}
	var err error
	if s.hasReqs {
		s.requests, err = ReadRequests(s.Path(RequestsTable))
	}
	s.loaded[RequestsTable] = err
	return s.requests, err
}

// RequestCols are the few columns of the requests that a stage table
// needs, which read in a fraction of the time of all of them. Each field
// but N is the column of the field of model.Request of its name
// (requestCols): Strings for a string, else a slice of the field's
// Parquet type.
type RequestCols struct {
	N        int
	Level    Strings
	Status   Strings
	Warmup   []bool
	LatencyS []float64
	Repeat   []int32
	// AudioDurationS is each request's audio length (0 when unknown).
	AudioDurationS []float64
	// The client's clock of each request (unix ns; 0 when not recorded):
	// sent, its new connection established, upload done, first byte of
	// the answer, end.
	StartUnixNs, ConnectedUnixNs, UploadDoneUnixNs, FirstByteUnixNs, EndUnixNs []int64
}

// requestCol is a column of RequestCols: request field f, at RequestCols'
// field index ix.
type requestCol struct {
	f  *model.Field
	ix int
}

// requestCols are RequestCols' columns; it panics when one is not a
// request field or has another type.
var requestCols = func() []requestCol {
	t := reflect.TypeFor[RequestCols]()
	types := map[model.FieldKind]reflect.Type{model.KindString: reflect.TypeFor[Strings](), model.KindBool: reflect.TypeFor[[]bool](),
		model.KindFloat: reflect.TypeFor[[]float64](), model.KindInt: reflect.TypeFor[[]int32](), model.KindInt64: reflect.TypeFor[[]int64]()}
	var out []requestCol
	for i := 1; i < t.NumField(); i++ {
		k := slices.IndexFunc(model.RequestFields, func(f model.Field) bool { return f.GoName == t.Field(i).Name })
		if k < 0 || types[model.RequestFields[k].Kind] != t.Field(i).Type {
			panic("columns: RequestCols." + t.Field(i).Name + " is not a model.Request field's column")
		}
		out = append(out, requestCol{&model.RequestFields[k], i})
	}
	return out
}()

// RequestCols returns the requests' columns in RequestCols.
func (s *Set) RequestCols() (*RequestCols, error) {
	s.mu.Lock()
	if s.reqCols != nil {
		defer s.mu.Unlock()
		return s.reqCols, nil
	}
	_, loaded := s.loaded[RequestsTable]
	s.mu.Unlock()
	var cols []*column
	if loaded || !s.hasReqs {
		reqs, err := s.Requests()
		if err != nil {
			return nil, err
		}
		for _, c := range requestCols {
			cols = append(cols, columnOf(reqs, c.f))
		}
	} else {
		var names []string
		for _, c := range requestCols {
			names = append(names, c.f.Name)
		}
		var err error
		if cols, err = readColumns(s.Path(RequestsTable), names, nil); err != nil {
			return nil, err
		}
	}
	rc := &RequestCols{N: cols[0].n}
	for k, c := range requestCols {
		var x any
		switch col := cols[k]; c.f.Kind {
		case model.KindString:
			x = col.str
		case model.KindBool:
			x = col.b
		case model.KindFloat:
			x = col.f64
		case model.KindInt:
			x = col.int32s(0)
		case model.KindInt64:
			x = col.int64s()
		}
		reflect.ValueOf(rc).Elem().Field(c.ix).Set(reflect.ValueOf(x))
	}
	s.mu.Lock()
	s.reqCols = rc
	s.mu.Unlock()
	return rc, nil
}

// columnOf is field f of reqs as readColumns reads its column, each
// slice sized once (growing them was a tenth of a JSONL-only stage table).
func columnOf(reqs []model.Request, f *model.Field) *column {
	c := &column{n: len(reqs)}
	switch f.Kind {
	case model.KindString:
		d := dictBuilder{codes: make([]int32, 0, len(reqs))}
		for i := range reqs {
			d.addString(*field[string](unsafe.Pointer(&reqs[i]), f))
		}
		c.str = mergeStrings([]*dictBuilder{&d})
	case model.KindBool:
		c.b = gather(reqs, f, func(x bool) bool { return x })
	case model.KindFloat:
		c.f64 = gather(reqs, f, func(x float64) float64 { return x })
	case model.KindInt:
		c.kind, c.i32 = parquet.Int32, gather(reqs, f, func(x int) int32 { return int32(x) })
	case model.KindInt64:
		c.kind, c.i64 = parquet.Int64, gather(reqs, f, func(x int64) int64 { return x })
	}
	return c
}

// gather is conv of field f (a T) of each request of reqs.
func gather[T, U any](reqs []model.Request, f *model.Field, conv func(T) U) []U {
	out := make([]U, len(reqs))
	for i := range reqs {
		out[i] = conv(*field[T](unsafe.Pointer(&reqs[i]), f))
	}
	return out
}

// Events returns the events table (empty when the bundle has no events).
func (s *Set) Events() (*Events, error) { return load(s, EventsTable, &s.events, ReadEvents) }

// Spans returns the spans table (empty when the bundle has no spans).
func (s *Set) Spans() (*Spans, error) { return load(s, SpansTable, &s.spans, ReadSpans) }

// load reads table into *cur once (an empty table when the bundle has
// none), keeping the error for later calls.
func load[T any](s *Set, table string, cur **T, read func(string) (*T, error)) (*T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err, ok := s.loaded[table]; ok {
		return *cur, err
	}
	v := new(T)
	var err error
	if _, ok := s.rec.Tables[table]; ok {
		v, err = read(s.Path(table))
	}
	*cur, s.loaded[table] = v, err
	return v, err
}

// EventNames returns the distinct event names, sorted.
func (s *Set) EventNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		return s.events.names()
	}
	return s.rec.Tables[EventsTable].Names
}

// SpanNames returns the distinct names of the server's spans, sorted.
func (s *Set) SpanNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spans != nil && s.spans.Service.Dict != nil {
		return s.spans.serverNames()
	}
	return s.rec.Tables[SpansTable].Names
}

// Rows returns a table's row count (0 when absent).
func (s *Set) Rows(table string) int {
	n, _ := s.rows(table)
	return n
}

// Has reports whether the bundle has the table (on disk or in memory).
func (s *Set) Has(table string) bool {
	n, recorded := s.rows(table)
	return recorded || n > 0
}

// rows is Rows, and whether the record holds the table.
func (s *Set) rows(table string) (n int, recorded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.rec.Tables[table]; ok {
		return e.Rows, true
	}
	switch {
	case table == EventsTable && s.events != nil:
		return s.events.Len(), false
	case table == SpansTable && s.spans != nil:
		return s.spans.Len(), false
	}
	return 0, false
}

// stageSources are the sources of the stage boundaries: those of the
// tables a preset reads.
func (s *Set) stageSources() map[string]source {
	now, _ := current(s.Bundle, []string{bundle.RequestsFile, bundle.EventsFile, bundle.SpansFile})
	return now
}

// Stages returns the stage boundaries of stages.parquet when they were
// made by the preset named preset, declared as spec, from the sources as
// they are now; ok is false when they were not (or are absent).
func (s *Set) Stages(preset, spec string) (rows *StageRows, ok bool, err error) {
	s.mu.Lock()
	e, has := s.rec.Tables[StagesTable]
	s.mu.Unlock()
	if !has || e.Preset != preset || e.Spec != spec || !maps.Equal(e.Sources, s.stageSources()) {
		return nil, false, nil
	}
	r, err := readStages(s.Path(StagesTable))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return r, true, nil
}

// WriteStages writes rows, the boundaries that preset (declared as spec)
// derived, to stages.parquet, in the background (Wait). A bundle that
// cannot be written to is not an error for the caller, who has the rows;
// Wait reports it.
func (s *Set) WriteStages(rows *StageRows, preset, spec string) {
	s.write(StagesTable, entry{Rows: rows.Len(), Sources: s.stageSources(), Preset: preset, Spec: spec}, func(p string, meta map[string]string) error {
		meta["asrprof.stages.preset"] = preset
		return writeStages(p, rows, meta)
	})
}

// jsonlBytes is the size of the bundle's request and event files, the
// sources whose tables take the most memory to build.
func jsonlBytes(dir string) int64 {
	var n int64
	for _, f := range []string{bundle.RequestsFile, bundle.EventsFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += st.Size()
		}
	}
	return n
}
