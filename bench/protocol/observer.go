package protocol

import (
	"cmp"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Observer measures a realtime WebSocket session that it only watches:
// the capturing proxy relays a client's session and hands it every
// message, each direction, with the time it passed. Server messages are
// read by the dialect's own reader and booked by the same code as the
// session clients' (session.record), so first update, lags, partials,
// finals and final-after-stop mean what docs/REALTIME.md says; the
// client's messages give the audio sent (binary frames or
// input_audio_buffer.append) and the end of input (STOP, the final
// commit, transcription.done). Its methods are safe for concurrent use.
type Observer struct {
	name, dialect, pace string
	s                   *session // s.mu guards the fields below too
	sentBytes           int64
	firstSrv            time.Time
	err                 error
}

// NewObserver returns an observer for a session of protocol name
// ("funasr-ws" or "openai-realtime") with opts.Dialect and opts.Pace (how
// the client paces its audio: PaceRealtime, the default, puts the lag
// origin one frame before the first, as the clients do).
func NewObserver(name string, opts Options) (*Observer, error) {
	_, newD, err := wsDialect(name, opts)
	if err != nil {
		return nil, err
	}
	pace := cmp.Or(opts.Pace, PaceRealtime)
	return &Observer{name: name, dialect: opts.Dialect, pace: pace, s: &session{d: newD(), rt: &RealtimeResult{}}}, nil
}

// FromClient books a message the client sent, at now.
func (o *Observer) FromClient(typ websocket.MessageType, data []byte, now time.Time) {
	audio, stop := o.classify(typ, data)
	s, rt := o.s, o.s.rt
	s.mu.Lock()
	defer s.mu.Unlock()
	if audio > 0 {
		rate := int64(s.d.rate())
		if rt.AudioStart.IsZero() {
			rt.AudioStart, s.origin = now, now
			if o.pace == PaceRealtime {
				s.origin = now.Add(-time.Duration(int64(audio) / 2 * int64(time.Second) / rate))
			}
		}
		o.sentBytes += int64(audio)
		rt.Frames++
		s.sentNs.Store(o.sentBytes / 2 * int64(time.Second) / rate)
	}
	if stop && !s.stopped {
		s.stopped = true
		rt.StopSent = now
	}
}

// FromServer books a message the server sent, at now; an error is the
// dialect's (a server error event, a malformed message), and the first is
// kept for Result.
func (o *Observer) FromServer(typ websocket.MessageType, data []byte, now time.Time) error {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.d.handle(typ, data, s.stopped)
	if err == nil {
		s.record(m, now)
	} else if o.err == nil {
		o.err = err
	}
	if o.firstSrv.IsZero() {
		o.firstSrv = now
	}
	return err
}

// Result is the session as a Result (Realtime set): the text, first
// update as the first token, the end at the final message (or end, the
// close, when none came), and a failure when the session ended without its
// final message, or with a dialect error (closeErr is why the relay ended,
// nil for a clean close).
func (o *Observer) Result(upgraded, end time.Time, closeErr error) Result {
	s, rt := o.s, o.s.rt
	s.mu.Lock()
	defer s.mu.Unlock()
	rt.AudioS = float64(o.sentBytes/2) / float64(s.d.rate())
	res := Result{Realtime: rt, HTTPStatus: 101, FirstByte: o.firstSrv, FirstToken: rt.FirstUpdate,
		Text: strings.TrimSpace(s.d.text()), End: end}
	switch kind := dialectKind(o.err); {
	case kind != "":
		res.Err, res.ErrKind = o.err, kind
	case rt.Final.IsZero():
		why := "the session closed before the final message"
		if closeErr != nil {
			why += ": " + closeErr.Error()
		}
		res.Err, res.ErrKind = errors.New(why), KindConnection
	default:
		res.End = rt.Final
	}
	return res
}

// classify reads a client message: the audio bytes (PCM16) it carries and
// whether it ends the input.
func (o *Observer) classify(typ websocket.MessageType, data []byte) (audio int, stop bool) {
	if typ == websocket.MessageBinary {
		return len(data), false
	}
	if o.name == "funasr-ws" {
		return 0, strings.TrimSpace(string(data)) == "STOP"
	}
	var v struct {
		Type  string `json:"type"`
		Audio string `json:"audio"`
		Final bool   `json:"final"`
	}
	if json.Unmarshal(data, &v) != nil {
		return 0, false
	}
	switch v.Type {
	case "input_audio_buffer.append":
		n := len(v.Audio) / 4 * 3
		n -= strings.Count(v.Audio[max(0, len(v.Audio)-2):], "=")
		return max(n, 0), false
	case "transcription.done":
		return 0, true
	case "input_audio_buffer.commit":
		// vLLM's client commits once to start and once, final, to end.
		return 0, o.dialect != DialectVLLM || v.Final
	}
	return 0, false
}
