package analysis

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/bundle/events"
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
	reqs   []model.Request // Requests(), once loaded
	// Results is results.json as generic JSON (numbers as json.Number);
	// nil when the file is absent (a killed capture).
	Results any

	joinOnce sync.Once
	ix       *join.Index
	joinErr  error

	rowsMu sync.Mutex
	rows   map[string]*rowSet
	profs  []profileSummary

	passesOnce sync.Once
	passes     []model.PassMetrics
	passesErr  error

	reqsOnce sync.Once
	reqsErr  error

	// Tables are the bundle's Parquet tables (trace/tables), built by Load
	// where they were missing or stale; the stage engine reads them.
	Tables *columns.Set

	stagesMu   sync.Mutex
	stages     map[string]*columns.StageRows // by preset key
	lastStages *columns.StageRows            // the rows StageRows returned last

	lastAttr atomic.Pointer[engine.Attribution] // what the attribution module computed last
	segments atomic.Bool                        // the attribution module places the states in time

	bbOnce sync.Once // the black-box attribution (blackboxmod.go)
	bb     *blackBox
	bbErr  error

	workersOnce sync.Once
	workers     *engine.Workers
	workersErr  error

	lengthsMu sync.Mutex
	lengths   map[string]*LengthSplit // LengthSplit, by LengthBuckets.String

	metrics metricsCache // ServerMetrics, by metrics map (servermetricsmod.go)

	validity validityCache // the validity checks, by knee threshold (validitymod.go)
}

type rowSet struct {
	rows []map[string]any
	err  error
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
	c := &Capture{Dir: dir, Bundle: b, rows: map[string]*rowSet{}, stages: map[string]*columns.StageRows{}}
	c.Tables, err = columns.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the bundle's sources: %w", err)
	}
	if data, err := os.ReadFile(b.Path(bundle.ResultsFile)); err == nil {
		v, err := decodeJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Path(bundle.ResultsFile), err)
		}
		c.Results = v
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return c, nil
}

// Requests returns the bundle's requests, every field of requests.jsonl,
// in order (read from requests.parquet the first time).
func (c *Capture) Requests() ([]model.Request, error) {
	c.reqsOnce.Do(func() {
		c.reqs, c.reqsErr = c.Tables.Requests()
		if c.reqsErr != nil {
			c.reqsErr = fmt.Errorf("reading requests: %w", c.reqsErr)
		}
	})
	return c.reqs, c.reqsErr
}

// Passes returns the metrics of every pass the requests record, warmup
// passes included, in run order: model/summary.Passes over the
// requests, the manifest's runs and its SLO (goodput), computed once. They are the numbers of
// results.json (which holds the scored passes of a capture that finished).
// They are kept with the tables (tables/passes.json) while requests.jsonl
// and the manifest's passes are as they were.
func (c *Capture) Passes() ([]model.PassMetrics, error) {
	c.passesOnce.Do(func() {
		slo, err := summary.SLOOf(c.Bundle.Manifest)
		if err != nil {
			c.passesErr = fmt.Errorf("%s: %w", c.Bundle.Dir, err)
			return
		}
		key, _ := json.Marshal(struct {
			Levels []model.LevelRun `json:"levels"`
			SLO    string           `json:"slo,omitempty"`
		}{c.Bundle.Manifest.Levels, slo.String()})
		if c.Tables.Derived("passes", string(key), &c.passes) {
			return
		}
		reqs, err := c.Requests()
		if err != nil {
			c.passesErr = err
			return
		}
		c.passes = summary.Passes(reqs, c.Bundle.Manifest.Levels, slo)
		c.Tables.SaveDerived("passes", string(key), c.passes)
	})
	return c.passes, c.passesErr
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
	c.workersOnce.Do(func() {
		rc, err := c.Tables.RequestCols()
		if err != nil {
			c.workersErr = fmt.Errorf("reading requests: %w", err)
			return
		}
		var s *columns.Spans
		if c.HasSpans() {
			if s, err = c.Tables.Spans(); err != nil {
				c.workersErr = fmt.Errorf("reading %s: %w", c.Tables.Path(columns.SpansTable), err)
				return
			}
		}
		c.workers = engine.FindWorkers(rc.N, s)
	})
	return c.workers, c.workersErr
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
// cuda.jsonl); none when the file is absent. Numbers are json.Number.
func (c *Capture) Rows(name string) ([]map[string]any, error) {
	c.rowsMu.Lock()
	defer c.rowsMu.Unlock()
	if rs, ok := c.rows[name]; ok {
		return rs.rows, rs.err
	}
	rs := &rowSet{}
	c.rows[name] = rs
	f, err := os.Open(c.Bundle.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		rs.err = err
		return nil, err
	}
	defer f.Close()
	rs.rows, rs.err = readObjects(f, c.Bundle.Path(name))
	return rs.rows, rs.err
}

// readObjects reads a JSONL file of objects, tolerating a truncated last line.
func readObjects(r io.Reader, name string) ([]map[string]any, error) {
	var out []map[string]any
	br := bufio.NewReaderSize(r, 1<<16)
	for line := 1; ; line++ {
		b, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			v, err := decodeJSON(t)
			m, ok := v.(map[string]any)
			switch {
			case err != nil && rerr == io.EOF && b[len(b)-1] != '\n':
				return out, nil // a truncated last line
			case err != nil:
				return out, fmt.Errorf("%s:%d: %w", name, line, err)
			case !ok:
				return out, fmt.Errorf("%s:%d: not a JSON object", name, line)
			}
			out = append(out, m)
		}
		if rerr == io.EOF {
			return out, nil
		}
		if rerr != nil {
			return out, fmt.Errorf("%s: %w", name, rerr)
		}
	}
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// join reads the span store and the events and joins them to the requests,
// once.
func (c *Capture) join() (*join.Index, error) {
	c.joinOnce.Do(func() {
		var chunks [][]spans.Span
		var evs []bundle.Event
		var err error
		if c.HasSpans() {
			chunks, err = spans.ReadChunks(c.Bundle.Path(bundle.SpansFile))
			if err != nil {
				c.joinErr = fmt.Errorf("reading spans: %w", err)
				return
			}
		}
		if c.HasEvents() {
			evs, err = events.ReadBundle(c.Bundle.Path(bundle.EventsFile))
			if err != nil {
				c.joinErr = fmt.Errorf("reading events: %w", err)
				return
			}
		}
		reqs, err := c.Requests()
		if err != nil {
			c.joinErr = err
			return
		}
		c.ix = join.BuildChunks(reqs, chunks, evs)
	})
	return c.ix, c.joinErr
}
