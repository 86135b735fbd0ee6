package fakeasr

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WSConfig shapes a fake realtime (WebSocket) transcription server. The
// zero value speaks Fun-ASR's protocol and reveals DefaultText one word per
// 0.2 s of audio received, three words to a sentence.
type WSConfig struct {
	// Dialect: "funasr" (default), "openai", "vllm" or "sglang-omni".
	Dialect string
	// Model, if set, is listed by GET /v1/models, and GET /health answers
	// 200 (every other path is a WebSocket endpoint).
	Model string
	// Text is the transcript (DefaultText when empty).
	Text string
	// WordS is how much audio reveals one more word (default 0.2 s).
	WordS float64
	// Delay is the processing time before each update: the server answers
	// a frame Delay after reading it (and reads nothing meanwhile).
	Delay time.Duration
	// NoDuration leaves duration_ms (funasr) and audio_end_ms
	// (sglang-omni) out of updates.
	NoDuration bool
	// CloseAfterS, if > 0, closes the session with status 1011 once that
	// much audio arrived.
	CloseAfterS float64
	// CloseOn, if set, limits CloseAfterS to the sessions n (1-based, in
	// arrival order) for which it returns true.
	CloseOn func(n int) bool
	// NoFinal never answers the end of input.
	NoFinal bool
	// DecodeError (sglang-omni) sends, before the first update, what
	// SGLang-Omni sends when a decode fails and it carries on: an error
	// event of type server_error, and a final segment with no text (a
	// silent one).
	DecodeError bool
}

// sentenceWords is how many words make a locked sentence, item or segment.
const sentenceWords = 3

// WSSession is what the fake server received in one session.
type WSSession struct {
	Path        string
	RequestID   string // X-Request-Id of the upgrade request
	TraceParent string
	// Authorization is the upgrade request's Authorization header.
	Authorization string
	Control       []string       // text messages other than audio (START, STOP, event types)
	Config        map[string]any // the session.update, if any
	Frames        int
	AudioS        float64 // audio received, at the dialect's rate
}

// WSServer is a running fake realtime server.
type WSServer struct {
	URL  string // http://127.0.0.1:port; clients turn it into ws://
	cfg  WSConfig
	rate int // the audio's sample rate in the dialect (Hz)

	mu       sync.Mutex
	sessions []*WSSession
}

// NewWSServer starts a fake realtime server, closed at cleanup. Every path
// is served; the upgrade's X-Request-Id is echoed as "srv-<id>".
func NewWSServer(t testing.TB, cfg WSConfig) *WSServer {
	t.Helper()
	cfg.Dialect = cmp.Or(cfg.Dialect, "funasr")
	cfg.Text = cmp.Or(cfg.Text, DefaultText)
	cfg.WordS = cmp.Or(cfg.WordS, 0.2)
	s := &WSServer{cfg: cfg, rate: 16000}
	if cfg.Dialect == "openai" {
		s.rate = 24000
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	t.Cleanup(srv.Close)
	return s
}

// Sessions returns copies of the sessions received so far.
func (s *WSServer) Sessions() []WSSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WSSession, len(s.sessions))
	for i, x := range s.sessions {
		out[i] = *x
		out[i].Control = slices.Clone(x.Control)
	}
	return out
}

// fakeSession is the server side of one session.
type fakeSession struct {
	s     *WSServer
	c     *websocket.Conn
	rec   *WSSession
	words []string
	bytes int
	shown int // words revealed so far
	// closes says whether this session closes after CloseAfterS.
	closes bool
}

func (s *WSServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && s.cfg.Model != "" && (r.URL.Path == "/v1/models" || r.URL.Path == "/health") {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, s.cfg.Model)
		}
		return
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", "srv-"+id)
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(8 << 20)
	rec := &WSSession{Path: r.URL.RequestURI(), RequestID: r.Header.Get("X-Request-Id"), TraceParent: r.Header.Get("traceparent"),
		Authorization: r.Header.Get("Authorization")}
	s.mu.Lock()
	s.sessions = append(s.sessions, rec)
	n := len(s.sessions)
	s.mu.Unlock()
	f := &fakeSession{s: s, c: c, rec: rec, words: strings.Fields(s.cfg.Text)}
	f.closes = s.cfg.CloseAfterS > 0 && (s.cfg.CloseOn == nil || s.cfg.CloseOn(n))
	ctx := r.Context()
	if s.cfg.Dialect != "funasr" {
		f.send(ctx, map[string]any{"type": "session.created", "session": map[string]any{"id": "sess_1"}})
	}
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		done, err := f.message(ctx, typ, data)
		if err != nil {
			c.Close(websocket.StatusInternalError, err.Error())
			return
		}
		if done {
			// Wait for the client's close.
			_, _, _ = c.Read(ctx)
			return
		}
	}
}

func (f *fakeSession) note(s string) {
	f.s.mu.Lock()
	f.rec.Control = append(f.rec.Control, s)
	f.s.mu.Unlock()
}

func (f *fakeSession) send(ctx context.Context, v any) {
	b, _ := json.Marshal(v)
	_ = f.c.Write(ctx, websocket.MessageText, b)
}

// message handles one client message; done when the session is over.
func (f *fakeSession) message(ctx context.Context, typ websocket.MessageType, data []byte) (bool, error) {
	cfg := &f.s.cfg
	var audio []byte
	ended := false
	switch {
	case cfg.Dialect == "funasr" && typ == websocket.MessageBinary:
		audio = data
	case cfg.Dialect == "funasr":
		msg := string(data)
		f.note(msg)
		switch {
		case msg == "START":
			f.send(ctx, map[string]any{"event": "started"})
		case strings.HasPrefix(msg, "LANGUAGE:"):
			f.send(ctx, map[string]any{"event": "language_set", "language": strings.TrimPrefix(msg, "LANGUAGE:")})
		case msg == "STOP":
			ended = true
		}
	default:
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			f.send(ctx, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "not JSON"}})
			return false, nil
		}
		t, _ := v["type"].(string)
		switch t {
		case "input_audio_buffer.append":
			s, _ := v["audio"].(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return false, fmt.Errorf("bad base64")
			}
			audio = b
		case "session.update":
			f.note(t)
			if m, _ := v["model"].(string); cfg.Dialect == "vllm" && m == "" {
				// vLLM's answer to a session.update without a model.
				f.send(ctx, map[string]any{"type": "error", "error": "model is required", "code": "invalid_event"})
			}
			f.s.mu.Lock()
			f.rec.Config = v
			f.s.mu.Unlock()
		case "input_audio_buffer.commit":
			if final, _ := v["final"].(bool); final {
				f.note(t + " final")
				ended = cfg.Dialect == "vllm"
			} else {
				f.note(t)
				ended = cfg.Dialect == "openai"
			}
		default:
			f.note(t)
			ended = t == "transcription.done" && cfg.Dialect == "sglang-omni"
			if ended && !strings.Contains(f.rec.Path, "intent=transcription") {
				// Without the intent SGLang-Omni opens a conversation
				// session, which does not know this event.
				f.send(ctx, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
					"code": "unknown_event", "message": "unknown client event transcription.done"}})
				ended = false
			}
		}
	}
	if audio != nil {
		f.bytes += len(audio)
		f.s.mu.Lock()
		f.rec.Frames++
		f.rec.AudioS = float64(f.bytes/2) / float64(f.s.rate)
		audioS := f.rec.AudioS
		f.s.mu.Unlock()
		if f.closes && audioS >= cfg.CloseAfterS {
			return false, fmt.Errorf("fake: closing mid-session")
		}
		time.Sleep(cfg.Delay)
		n := min(len(f.words), int(audioS/cfg.WordS))
		if prev := f.shown; n > prev {
			f.shown = n
			f.update(ctx, prev, audioS)
		}
	}
	if !ended || cfg.NoFinal {
		return false, nil
	}
	prev := f.shown
	f.shown = len(f.words)
	if cfg.Dialect == "openai" && prev < f.shown {
		f.update(ctx, prev, f.rec.AudioS)
	}
	f.finish(ctx)
	return true, nil
}

// sentences splits the revealed words into locked sentences and the rest.
func (f *fakeSession) sentences() (locked []string, partial []string) {
	k := sentenceWords
	words := f.words[:f.shown]
	for len(words) >= k {
		locked = append(locked, strings.Join(words[:k], " "))
		words = words[k:]
	}
	return locked, words
}

// update announces the words revealed since prev.
func (f *fakeSession) update(ctx context.Context, prev int, audioS float64) {
	cfg := &f.s.cfg
	k := sentenceWords
	locked, partial := f.sentences()
	switch cfg.Dialect {
	case "funasr":
		ss := make([]map[string]any, len(locked))
		for i, t := range locked {
			ss[i] = map[string]any{"text": t, "start": i * 1000, "end": i*1000 + 900}
		}
		m := map[string]any{"sentences": ss, "partial": strings.Join(partial, " "), "partial_start_ms": len(locked) * 1000, "is_final": false}
		if !cfg.NoDuration {
			m["duration_ms"] = audioS * 1000
		}
		f.send(ctx, m)
	case "openai":
		// Server VAD: speech_started at an item's first word; once its
		// words are spoken, speech_stopped, committed, deltas, completed.
		for i := prev; i < f.shown; i++ {
			if i%k == 0 {
				f.send(ctx, map[string]any{"type": "input_audio_buffer.speech_started"})
			}
			if i%k == k-1 {
				f.openaiItem(ctx, i-k+1, i+1, true)
			}
		}
	case "vllm":
		for i := prev; i < f.shown; i++ {
			f.send(ctx, map[string]any{"type": "transcription.delta", "delta": space(i) + f.words[i]})
		}
	case "sglang-omni":
		if cfg.DecodeError && prev == 0 {
			f.send(ctx, map[string]any{"type": "error", "error": map[string]any{"type": "server_error",
				"code": "transcription_failed", "message": "decode failed"}})
			f.send(ctx, map[string]any{"type": "transcription.segment", "segment_id": -1, "text": "", "is_final": true})
		}
		seg := (f.shown - 1) / k
		start := seg * k
		m := map[string]any{"type": "transcription.segment", "segment_id": seg,
			"audio_start_ms": float64(start) * cfg.WordS * 1000,
			"text":           strings.Join(f.words[start:f.shown], " "), "is_final": f.shown-start == k}
		if !cfg.NoDuration {
			m["audio_end_ms"] = audioS * 1000
		}
		// A segment that completed in an earlier message is final already.
		if prev/k < seg && prev%k != 0 {
			ps := (prev / k) * k
			f.send(ctx, map[string]any{"type": "transcription.segment", "segment_id": prev / k,
				"text": strings.Join(f.words[ps:ps+k], " "), "is_final": true})
		}
		f.send(ctx, m)
	}
}

func space(i int) string {
	if i == 0 {
		return ""
	}
	return " "
}

// finish answers the end of input with the dialect's final messages.
func (f *fakeSession) finish(ctx context.Context) {
	cfg := &f.s.cfg
	k := sentenceWords
	all := strings.Join(f.words, " ")
	switch cfg.Dialect {
	case "funasr":
		var ss []map[string]any
		for i := 0; i < len(f.words); i += k {
			ss = append(ss, map[string]any{"text": strings.Join(f.words[i:min(i+k, len(f.words))], " "), "start": i / k * 1000, "end": i/k*1000 + 900})
		}
		f.send(ctx, map[string]any{"sentences": ss, "is_final": true, "duration_ms": f.rec.AudioS * 1000})
		f.send(ctx, map[string]any{"event": "stopped"})
	case "openai":
		if len(f.words)%k == 0 {
			f.send(ctx, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
				"code": "input_audio_buffer_commit_empty", "message": "buffer too small"}})
			return
		}
		f.openaiItem(ctx, len(f.words)/k*k, len(f.words), false)
	case "vllm":
		f.send(ctx, map[string]any{"type": "transcription.done", "text": all, "usage": map[string]any{"input_tokens": 1}})
	case "sglang-omni":
		f.send(ctx, map[string]any{"type": "transcription.completed", "text": all})
	}
}

// openaiItem commits words[from:to] as one item and transcribes it; vad
// says whether the server's VAD (not the client) committed it.
func (f *fakeSession) openaiItem(ctx context.Context, from, to int, vad bool) {
	item := fmt.Sprintf("item_%d", from/sentenceWords)
	if vad {
		f.send(ctx, map[string]any{"type": "input_audio_buffer.speech_stopped"})
	}
	f.send(ctx, map[string]any{"type": "input_audio_buffer.committed", "item_id": item})
	for i := from; i < to; i++ {
		f.send(ctx, map[string]any{"type": "conversation.item.input_audio_transcription.delta", "item_id": item, "delta": space(i-from) + f.words[i]})
	}
	f.send(ctx, map[string]any{"type": "conversation.item.input_audio_transcription.completed", "item_id": item,
		"transcript": strings.Join(f.words[from:to], " ")})
}
