package protocol

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/coder/websocket"
)

// NewRealtime returns the "openai-realtime" client in opts.Dialect:
//
//   - DialectOpenAI (default): OpenAI's GA realtime transcription. Opens
//     /v1/realtime?intent=transcription, waits for session.created, sends
//     session.update {session: {type: "transcription", audio: {input:
//     {format: {type: "audio/pcm", rate: 24000}, transcription: {model,
//     language}, turn_detection: {type: "server_vad"}}}}}, then
//     input_audio_buffer.append with base64 PCM16 at 24 kHz. The end of
//     input is an input_audio_buffer.commit; the session is final once that
//     commit was answered (a committed event not right after
//     speech_stopped, which marks the server VAD's own commits, or the
//     empty-buffer error) and every committed item has its
//     ...input_audio_transcription.completed (or .failed). Deltas append to their item; the transcript is the items'
//     texts in commit order.
//   - DialectVLLM: vLLM's /v1/realtime. session.update with a top-level
//     model (and language), an input_audio_buffer.commit that starts
//     generation, appends at 16 kHz, {"type": "input_audio_buffer.commit",
//     "final": true} at the end; transcription.delta appends,
//     transcription.done {text} is final.
//   - DialectSGLangOmni: SGLang-Omni's realtime transcription session at
//     /v1/realtime?intent=transcription (without the intent the server
//     opens a conversation session). session.update with flat fields
//     (input_audio_format "pcm16", language; no turn_detection, so the
//     model's own default holds: the server refuses server_vad for models
//     without it), appends at 16 kHz, transcription.done at the end (the
//     server commits what is buffered); transcription.segment {segment_id,
//     audio_end_ms, text, is_final} replaces its segment's text (a final
//     segment with no text is a silent one and locks nothing);
//     transcription.completed {text} is final.
//
// Every dialect fails the session on an error event, except OpenAI's
// empty-buffer answer to the last commit and SGLang-Omni's server_error
// events (a failed decode), after which that server carries on: those are
// counted in RealtimeResult.ServerErrors. docs/REALTIME.md gives the
// sources of these message shapes.
func NewRealtime(opts Options) (Client, error) { return newWSClient("openai-realtime", opts) }

// wsDialect is the session path and the dialect constructor of a realtime
// protocol, "funasr-ws" or "openai-realtime" in opts.Dialect (the
// clients' and the Observer's).
func wsDialect(name string, opts Options) (path string, newD func() dialect, err error) {
	switch {
	case name == "funasr-ws":
		hot := slices.Clone(opts.Hotwords)
		return "/", func() dialect { return &funasr{hotwords: hot} }, nil
	case name != "openai-realtime":
		return "", nil, fmt.Errorf("protocol %q has no WebSocket sessions (want funasr-ws or openai-realtime)", name)
	}
	switch opts.Dialect {
	case "", DialectOpenAI:
		return "/v1/realtime?intent=transcription", func() dialect { return &openaiRT{texts: map[string]string{}, done: map[string]bool{}} }, nil
	case DialectVLLM:
		return "/v1/realtime", func() dialect { return &vllmRT{} }, nil
	case DialectSGLangOmni:
		return "/v1/realtime?intent=transcription", func() dialect { return &sglangRT{texts: map[string]string{}} }, nil
	}
	return "", nil, fmt.Errorf("realtime dialect %q: want openai, vllm or sglang-omni", opts.Dialect)
}

// rtMsg is the union of the server events the three dialects send.
type rtMsg struct {
	Type       string          `json:"type"`
	Error      json.RawMessage `json:"error"`
	Code       any             `json:"code"`
	ItemID     string          `json:"item_id"`
	Delta      string          `json:"delta"`
	Transcript string          `json:"transcript"`
	Text       *string         `json:"text"`
	SegmentID  any             `json:"segment_id"`
	AudioEndMs *float64        `json:"audio_end_ms"`
	IsFinal    bool            `json:"is_final"`
}

// parseRT decodes a server event and starts its message (coverage
// unknown): ready at session.created, which every dialect sends.
func parseRT(typ websocket.MessageType, data []byte) (rtMsg, message, error) {
	var v rtMsg
	m := message{coveredS: -1}
	if err := decodeText(typ, data, &v); err != nil {
		return v, m, err
	}
	if v.Type == "" {
		return v, m, &malformedError{fmt.Sprintf("event without a type: %.100s", data)}
	}
	m.ready = v.Type == "session.created"
	return v, m, nil
}

// errorCode is the code of an error event, at the top level (vLLM) or
// inside the error object (OpenAI, SGLang-Omni).
func (v *rtMsg) errorCode() string {
	if v.Code != nil {
		return fmt.Sprint(v.Code)
	}
	var o struct {
		Code any `json:"code"`
	}
	if json.Unmarshal(v.Error, &o) == nil && o.Code != nil {
		return fmt.Sprint(o.Code)
	}
	return ""
}

func writeJSON(ctx context.Context, s *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Write(ctx, websocket.MessageText, b)
}

// jsonAudio is what the three dialects share: nothing to say before the
// server is ready, and audio as input_audio_buffer.append with base64 PCM16.
type jsonAudio struct{}

func (jsonAudio) hello(context.Context, *websocket.Conn, *Job) error { return nil }

func (jsonAudio) frame(pcm []byte) (websocket.MessageType, []byte) {
	const head = `{"type":"input_audio_buffer.append","audio":"`
	b := make([]byte, 0, len(head)+base64.StdEncoding.EncodedLen(len(pcm))+2)
	b = append(b, head...)
	b = base64.StdEncoding.AppendEncode(b, pcm)
	b = append(b, `"}`...)
	return websocket.MessageText, b
}

// joinItems joins the non-empty texts of items in order, trimmed, with spaces.
func joinItems(order []string, texts map[string]string) string {
	parts := make([]string, 0, len(order))
	for _, id := range order {
		if t := strings.TrimSpace(texts[id]); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

// openaiRT is OpenAI's GA realtime transcription.
type openaiRT struct {
	jsonAudio
	order     []string // item ids, in commit (or first-seen) order
	texts     map[string]string
	done      map[string]bool
	committed bool   // the last commit was answered
	last      string // the previous event's type
}

func (o *openaiRT) rate() int { return 24000 }

func (o *openaiRT) configure(ctx context.Context, s *websocket.Conn, job *Job) error {
	tr := map[string]any{}
	if job.Model != "" {
		tr["model"] = job.Model
	}
	if job.Language != "" {
		tr["language"] = job.Language
	}
	return writeJSON(ctx, s, map[string]any{
		"type": "session.update",
		"session": map[string]any{
			"type": "transcription",
			"audio": map[string]any{"input": map[string]any{
				"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
				"transcription":  tr,
				"turn_detection": map[string]any{"type": "server_vad"},
			}},
		},
	})
}

func (o *openaiRT) stop(ctx context.Context, s *websocket.Conn) error {
	return writeJSON(ctx, s, map[string]string{"type": "input_audio_buffer.commit"})
}

func (o *openaiRT) see(id string) {
	if _, ok := o.texts[id]; !ok {
		o.order = append(o.order, id)
		o.texts[id] = ""
	}
}

func (o *openaiRT) handle(typ websocket.MessageType, data []byte, stopped bool) (message, error) {
	v, m, err := parseRT(typ, data)
	if err != nil {
		return m, err
	}
	last := o.last
	o.last = v.Type
	switch v.Type {
	case "transcription_session.created":
		m.ready = true
	case "error":
		if stopped && v.errorCode() == "input_audio_buffer_commit_empty" {
			o.committed = true
			break
		}
		return m, &serverError{errorText(v.Error, data)}
	case "input_audio_buffer.committed":
		if v.ItemID != "" {
			o.see(v.ItemID)
		}
		// Server VAD commits right after speech_stopped; a commit
		// without one, after the end of input, answers ours.
		if stopped && last != "input_audio_buffer.speech_stopped" {
			o.committed = true
		}
	case "conversation.item.input_audio_transcription.delta":
		o.see(v.ItemID)
		o.texts[v.ItemID] += v.Delta
		m.text, m.partial = v.Delta != "", v.Delta != ""
	case "conversation.item.input_audio_transcription.completed":
		o.see(v.ItemID)
		o.texts[v.ItemID] = v.Transcript
		o.done[v.ItemID] = true
		m.text, m.locked = strings.TrimSpace(v.Transcript) != "", 1
	case "conversation.item.input_audio_transcription.failed":
		o.see(v.ItemID)
		o.done[v.ItemID] = true
	}
	// final once our commit was answered and every item seen is done
	m.final = stopped && o.committed && !slices.ContainsFunc(o.order, func(id string) bool { return !o.done[id] })
	return m, nil
}

func (o *openaiRT) text() string { return joinItems(o.order, o.texts) }

// vllmRT is vLLM's /v1/realtime.
type vllmRT struct {
	jsonAudio
	b strings.Builder
}

func (d *vllmRT) rate() int { return 16000 }

func (d *vllmRT) configure(ctx context.Context, s *websocket.Conn, job *Job) error {
	u := map[string]any{"type": "session.update", "model": job.Model}
	if job.Language != "" {
		u["language"] = job.Language
	}
	if err := writeJSON(ctx, s, u); err != nil {
		return err
	}
	// vLLM starts generating at the first commit.
	return writeJSON(ctx, s, map[string]any{"type": "input_audio_buffer.commit"})
}

func (d *vllmRT) stop(ctx context.Context, s *websocket.Conn) error {
	return writeJSON(ctx, s, map[string]any{"type": "input_audio_buffer.commit", "final": true})
}

func (d *vllmRT) handle(typ websocket.MessageType, data []byte, stopped bool) (message, error) {
	v, m, err := parseRT(typ, data)
	if err != nil {
		return m, err
	}
	switch v.Type {
	case "error":
		msg := errorText(v.Error, data)
		if c := v.errorCode(); c != "" && !strings.Contains(msg, c) {
			msg += " (" + c + ")" // vLLM: the code sits beside the message
		}
		return m, &serverError{msg}
	case "transcription.delta":
		d.b.WriteString(v.Delta)
		m.text, m.partial = v.Delta != "", v.Delta != ""
	case "transcription.done":
		if v.Text != nil {
			d.b.Reset()
			d.b.WriteString(*v.Text)
		}
		m.text = strings.TrimSpace(d.b.String()) != ""
		m.final = true
	}
	return m, nil
}

func (d *vllmRT) text() string { return strings.TrimSpace(d.b.String()) }

// sglangRT is SGLang-Omni's realtime transcription session.
type sglangRT struct {
	jsonAudio
	order []string
	texts map[string]string
	final string // the final message's text, trimmed
}

func (d *sglangRT) rate() int { return 16000 }

func (d *sglangRT) configure(ctx context.Context, s *websocket.Conn, job *Job) error {
	sess := map[string]any{"input_audio_format": "pcm16"}
	if job.Language != "" {
		sess["language"] = job.Language
	}
	return writeJSON(ctx, s, map[string]any{"type": "session.update", "session": sess})
}

func (d *sglangRT) stop(ctx context.Context, s *websocket.Conn) error {
	return writeJSON(ctx, s, map[string]any{"type": "transcription.done"})
}

func (d *sglangRT) handle(typ websocket.MessageType, data []byte, stopped bool) (message, error) {
	v, m, err := parseRT(typ, data)
	if err != nil {
		return m, err
	}
	t := *cmp.Or(v.Text, new("")) // a segment's or the final text
	switch v.Type {
	case "error":
		var e struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(v.Error, &e) == nil && e.Type == "server_error" {
			m.serverErr = errorText(v.Error, data) // a failed decode: the session goes on
			return m, nil
		}
		return m, &serverError{errorText(v.Error, data)}
	case "transcription.segment":
		id := fmt.Sprint(v.SegmentID)
		if _, ok := d.texts[id]; !ok {
			d.order = append(d.order, id)
		}
		d.texts[id] = t // a segment's text replaces its previous text
		m.text = strings.TrimSpace(t) != ""
		if v.IsFinal {
			if m.text {
				m.locked = 1
			}
		} else {
			m.partial = m.text
		}
		if v.AudioEndMs != nil {
			m.coveredS = *v.AudioEndMs / 1000
		}
	case "transcription.completed":
		d.final = strings.TrimSpace(t)
		m.text = d.final != ""
		m.final = true
	}
	return m, nil
}

func (d *sglangRT) text() string { return cmp.Or(d.final, joinItems(d.order, d.texts)) }
