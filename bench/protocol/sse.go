package protocol

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxSSELine bounds one SSE line and one event's data; transcripts are far
// smaller, so anything larger is a broken stream.
const maxSSELine = 8 << 20

var errLineTooLong = errors.New("sse line longer than 8 MiB")

// sseReader reads the data of Server-Sent Events from a byte stream, as the
// HTML living standard describes: lines end in "\n" or "\r\n", a blank line
// ends an event, lines starting with ':' are comments, "data" lines are
// joined with "\n" and every other field is ignored. A lone "\r" does not
// end a line. Unlike a browser it also delivers an event that the stream
// ends without a blank line after, so that a final "data: [DONE]" counts.
type sseReader struct {
	sc      *bufio.Scanner
	data    []byte // the current event's data
	hasData bool
	started bool
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r) // bufio.ScanLines: "\n" or "\r\n" ends a line, as SSE says
	sc.Buffer(make([]byte, 16<<10), maxSSELine)
	return &sseReader{sc: sc}
}

// Next returns the data of the next event. The slice is valid until the
// next call. At the clean end of the stream it returns io.EOF; a read error
// is returned as it came.
func (s *sseReader) Next() ([]byte, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if !s.started {
			s.started = true
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if len(line) == 0 {
			if s.hasData {
				s.hasData = false
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '}) // nil without a colon
		if string(field) != "data" {
			continue
		}
		if !s.hasData {
			s.data = s.data[:0]
			s.hasData = true
		} else {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxSSELine {
			return nil, errLineTooLong
		}
		s.data = append(s.data, value...)
	}
	switch err := s.sc.Err(); {
	case err == nil && s.hasData: // the stream ended without a blank line
		s.hasData = false
		return s.data, nil
	case err == nil:
		return nil, io.EOF
	case errors.Is(err, bufio.ErrTooLong):
		return nil, errLineTooLong
	default:
		return nil, err
	}
}

// streamEvent is the union of the event shapes of both dialects.
type streamEvent struct {
	// SGLang-Omni: transcript.text.delta, transcript.text.done, error.
	Type  string  `json:"type"`
	Delta string  `json:"delta"`
	Text  *string `json:"text"`
	// vLLM: transcription.chunk, or an error object.
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
}

// errorMessage returns the server's error message and whether the event is
// an error at all.
func (ev *streamEvent) errorMessage() (string, bool) {
	if len(ev.Error) == 0 || string(ev.Error) == "null" {
		return ev.Message, ev.Type == "error" || ev.Object == "error"
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(ev.Error, &obj) == nil && obj.Message != "" {
		return obj.Message, true
	}
	var str string
	if json.Unmarshal(ev.Error, &str) == nil && str != "" {
		return str, true
	}
	return string(ev.Error), true
}

// streamOutcome is what decodeStream read.
type streamOutcome struct {
	text       string
	firstToken time.Time
	chunks     []time.Time
	kind       string // KindMalformed or KindServerError; "" with err set means a read error
	err        error
}

// decodeStream reads an SSE transcription stream of either dialect until
// [DONE], an error event or the end of r. now stamps each non-empty delta.
// The text is the done event's text if one came, else the deltas joined.
func decodeStream(r io.Reader, now func() time.Time) streamOutcome {
	var (
		out      streamOutcome
		deltas   strings.Builder
		doneText *string
		events   int
	)
	sr := newSSEReader(r)
	finish := func() streamOutcome {
		out.text = *cmp.Or(doneText, new(deltas.String())) // the done event's text, else the deltas
		return out
	}
	for {
		data, err := sr.Next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF) && doneText != nil: // the end after a done event: the stream is whole
			case errors.Is(err, io.EOF):
				out.kind, out.err = KindMalformed, fmt.Errorf("stream ended without [DONE] after %d events", events)
			case errors.Is(err, errLineTooLong):
				out.kind, out.err = KindMalformed, err
			default:
				out.err = fmt.Errorf("reading stream: %w", err)
			}
			return finish()
		}
		events++
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			return finish()
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			out.kind = KindMalformed
			out.err = fmt.Errorf("decoding stream event %d: %w (data %q)", events, err, excerpt(data))
			return finish()
		}
		if msg, ok := ev.errorMessage(); ok {
			out.kind, out.err = KindServerError, fmt.Errorf("server error event: %s", excerpt([]byte(msg)))
			return finish()
		}
		var delta string
		switch {
		case ev.Type == "transcript.text.delta":
			delta = ev.Delta
		case ev.Type == "transcript.text.done":
			doneText = cmp.Or(ev.Text, new(deltas.String()))
		case len(ev.Choices) > 0:
			for _, c := range ev.Choices {
				delta += c.Delta.Content
			}
		}
		if delta != "" {
			t := now()
			if out.firstToken.IsZero() {
				out.firstToken = t
			}
			out.chunks = append(out.chunks, t)
			deltas.WriteString(delta)
		}
	}
}

// excerpt returns at most the first 200 bytes of b for an error message.
func excerpt(b []byte) string {
	return strings.ToValidUTF8(string(bytes.TrimSpace(b[:min(len(b), 200)])), "\uFFFD")
}
