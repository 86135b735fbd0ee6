package analysis

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"sync"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/sync/errgroup"

	"github.com/asrprof/asrprof/bench/metrics"
	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/bundle"
	"github.com/asrprof/asrprof/trace/events"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/spans"
)

// Capture is a bundle loaded for analysis. Requests are read by Load; the
// spans, events and probe rows are read the first time they are needed.
// A Capture is safe for concurrent use by several sessions.
type Capture struct {
	Dir      string
	Bundle   *bundle.Bundle
	Requests []trace.Request
	// Results is results.json as generic JSON (numbers as json.Number);
	// nil when the file is absent (a killed capture).
	Results any

	joinOnce sync.Once
	ix       *join.Index
	joinErr  error
	spanN    int
	spanSet  []string // distinct server span names
	eventSet []string // distinct event names

	rowsMu sync.Mutex
	rows   map[string]*rowSet
	profs  []profileSummary

	passesOnce sync.Once
	passes     []trace.PassMetrics
}

type rowSet struct {
	rows []map[string]any
	err  error
}

// Load opens the bundle in dir and reads its requests and results.
func Load(dir string) (*Capture, error) {
	b, err := bundle.Open(dir)
	if err != nil {
		return nil, err
	}
	c := &Capture{Dir: dir, Bundle: b, rows: map[string]*rowSet{}}
	c.Requests, err = readRequests(b.Path(bundle.RequestsFile))
	if err != nil {
		return nil, fmt.Errorf("reading requests: %w", err)
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

// Passes returns the metrics of every pass the requests record, warmup
// passes included, in run order: bench/metrics.Passes over the requests
// and the manifest's runs, computed once. They are the numbers of
// results.json (which holds the scored passes of a capture that finished).
func (c *Capture) Passes() []trace.PassMetrics {
	c.passesOnce.Do(func() {
		c.passes = metrics.Passes(c.Requests, c.Bundle.Manifest.Levels)
	})
	return c.passes
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

// readRequests reads requests.jsonl, decoding lines on every core. Like
// bundle.ReadJSONL it drops a truncated last line and names a bad one.
func readRequests(path string) ([]trace.Request, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines [][]byte
	var lineNo []int
	truncatedOK := len(data) > 0 && data[len(data)-1] != '\n'
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		var l []byte
		if i < 0 {
			l, data = data, nil
		} else {
			l, data = data[:i], data[i+1:]
		}
		if l = bytes.TrimSpace(l); len(l) > 0 {
			lines = append(lines, l)
			lineNo = append(lineNo, n)
		}
	}
	out := make([]trace.Request, len(lines))
	bad := make([]error, len(lines))
	workers := runtime.GOMAXPROCS(0)
	var g errgroup.Group
	per := (len(lines) + workers - 1) / max(workers, 1)
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, len(lines))
		if lo >= hi {
			break
		}
		g.Go(func() error {
			for i := lo; i < hi; i++ {
				bad[i] = json.Unmarshal(lines[i], &out[i])
			}
			return nil
		})
	}
	g.Wait()
	for i, err := range bad {
		if err == nil {
			continue
		}
		if i == len(lines)-1 && truncatedOK {
			return out[:i], nil
		}
		return nil, fmt.Errorf("%s:%d: %w", path, lineNo[i], err)
	}
	return out, nil
}

// join reads the span store and the events and joins them to the requests,
// once.
func (c *Capture) join() (*join.Index, error) {
	c.joinOnce.Do(func() {
		var chunks [][]spans.Span
		var evs []events.Event
		var err error
		if c.HasSpans() {
			chunks, err = readSpans(c.Bundle.Path(bundle.SpansFile))
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
		names := map[string]bool{}
		for _, ss := range chunks {
			c.spanN += len(ss)
			for i := range ss {
				if !ss[i].IsClient() {
					names[ss[i].Name] = true
				}
			}
		}
		c.spanSet = sortedKeys(names)
		names = map[string]bool{}
		for i := range evs {
			names[evs[i].EventName] = true
		}
		c.eventSet = sortedKeys(names)
		c.ix = join.BuildChunks(c.Requests, chunks, evs)
	})
	return c.ix, c.joinErr
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readSpans reads a span store (see trace/spans: uvarint-length-prefixed
// OTLP export requests), decoding records on every core, and returns the
// spans of each record in store order (not concatenated: copying a million
// spans in one goroutine cost a second). A truncated last record is
// dropped, as spans.Read does.
func readSpans(path string) ([][]spans.Span, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs [][]byte
	for off := 0; off < len(data); {
		size, n := binary.Uvarint(data[off:])
		if n <= 0 {
			if n == 0 {
				break // truncated length prefix
			}
			return nil, fmt.Errorf("%s: record %d at byte %d: bad length", path, len(recs), off)
		}
		if size > spans.MaxRecordBytes {
			return nil, fmt.Errorf("%s: record %d at byte %d: length %d: not a span store", path, len(recs), off, size)
		}
		if uint64(len(data)-off-n) < size {
			break // truncated record
		}
		recs = append(recs, data[off+n:off+n+int(size)])
		off += n + int(size)
	}
	parts := make([][]spans.Span, len(recs))
	workers := runtime.GOMAXPROCS(0)
	var g errgroup.Group
	g.SetLimit(workers)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := w; i < len(recs); i += workers {
				req := ptraceotlp.NewExportRequest()
				if err := req.UnmarshalProto(recs[i]); err != nil {
					return fmt.Errorf("%s: record %d: decoding: %w", path, i, err)
				}
				parts[i] = spans.Flatten(req.Traces())
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}
