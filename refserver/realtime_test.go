package refserver

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
)

// TestRealtimeSession streams the LibriVox clip through the Fun-ASR
// endpoint with the funasr-ws client and checks text, updates, spans and
// request-profile events.
func TestRealtimeSession(t *testing.T) {
	requirePocketSphinx(t)
	col := &collector{}
	otlp := httptest.NewServer(col)
	defer otlp.Close()
	base := startServer(t, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + otlp.URL + "/v1/traces"},
		"--max-running-requests", "2")
	dir := t.TempDir()
	postJSON(t, base+"/start_request_profile", map[string]string{"run_id": "rt", "event_dir": dir})

	clip := librivox(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const parentSpan = "00f067aa0ba902b7"
	c, err := protocol.New("funasr-ws", protocol.Options{Target: base, Pace: protocol.PaceNone})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := c.Do(ctx, &protocol.Job{RequestID: "rt-session-1", TraceParent: "00-" + traceID + "-" + parentSpan + "-01",
		SampleID: "clip", FileName: "clip.wav", Audio: clip, Language: "en"})
	if r.Err != nil {
		t.Fatalf("%s: %v", r.ErrKind, r.Err)
	}
	_, body, err := transcribe(ctx, t, base, clip, map[string]string{"model": "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fr struct{ Text string }
	json.Unmarshal(body, &fr)
	file := fr.Text
	t.Logf("realtime %q; file request %q", r.Text, file)
	shared := 0
	for _, w := range strings.Fields(r.Text) {
		if strings.Contains(" "+file+" ", " "+w+" ") {
			shared++
		}
	}
	if len(strings.Fields(r.Text)) < 4 || shared < 3 {
		t.Errorf("realtime text %q shares %d words with the file request's %q", r.Text, shared, file)
	}
	rt := r.Realtime
	if rt.Partials == 0 || rt.Finals == 0 || rt.LagSource != protocol.LagFromServer || rt.FirstUpdate.IsZero() {
		t.Errorf("partials %d finals %d lag source %q first update %v", rt.Partials, rt.Finals, rt.LagSource, rt.FirstUpdate)
	}
	if r.ServerRequestID != "rt-session-1" {
		t.Errorf("server request id %q", r.ServerRequestID)
	}
	postJSON(t, base+"/stop_request_profile", map[string]string{})

	// Spans: the session's root under our traceparent, the stage spans,
	// and one decode_step per step.
	var spans []otlpSpan
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if spans = col.trace(traceID); len(spans) > 0 {
			break
		}
	}
	var root *otlpSpan
	names := map[string]int{}
	for i := range spans {
		names[spans[i].Name]++
		if spans[i].Name == "transcription" {
			root = &spans[i]
		}
	}
	if root == nil {
		t.Fatalf("no transcription span in trace %s (got %v)", traceID, names)
	}
	if root.ParentSpanID != parentSpan {
		t.Errorf("root span parent %q, want %q", root.ParentSpanID, parentSpan)
	}
	steps, _ := root.attr("decode.steps")
	n, _ := strconv.Atoi(fmt.Sprint(steps))
	for _, name := range []string{"queue", "first_forward", "decode"} {
		if names[name] != 1 {
			t.Errorf("%d %s spans", names[name], name)
		}
	}
	if names["decode_step"] < 2 || names["decode_step"] != n {
		t.Errorf("%d decode_step spans for decode.steps %v", names["decode_step"], steps)
	}
	for _, s := range spans {
		if s.Name != "transcription" && s.ParentSpanID != root.SpanID {
			t.Errorf("span %s has parent %s, not the session's span", s.Name, s.ParentSpanID)
		}
	}

	// Events: the file requests' sequence, in order.
	evs := readEvents(t, dir, "rt-session-1")
	var got []string
	for _, e := range evs {
		got = append(got, e.EventName)
	}
	if strings.Join(got, ",") != strings.Join(pipelineOrder, ",") {
		t.Errorf("events %v, want %v", got, pipelineOrder)
	}
}

// wsConn is a raw RFC 6455 client for testing the server's framing.
type wsConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, base string) *wsConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var k [16]byte
	rand.Read(k[:])
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "+base64.StdEncoding.EncodeToString(k[:])+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") == "" {
		t.Fatalf("upgrade answered %s %v", resp.Status, resp.Header)
	}
	return &wsConn{c: c, br: br}
}

// frame writes one frame; masked unless told otherwise.
func (w *wsConn) frame(t *testing.T, fin bool, op byte, payload []byte, masked bool) {
	t.Helper()
	b0 := op
	if fin {
		b0 |= 0x80
	}
	head := []byte{b0}
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		head = append(head, m|byte(n))
	case n < 1<<16:
		head = append(head, m|126)
		head = binary.BigEndian.AppendUint16(head, uint16(n))
	default:
		head = append(head, m|127)
		head = binary.BigEndian.AppendUint64(head, uint64(n))
	}
	body := append([]byte(nil), payload...)
	if masked {
		key := []byte{0x12, 0x34, 0x56, 0x78}
		head = append(head, key...)
		for i := range body {
			body[i] ^= key[i%4]
		}
	}
	if _, err := w.c.Write(append(head, body...)); err != nil {
		t.Fatal(err)
	}
}

// read returns the next server frame (servers never mask).
func (w *wsConn) read(t *testing.T) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		t.Fatal(err)
	}
	if h[1]&0x80 != 0 {
		t.Fatal("server frame is masked")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(w.br, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(w.br, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(w.br, p); err != nil {
		t.Fatal(err)
	}
	return h[0] & 0x0f, p
}

func TestRealtimeFraming(t *testing.T) {
	requirePocketSphinx(t)
	base := startServer(t, nil, "--max-running-requests", "1")

	w := dialRaw(t, base)
	// START in two fragments with a ping between them.
	w.frame(t, false, 1, []byte("STA"), true)
	w.frame(t, true, 9, []byte("hi"), true)
	w.frame(t, true, 0, []byte("RT"), true)
	if op, p := w.read(t); op != 10 || string(p) != "hi" {
		t.Fatalf("got op %d %q, want pong \"hi\"", op, p)
	}
	if op, p := w.read(t); op != 1 || !strings.Contains(string(p), `"started"`) {
		t.Fatalf("got op %d %q, want the started event", op, p)
	}
	// 2.5 s of audio in one frame: a 64-bit length.
	clip := librivox(t)
	pcm := clip[44 : 44+80000]
	w.frame(t, true, 2, pcm, true)
	w.frame(t, true, 1, []byte("STOP"), true)
	var final map[string]any
	for final == nil {
		op, p := w.read(t)
		if op != 1 {
			t.Fatalf("op %d before the final message", op)
		}
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatal(err)
		}
		if m["is_final"] == true {
			final = m
		}
	}
	if d, _ := final["duration_ms"].(float64); d < 2400 || d > 2600 {
		t.Errorf("final duration_ms %v, want 2500 (the 64-bit frame was not read whole?)", final["duration_ms"])
	}
	if op, p := w.read(t); op != 1 || !strings.Contains(string(p), `"stopped"`) {
		t.Errorf("got op %d %q, want the stopped event", op, p)
	}
	w.frame(t, true, 8, []byte{0x03, 0xe8}, true)
	if op, p := w.read(t); op != 8 || len(p) < 2 || binary.BigEndian.Uint16(p) != 1000 {
		t.Errorf("close answered with op %d %v", op, p)
	}

	// An unmasked client frame is a protocol error: close 1002.
	w2 := dialRaw(t, base)
	w2.frame(t, true, 1, []byte("START"), false)
	if op, p := w2.read(t); op != 8 || len(p) < 2 || binary.BigEndian.Uint16(p) != 1002 {
		t.Errorf("unmasked frame answered with op %d %v, want close 1002", op, p)
	}
}
