package columns

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/asrprof/asrprof/bundle"
)

// The JSONL files of a bundle are decoded here by a scanner of flat JSON
// objects rather than by encoding/json: building the tables of a 250 MB
// bundle is the cost users wait for at the first analyze, and
// encoding/json spent ~1.5 µs of CPU per event line. The scanner visits
// each field of a line once, hands its value over as bytes (strings
// unescaped only when they hold a backslash) and never builds a map.

// value is one field's value as it appears in a line.
type value struct {
	kind byte   // 's' string, 'n' number, 'b' true/false, 'z' null, '{' object, '[' array
	raw  []byte // string contents (escaped), number text, or the object/array's JSON
	esc  bool   // a string that holds escapes
}

func (v value) isNull() bool { return v.kind == 'z' }

// str returns a string value (unescaped); "" for null.
func (v value) str() (string, error) {
	switch v.kind {
	case 's':
		if !v.esc {
			return string(v.raw), nil
		}
		var s string
		q := make([]byte, 0, len(v.raw)+2)
		q = append(append(append(q, '"'), v.raw...), '"')
		if err := json.Unmarshal(q, &s); err != nil {
			return "", fmt.Errorf("bad string: %v", err)
		}
		return s, nil
	case 'z':
		return "", nil
	}
	return "", fmt.Errorf("want a string, got %s", v.what())
}

func (v value) int64() (int64, error) {
	switch v.kind {
	case 'n':
		if i, ok := decimalInt(v.raw); ok {
			return i, nil
		}
		if i, err := strconv.ParseInt(string(v.raw), 10, 64); err == nil {
			return i, nil
		}
		// 1e9 or 12.0: integral numbers written as floats.
		f, err := strconv.ParseFloat(string(v.raw), 64)
		if err != nil || f != float64(int64(f)) {
			return 0, fmt.Errorf("want an integer, got %s", v.raw)
		}
		return int64(f), nil
	case 'z':
		return 0, nil
	}
	return 0, fmt.Errorf("want an integer, got %s", v.what())
}

// decimalInt reads b, an optional minus and 1 to 19 decimal digits, as
// strconv.ParseInt(b, 10, 64) does; ok is false for anything else, which
// ParseInt then decides (a timestamp's 19 digits took ParseInt a quarter
// of the events' decoding).
func decimalInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64 // 19 digits fit
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true // 1<<63 wraps to the least int64, as it should
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

func (v value) float64() (float64, error) {
	switch v.kind {
	case 'n':
		f, err := strconv.ParseFloat(string(v.raw), 64)
		if err != nil {
			return 0, fmt.Errorf("want a number, got %s", v.raw)
		}
		return f, nil
	case 'z':
		return 0, nil
	}
	return 0, fmt.Errorf("want a number, got %s", v.what())
}

func (v value) bool() (bool, error) {
	switch v.kind {
	case 'b':
		return v.raw[0] == 't', nil
	case 'z':
		return false, nil
	}
	return false, fmt.Errorf("want true or false, got %s", v.what())
}

// kindNames says what each kind of value is, for errors.
var kindNames = map[byte]string{'s': "a string", 'n': "a number", 'b': "a boolean", 'z': "null", '{': "an object", '[': "an array"}

func (v value) what() string { return cmp.Or(kindNames[v.kind], "?") }

// fieldErr names the field whose value was wrong.
func fieldErr(k []byte, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("field %q: %w", k, err)
}

var errSyntax = errors.New("not a JSON object")

// scanObject calls f for every field of the JSON object in b. It checks
// the syntax that it needs to find the fields (quotes, braces, colons,
// commas); a number's or literal's text is checked by whoever reads it.
func scanObject(b []byte, f func(k []byte, v value) error) error {
	i, n := 0, len(b)
	ws := func() {
		for i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
			i++
		}
	}
	// str scans a string whose opening quote is at i; it returns its
	// contents and whether they hold escapes, leaving i past the quote.
	str := func() ([]byte, bool, bool) {
		i++
		s, esc := i, false
		for i < n {
			switch b[i] {
			case '"':
				i++
				return b[s : i-1], esc, true
			case '\\':
				esc = true
				i++
			}
			i++
		}
		return nil, false, false
	}
	ws()
	if i >= n || b[i] != '{' {
		return errSyntax
	}
	i++
	ws()
	if i < n && b[i] == '}' {
		i++
		ws()
		if i != n {
			return fmt.Errorf("text after the object")
		}
		return nil
	}
	for {
		ws()
		if i >= n || b[i] != '"' {
			return fmt.Errorf("want a field name at byte %d", i+1)
		}
		k, _, ok := str()
		if !ok {
			return fmt.Errorf("unterminated field name")
		}
		ws()
		if i >= n || b[i] != ':' {
			return fmt.Errorf("want ':' after field %q", k)
		}
		i++
		ws()
		if i >= n {
			return fmt.Errorf("field %q: no value", k)
		}
		var v value
		switch c := b[i]; c {
		case '"':
			s, esc, ok := str()
			if !ok {
				return fmt.Errorf("field %q: unterminated string", k)
			}
			v = value{kind: 's', raw: s, esc: esc}
		case '{', '[':
			s := i
			depth := 0
		nest:
			for i < n {
				switch b[i] {
				case '"':
					if _, _, ok := str(); !ok {
						return fmt.Errorf("field %q: unterminated string", k)
					}
					continue
				case '{', '[':
					depth++
				case '}', ']':
					depth--
					if depth == 0 {
						i++
						break nest
					}
				}
				i++
			}
			if depth != 0 {
				return fmt.Errorf("field %q: unterminated %c", k, c)
			}
			v = value{kind: c, raw: b[s:i]}
		default:
			s := i
			for i < n && b[i] != ',' && b[i] != '}' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' {
				i++
			}
			raw := b[s:i]
			switch {
			case bytes.Equal(raw, []byte("null")):
				v = value{kind: 'z', raw: raw}
			case bytes.Equal(raw, []byte("true")), bytes.Equal(raw, []byte("false")):
				v = value{kind: 'b', raw: raw}
			case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
				v = value{kind: 'n', raw: raw}
			default:
				return fmt.Errorf("field %q: bad value %q", k, raw)
			}
		}
		if err := f(k, v); err != nil {
			return err
		}
		ws()
		if i < n && b[i] == ',' {
			i++
			continue
		}
		if i < n && b[i] == '}' {
			i++
			ws()
			if i != n {
				return fmt.Errorf("text after the object")
			}
			return nil
		}
		return fmt.Errorf("want ',' or '}' after field %q", k)
	}
}

// floats parses a JSON array of numbers.
func floats(v value) ([]float64, error) {
	if v.kind == 'z' {
		return nil, nil
	}
	if v.kind != '[' {
		return nil, fmt.Errorf("want an array of numbers, got %s", v.what())
	}
	var out []float64
	if err := json.Unmarshal(v.raw, &out); err != nil {
		return nil, fmt.Errorf("want an array of numbers: %v", err)
	}
	return out, nil
}

var newline = []byte{'\n'}

// chunkBytes is how much of a JSONL file one worker parses at a time.
const chunkBytes = 1 << 20

// carrySlack is the room a chunk buffer keeps for the part line carried
// into it from the chunk before.
const carrySlack = 64 << 10

// countLines counts the lines of the file at path (one without its
// newline at the end counts), reading it through one chunk buffer; an
// absent file has none.
func countLines(path string) (int, error) {
	f, err := bundle.OpenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, chunkBytes)
	n, last := 0, byte('\n')
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += bytes.Count(buf[:k], newline)
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// scanLines parses the JSONL file at path on every core, chunk by chunk,
// and returns what each chunk's parser made, in file order. newPart makes
// a chunk's result for about that many lines; line is called for every non-blank line with its
// 1-based number. As every bundle reader does, it drops a truncated last
// line (one without its newline that does not parse) and names the line
// of any other error: "events.jsonl:12: field \"pid\": want an integer".
// An absent file gives no parts and no error.
func scanLines[P any](path string, newPart func(lines int) P, line func(p P, b []byte, no int) error) ([]P, error) {
	f, err := bundle.OpenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type job struct {
		idx   int
		buf   []byte // the buffer data is in, for reuse
		data  []byte
		first int  // line number of its first line
		lines int  // newlines in it
		last  bool // holds the file's end
	}
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan job, workers) // blocks the reader: at most 2×workers chunks in memory
	var mu sync.Mutex
	var parts []P
	g, ctx := errgroup.WithContext(context.Background())
	// Chunk buffers go back to free once parsed (the parsers copy what
	// they keep), so that the reader does not allocate and clear 4 MB a
	// chunk.
	free := make(chan []byte, 2*workers+2)
	g.Go(func() error { // the reader: cuts the file into chunks at newlines
		defer close(jobs)
		var carry []byte
		lineNo := 1
		for idx := 0; ; idx++ {
			var buf []byte
			select {
			case buf = <-free:
			default:
			}
			if cap(buf) < len(carry)+chunkBytes {
				// Room for the next chunks' carries too (a line's
				// end): a buffer sized to this carry alone came back
				// too small for a longer one, and the reader then
				// allocated anew (72 MB for a 189 MB events.jsonl).
				buf = make([]byte, len(carry)+chunkBytes+carrySlack)
			}
			buf = buf[:len(carry)+chunkBytes]
			copy(buf, carry)
			n, err := io.ReadFull(f, buf[len(carry):])
			data := buf[:len(carry)+n]
			eof := err == io.EOF || err == io.ErrUnexpectedEOF
			if err != nil && !eof {
				return fmt.Errorf("%s: %w", path, err)
			}
			cut := len(data)
			if !eof {
				cut = bytes.LastIndexByte(data, '\n') + 1
				if cut == 0 { // one line longer than a chunk
					carry = data
					idx--
					continue
				}
			}
			carry = append([]byte(nil), data[cut:]...)
			j := job{idx: idx, buf: buf, data: data[:cut], first: lineNo, last: eof}
			j.lines = bytes.Count(j.data, []byte{'\n'})
			lineNo += j.lines
			select {
			case jobs <- j:
			case <-ctx.Done():
				return nil
			}
			if eof {
				return nil
			}
		}
	})
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for j := range jobs {
				p := newPart(j.lines + 1)
				for d, no := j.data, j.first; len(d) > 0; no++ {
					l, rest, complete := bytes.Cut(d, newline)
					d = rest
					if len(bytes.TrimSpace(l)) > 0 {
						if err := line(p, l, no); err != nil {
							if j.last && !complete {
								break // a truncated last line
							}
							return fmt.Errorf("%s:%d: %w", path, no, err)
						}
					}
				}
				select {
				case free <- j.buf:
				default:
				}
				mu.Lock()
				if k := j.idx + 1 - len(parts); k > 0 {
					parts = append(parts, make([]P, k)...)
				}
				parts[j.idx] = p
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}
