package load

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A trace is a file of arrival times that an open-loop pass replays
// (asrprof capture --arrivals replay:FILE; the format is docs/REPLAY.md):
// JSONL, one object per line, or CSV with a header row. Each row has one
// time field, the same one in every row:
//
//	timestamp      milliseconds (Mooncake's traces)
//	timestamp_ms   milliseconds
//	timestamp_s    seconds
//
// and may name what to send: sample_id (a dataset sample) or
// audio_duration_s (the sample of the closest length); a row with neither
// takes the next sample in turn. Other fields are ignored. Times count
// from the first row, so absolute (epoch) times work too; they must not
// decrease. Blank lines and lines that start with # are skipped.

// Trace time fields and their unit in seconds.
var traceTimeFields = []struct {
	name string
	unit float64 // seconds per unit
	desc string
}{
	{"timestamp", 1e-3, "timestamp (ms)"},
	{"timestamp_ms", 1e-3, "timestamp_ms"},
	{"timestamp_s", 1, "timestamp_s"},
}

// Trace field names besides the time.
const (
	TraceSampleID = "sample_id"
	TraceAudioS   = "audio_duration_s"
)

// Arrival is one row of a trace.
type Arrival struct {
	At       time.Duration // from the trace's first row
	SampleID string        // "" when the row names none
	AudioS   float64       // 0 when the row gives none
	Line     int           // 1-based line of the file
}

// TraceError is a trace that cannot be replayed: its file and, for a bad
// row, its line.
type TraceError struct {
	File string
	Line int // 0: the file as a whole
	Msg  string
}

func (e *TraceError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// ParseTrace reads a trace; name is the file in error messages. The format
// is JSONL when the first line that is not blank or a comment starts with
// '{' (or the name ends in .jsonl or .json), else CSV.
func ParseTrace(r io.Reader, name string) ([]Arrival, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	jsonl, err := sniffJSONL(br, name)
	if err != nil {
		return nil, &TraceError{File: name, Msg: err.Error()}
	}
	p := &traceParser{file: name, timeField: -1}
	if jsonl {
		err = p.jsonl(br)
	} else {
		err = p.csv(br)
	}
	if err != nil {
		return nil, err
	}
	if len(p.out) == 0 {
		return nil, &TraceError{File: name, Msg: "no arrivals in the trace (docs/REPLAY.md: one row per request)"}
	}
	return p.out, nil
}

func sniffJSONL(br *bufio.Reader, name string) (bool, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".jsonl", ".json", ".ndjson":
		return true, nil
	case ".csv":
		return false, nil
	}
	b, err := br.Peek(br.Size())
	if err != nil && err != io.EOF {
		return false, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return t[0] == '{', nil
		}
	}
	return false, nil
}

type traceParser struct {
	file      string
	timeField int // index into traceTimeFields, -1 until the first row
	first     float64
	prev      float64
	prevLine  int
	out       []Arrival
}

func (p *traceParser) fail(line int, format string, args ...any) error {
	return &TraceError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// row adds one row: field reads a field's raw text ("" and false when
// absent); num parses a number field.
func (p *traceParser) row(line int, field func(name string) (string, bool), num func(name, v string) (float64, error), str func(name, v string) (string, error)) error {
	tf := -1
	for i, f := range traceTimeFields {
		if _, ok := field(f.name); ok {
			if tf >= 0 {
				return p.fail(line, "both %s and %s: give one time field", traceTimeFields[tf].name, f.name)
			}
			tf = i
		}
	}
	if tf < 0 {
		return p.fail(line, "no time: give timestamp (milliseconds, as Mooncake's traces), timestamp_ms or timestamp_s")
	}
	if p.timeField >= 0 && tf != p.timeField {
		return p.fail(line, "%s, but the rows before use %s: one time field per trace", traceTimeFields[tf].desc, traceTimeFields[p.timeField].desc)
	}
	f := traceTimeFields[tf]
	raw, _ := field(f.name)
	t, err := num(f.name, raw)
	if err != nil {
		return p.fail(line, "%v", err)
	}
	if t < 0 {
		return p.fail(line, "%s %v: want a time ≥ 0", f.name, t)
	}
	if p.timeField < 0 {
		p.timeField, p.first = tf, t
	} else if t < p.prev {
		return p.fail(line, "%s %v is before the previous row's %v (line %d): sort the trace by time", f.name, t, p.prev, p.prevLine)
	}
	p.prev, p.prevLine = t, line
	a := Arrival{At: time.Duration(math.Round((t - p.first) * f.unit * 1e9)), Line: line}
	if v, ok := field(TraceSampleID); ok {
		if a.SampleID, err = str(TraceSampleID, v); err != nil {
			return p.fail(line, "%v", err)
		}
	}
	if v, ok := field(TraceAudioS); ok {
		d, err := num(TraceAudioS, v)
		if err != nil {
			return p.fail(line, "%v", err)
		}
		if !(d > 0) {
			return p.fail(line, "%s %v: want a duration > 0 seconds", TraceAudioS, d)
		}
		a.AudioS = d
	}
	p.out = append(p.out, a)
	return nil
}

func (p *traceParser) jsonl(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return p.fail(line, "not a JSON object: %v", err)
		}
		field := func(name string) (string, bool) {
			v, ok := obj[name]
			if !ok || string(v) == "null" {
				return "", false
			}
			return string(v), true
		}
		if err := p.row(line, field, jsonValue[float64]("number"), jsonValue[string]("string")); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return p.fail(line+1, "line longer than 16 MiB")
		}
		return &TraceError{File: p.file, Msg: err.Error()}
	}
	return nil
}

// jsonValue parses a JSONL field's raw text as a T, a what.
func jsonValue[T any](what string) func(name, v string) (T, error) {
	return func(name, v string) (T, error) {
		var x T
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return x, fmt.Errorf("%s %s: want a %s", name, v, what)
		}
		return x, nil
	}
}

func (p *traceParser) csv(r io.Reader) error {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	csvErr := func(err error) error {
		if pe, ok := errors.AsType[*csv.ParseError](err); ok {
			return p.fail(pe.Line, "%v", pe.Err)
		}
		return &TraceError{File: p.file, Msg: err.Error()}
	}
	head, err := cr.Read()
	if err == io.EOF {
		return nil // no rows: ParseTrace says so
	}
	if err != nil {
		return csvErr(err)
	}
	headLine, _ := cr.FieldPos(0)
	col := map[string]int{}
	for i, h := range head {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	hasTime := false
	for _, f := range traceTimeFields {
		if _, ok := col[f.name]; ok {
			hasTime = true
		}
	}
	if !hasTime {
		return p.fail(headLine, "the header %q has no time column: a CSV trace starts with a header naming timestamp (milliseconds), timestamp_ms or timestamp_s, and optionally sample_id and audio_duration_s", strings.Join(head, ","))
	}
	num := func(name, v string) (float64, error) {
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%s %q: want a number", name, v)
		}
		return x, nil
	}
	str := func(name, v string) (string, error) { return strings.TrimSpace(v), nil }
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return csvErr(err)
		}
		line, _ := cr.FieldPos(0)
		field := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok || i >= len(rec) || strings.TrimSpace(rec[i]) == "" {
				return "", false
			}
			return rec[i], true
		}
		if err := p.row(line, field, num, str); err != nil {
			return err
		}
	}
}
