package protocol

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/coder/websocket"
)

// NewFunASR returns the "funasr-ws" client: Fun-ASR's realtime WebSocket
// protocol (serve_realtime_ws.py, and the reference server's / and /ws).
//
// A session sends the text START, then LANGUAGE:<job.Language, as a name
// (FunASRLanguage)> and
// HOTWORDS:<opts.Hotwords> when set, waits for {"event":"started"}, sends
// the audio as binary frames of PCM16 16 kHz mono (opts.ChunkMs each,
// paced by opts.Pace, opts.Loops times over), sends STOP and waits for the
// message with "is_final": true. Locked sentences only grow; "partial"
// replaces the previous partial. The transcript is the sentences' texts
// joined with spaces, plus the final message's partial if it still has one.
//
// The target is an http(s) or ws(s) URL; without a path the session
// opens "/".
func NewFunASR(opts Options) (Client, error) { return newWSClient("funasr-ws", opts) }

type funasr struct {
	hotwords  []string
	sentences []string
	partial   string
	final     bool // the final message arrived
}

// funasrMsg is any server message of the protocol.
type funasrMsg struct {
	Event     string          `json:"event"`
	Error     json.RawMessage `json:"error"`
	Sentences *[]struct {
		Text string `json:"text"`
	} `json:"sentences"`
	Partial    *string  `json:"partial"`
	DurationMs *float64 `json:"duration_ms"`
	IsFinal    bool     `json:"is_final"`
}

func (f *funasr) rate() int { return 16000 }

func (f *funasr) hello(ctx context.Context, s *websocket.Conn, job *Job) error {
	msgs := []string{"START"}
	if job.Language != "" {
		msgs = append(msgs, "LANGUAGE:"+FunASRLanguage(job.Language))
	}
	if len(f.hotwords) > 0 {
		msgs = append(msgs, "HOTWORDS:"+strings.Join(f.hotwords, ","))
	}
	for _, m := range msgs {
		if err := s.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			return err
		}
	}
	return nil
}

// FunASRLanguage is the LANGUAGE value for a language code. Fun-ASR puts
// the value into the model's prompt as it stands ("语音转写成<value>："), and
// its own examples use language names, so the codes asrprof knows become
// the names the model was prompted with; anything else is sent as given.
func FunASRLanguage(code string) string {
	switch strings.ToLower(code) {
	case "zh", "zh-cn", "cmn":
		return "中文"
	case "en", "en-us", "eng":
		return "英文"
	case "ja", "jpn":
		return "日文"
	}
	return code
}

func (f *funasr) configure(context.Context, *websocket.Conn, *Job) error { return nil }

func (f *funasr) frame(pcm []byte) (websocket.MessageType, []byte) {
	return websocket.MessageBinary, pcm
}

func (f *funasr) stop(ctx context.Context, s *websocket.Conn) error {
	return s.Write(ctx, websocket.MessageText, []byte("STOP"))
}

func (f *funasr) handle(typ websocket.MessageType, data []byte, _ bool) (message, error) {
	m := message{coveredS: -1}
	var v funasrMsg
	if err := decodeText(typ, data, &v); err != nil {
		return m, err
	}
	switch v.Event {
	case "started":
		m.ready = true
		return m, nil
	case "error":
		return m, &serverError{errorText(v.Error, data)}
	case "stopped":
		if f.final {
			return m, nil // the normal end, after the final message
		}
		return m, &malformedError{"stopped without a final message"}
	case "":
	default: // language_set, hotwords_set and other acknowledgements
		return m, nil
	}
	if v.Sentences == nil && v.Partial == nil && !v.IsFinal {
		return m, nil // nothing this client understands
	}
	if v.Sentences != nil && len(*v.Sentences) >= len(f.sentences) {
		// Locked sentences only grow: a shorter list is ignored.
		m.locked = len(*v.Sentences) - len(f.sentences)
		f.sentences = f.sentences[:0]
		for _, s := range *v.Sentences {
			f.sentences = append(f.sentences, strings.TrimSpace(s.Text))
		}
	}
	// The partial replaces the previous one; a message without one has none.
	f.partial = strings.TrimSpace(*cmp.Or(v.Partial, new("")))
	m.text = f.partial != "" || m.locked > 0 || (len(f.sentences) > 0 && v.IsFinal)
	m.partial = !v.IsFinal && (f.partial != "" || m.locked > 0)
	m.final = v.IsFinal
	f.final = f.final || v.IsFinal
	if v.DurationMs != nil {
		m.coveredS = *v.DurationMs / 1000
	}
	return m, nil
}

func (f *funasr) text() string {
	parts := append(slices.Clone(f.sentences), f.partial)
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " ")
}

// errorText renders an error field that may be a string or an object
// with a message.
func errorText(raw json.RawMessage, whole []byte) string {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	var o struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		if o.Code != nil {
			return fmt.Sprintf("%s (%v)", o.Message, o.Code)
		}
		return o.Message
	}
	return fmt.Sprintf("%.200s", whole)
}
