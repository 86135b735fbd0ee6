package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/spans"
)

// Capture is a bundle loaded for analysis. Its requests, spans, events and
// probe rows are read the first time they are needed (the stage table
// needs four columns of the requests, not all of them).
// A Capture is safe for concurrent use by several sessions.
type Capture struct {
	Dir    string
	Bundle *bundle.Bundle
	reqs   once[[]model.Request] // Requests()
	// Results is results.json as generic JSON (numbers as json.Number);
	// nil when the file is absent (a killed capture).
	Results any

	ix     once[*join.Index]         // join()
	rows   memo[string, []Row]       // Rows, by file
	profs  once[[]profileSummary]    // profiles()
	passes once[[]model.PassMetrics] // Passes()

	// Tables are the bundle's Parquet tables (trace/tables), built by Load
	// where they were missing or stale; the stage engine reads them.
	Tables *columns.Set

	stagesMu   sync.Mutex
	stages     map[string]*columns.StageRows // by preset key
	lastStages *columns.StageRows            // the rows StageRows returned last

	lastAttr atomic.Pointer[engine.Attribution] // what the attribution module computed last
	segments atomic.Bool                        // the attribution module places the states in time

	bb      once[*blackBox]       // the black-box attribution (blackboxmod.go)
	bbSrc   once[*bbSources]      // what it stands on
	workers once[*engine.Workers] // Workers()

	lengths     memo[string, *LengthSplit]                // LengthSplit, by LengthBuckets.String
	splitPasses memo[*LengthSplit, [][]model.PassMetrics] // BucketPasses, by split

	metrics  memo[string, *engine.ServerMetrics]   // ServerMetrics, by metrics map (servermetricsmod.go)
	validity memo[float64, *engine.ValidityResult] // the validity checks, by knee threshold (validitymod.go)
}

// once is a value computed the first time it is asked for, with its error.
type once[T any] struct {
	do  sync.Once
	v   T
	err error
}

// get is f's answer, from its first call.
func (o *once[T]) get(f func() (T, error)) (T, error) {
	o.do.Do(func() { o.v, o.err = f() })
	return o.v, o.err
}

// memo is a once per key.
type memo[K comparable, T any] struct {
	m sync.Map // K → *once[T]
}

// get is f's answer for k, from its first call for k.
func (m *memo[K, T]) get(k K, f func() (T, error)) (T, error) {
	o, _ := m.m.LoadOrStore(k, &once[T]{})
	return o.(*once[T]).get(f)
}

// Load opens the bundle in dir and reads its requests and results. It
// builds the bundle's tables (trace/tables) that are missing or older than
// their sources first, as at the first analyze of a killed or imported
// capture; a bundle that cannot be written to is analysed from tables held
// in memory (Tables.Wait says why).
func Load(dir string) (*Capture, error) {
	b, err := bundle.Open(dir)
	if err != nil {
		return nil, err
	}
	c := &Capture{Dir: dir, Bundle: b, stages: map[string]*columns.StageRows{}}
	// results.json first: once columns.Open returns, tables may be being
	// written in the background, and an error would leave them half-written.
	if data, err := bundle.ReadFile(b.Path(bundle.ResultsFile)); err == nil {
		if c.Results, err = decodeJSON(data); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Path(bundle.ResultsFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	c.Tables, err = columns.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the bundle's sources: %w", err)
	}
	return c, nil
}

// Requests returns the bundle's requests, every field of requests.jsonl,
// in order (read from requests.parquet the first time).
func (c *Capture) Requests() ([]model.Request, error) {
	return c.reqs.get(func() ([]model.Request, error) {
		reqs, err := c.Tables.Requests()
		if err != nil {
			return nil, fmt.Errorf("reading requests: %w", err)
		}
		return reqs, nil
	})
}

// Passes returns the metrics of every pass the requests record, warmup
// passes included, in run order: model/summary.Passes over the
// requests, the manifest's runs and its SLO (goodput), computed once. They are the numbers of
// results.json (which holds the scored passes of a capture that finished).
// They are kept with the tables (tables/passes.json) while requests.jsonl
// and the manifest's passes are as they were.
func (c *Capture) Passes() ([]model.PassMetrics, error) {
	return c.passes.get(func() ([]model.PassMetrics, error) {
		slo, err := summary.SLOOf(c.Bundle.Manifest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Bundle.Dir, err)
		}
		key, _ := json.Marshal(struct {
			Levels []model.LevelRun `json:"levels"`
			SLO    string           `json:"slo,omitempty"`
		}{c.Bundle.Manifest.Levels, slo.String()})
		var passes []model.PassMetrics
		if c.Tables.Derived("passes", string(key), &passes) {
			return passes, nil
		}
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		passes = summary.Passes(reqs, c.Bundle.Manifest.Levels, slo)
		c.Tables.SaveDerived("passes", string(key), passes)
		return passes, nil
	})
}

// StageRows returns the stage boundaries that p derives for every request:
// stages.parquet when it holds p's, else derived by the engine from the
// events and spans tables (and written to stages.parquet), once per
// preset.
func (c *Capture) StageRows(p *engine.Preset) (*columns.StageRows, error) {
	key := p.Key()
	c.stagesMu.Lock()
	defer c.stagesMu.Unlock()
	if r, ok := c.stages[key]; ok {
		c.lastStages = r
		return r, nil
	}
	r, ok, err := c.Tables.Stages(p.Name, key)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.Tables.Path(columns.StagesTable), err)
	}
	if !ok {
		var e *columns.Events
		var s *columns.Spans
		if p.UsesEvents() {
			if e, err = c.Tables.Events(); err != nil {
				return nil, fmt.Errorf("reading %s: %w", c.Tables.Path(columns.EventsTable), err)
			}
		}
		if p.UsesSpans() {
			if s, err = c.Tables.Spans(); err != nil {
				return nil, fmt.Errorf("reading %s: %w", c.Tables.Path(columns.SpansTable), err)
			}
		}
		rc, err := c.Tables.RequestCols()
		if err != nil {
			return nil, fmt.Errorf("reading requests: %w", err)
		}
		r = engine.Derive(p, rc.N, e, s)
		c.Tables.WriteStages(r, p.Name, key)
	}
	c.stages[key] = r
	c.lastStages = r
	return r, nil
}

// stageCols is StageRows(p) and the requests' columns.
func (c *Capture) stageCols(p *engine.Preset) (*columns.StageRows, *columns.RequestCols, error) {
	rows, err := c.StageRows(p)
	if err != nil {
		return nil, nil, err
	}
	rc, err := c.Tables.RequestCols()
	return rows, rc, err
}

// Workers returns which worker served each request, from the spans a
// router and its workers wrote (engine.FindWorkers); none without spans.
func (c *Capture) Workers() (*engine.Workers, error) {
	return c.workers.get(func() (*engine.Workers, error) {
		rc, err := c.Tables.RequestCols()
		if err != nil {
			return nil, fmt.Errorf("reading requests: %w", err)
		}
		var s *columns.Spans
		if c.HasSpans() {
			if s, err = c.Tables.Spans(); err != nil {
				return nil, fmt.Errorf("reading %s: %w", c.Tables.Path(columns.SpansTable), err)
			}
		}
		return engine.FindWorkers(rc.N, s), nil
	})
}

// DerivedStages returns the stage rows a script of this capture derived
// last (StageRows: the stage table's preset, once `stages` has run), or
// nil when none has: the report draws each request's waterfall from them.
func (c *Capture) DerivedStages() *columns.StageRows {
	c.stagesMu.Lock()
	defer c.stagesMu.Unlock()
	return c.lastStages
}

// LastAttribution returns the attribution (engine.Attribute) that a
// script of this capture computed last (the attribution module: the
// attribution analysis, or the diagnosis), or nil when none has: the
// report draws the states from it, the exporters send them.
func (c *Capture) LastAttribution() *engine.Attribution { return c.lastAttr.Load() }

// PlaceStates makes the attribution module also place every request's
// states in time (engine.RequestStates.Segments), for the report's
// waterfalls and the exporters; it costs about twice the attribution's
// time and memory, so analyses alone do without.
func (c *Capture) PlaceStates() { c.segments.Store(true) }

// RequestLevels returns the distinct levels of the requests, in the order
// they first appear.
func (c *Capture) RequestLevels() ([]string, error) {
	rc, err := c.Tables.RequestCols()
	if err != nil {
		return nil, fmt.Errorf("reading requests: %w", err)
	}
	var out []string
	seen := make([]bool, len(rc.Level.Dict))
	for _, code := range rc.Level.Codes {
		if !seen[code] {
			seen[code] = true
			out = append(out, rc.Level.Dict[code])
		}
	}
	return out, nil
}

// HasSpans reports whether the bundle has a span store.
func (c *Capture) HasSpans() bool { return c.Bundle.Has(bundle.SpansFile) }

// HasEvents reports whether the bundle has server events.
func (c *Capture) HasEvents() bool { return c.Bundle.Has(bundle.EventsFile) }

// Rows returns the JSON objects of a probe file (gpu.jsonl, sched.jsonl,
// cuda.jsonl), read as every bundle file is (bundle.ReadJSONL: a
// truncated last line dropped); none when the file is absent. Numbers are
// json.Number.
func (c *Capture) Rows(name string) ([]Row, error) {
	return c.rows.get(name, func() ([]Row, error) {
		return bundle.ReadAll[Row](c.Bundle.Path(name))
	})
}

// Row is a line of a probe file as Rows reads it: a JSON object whose
// numbers are json.Number.
type Row map[string]any

func (o *Row) UnmarshalJSON(b []byte) error {
	v, err := decodeJSON(b)
	m, ok := v.(map[string]any)
	if err == nil && !ok {
		err = errors.New("not a JSON object")
	}
	*o = m
	return err
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v) // nil on an error: Decode scans the whole value before it stores any
	return v, err
}

// join reads the span store and the events and joins them to the requests,
// once.
func (c *Capture) join() (*join.Index, error) {
	return c.ix.get(func() (*join.Index, error) {
		var chunks [][]spans.Span
		var evs []bundle.Event
		var err error
		if c.HasSpans() {
			if chunks, err = spans.ReadChunks(c.Bundle.Path(bundle.SpansFile)); err != nil {
				return nil, fmt.Errorf("reading spans: %w", err)
			}
		}
		if c.HasEvents() {
			if evs, err = bundle.ReadAll[bundle.Event](c.Bundle.Path(bundle.EventsFile)); err != nil {
				return nil, fmt.Errorf("reading events: %w", err)
			}
		}
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		return join.BuildChunks(reqs, chunks, evs), nil
	})
}
