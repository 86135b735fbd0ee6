package protocol_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

const traceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func newJob(id string, audio []byte) *protocol.Job {
	return &protocol.Job{
		RequestID: id, TraceParent: traceParent, SampleID: "s-" + id,
		FileName: "utt1.wav", ContentType: "audio/wav", Audio: audio,
		Model: "whisper", Language: "en",
	}
}

func mustClient(t testing.TB, name string, opts protocol.Options) protocol.Client {
	t.Helper()
	c, err := protocol.New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkTimes asserts the ordering every successful result must have.
// UploadDone and FirstByte are stamped on different transport goroutines,
// so their order is not asserted.
func checkTimes(t *testing.T, start time.Time, r protocol.Result) {
	t.Helper()
	if r.UploadDone.IsZero() || r.FirstByte.IsZero() || r.End.IsZero() {
		t.Fatalf("missing times: upload %v first byte %v end %v", r.UploadDone, r.FirstByte, r.End)
	}
	if r.UploadDone.Before(start) || r.FirstByte.Before(start) || r.End.Before(r.FirstByte) || r.End.Before(r.UploadDone) {
		t.Errorf("times out of order: start %v upload %v first byte %v end %v", start, r.UploadDone, r.FirstByte, r.End)
	}
}

func TestNonStreaming(t *testing.T) {
	tests := []struct {
		name   string
		format string
		cfg    fakeasr.Config
		want   string
	}{
		{"json", "", fakeasr.Config{Text: "hello world"}, "hello world"},
		{"explicit json", "json", fakeasr.Config{Text: "hello world"}, "hello world"},
		{"text format", "text", fakeasr.Config{Text: "hello text"}, "hello text"},
		{"empty transcript", "", fakeasr.Config{TextFor: func(string) string { return "" }}, ""},
		{"unicode", "", fakeasr.Config{Text: "你好，世界"}, "你好，世界"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, tt.cfg)
			c := mustClient(t, "openai", protocol.Options{Target: s.URL, ResponseFormat: tt.format})
			start := time.Now()
			r := c.Do(t.Context(), newJob("r1", []byte("RIFF....")))
			if r.Err != nil || r.ErrKind != "" {
				t.Fatalf("err %v kind %q", r.Err, r.ErrKind)
			}
			if r.Text != tt.want || r.HTTPStatus != 200 {
				t.Errorf("text %q status %d, want %q 200", r.Text, r.HTTPStatus, tt.want)
			}
			if !r.FirstToken.IsZero() || r.ChunkTimes != nil {
				t.Errorf("non-streaming result has FirstToken %v ChunkTimes %v", r.FirstToken, r.ChunkTimes)
			}
			checkTimes(t, start, r)
			wantFormat := tt.format
			if wantFormat == "" {
				wantFormat = "json"
			}
			got := s.Requests()[0]
			if got.ResponseFormat != wantFormat || got.Stream {
				t.Errorf("server saw response_format %q stream %v, want %q false", got.ResponseFormat, got.Stream, wantFormat)
			}
		})
	}
}

func TestStreaming(t *testing.T) {
	const text = "the cat sat on the mat"
	const chunkDelay = 10 * time.Millisecond
	tests := []struct {
		name, dialect string
	}{
		{"sglang", "sglang"},
		{"vllm", "vllm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, fakeasr.Config{Text: text, Dialect: tt.dialect, ChunkDelay: chunkDelay})
			c := mustClient(t, "openai-stream", protocol.Options{Target: s.URL})
			start := time.Now()
			r := c.Do(t.Context(), newJob("r1", []byte("audio")))
			if r.Err != nil {
				t.Fatalf("err %v kind %q", r.Err, r.ErrKind)
			}
			if r.Text != text {
				t.Errorf("text %q, want %q", r.Text, text)
			}
			// One chunk per word; vLLM's final empty delta is not a chunk.
			if n := len(r.ChunkTimes); n != 6 {
				t.Fatalf("%d chunk times, want 6", n)
			}
			if len(r.ChunkTimes) > 0 && !r.FirstToken.Equal(r.ChunkTimes[0]) {
				t.Errorf("FirstToken %v != first chunk %v", r.FirstToken, r.ChunkTimes[0])
			}
			for i := 1; i < len(r.ChunkTimes); i++ {
				if r.ChunkTimes[i].Before(r.ChunkTimes[i-1]) {
					t.Errorf("chunk %d stamped before chunk %d", i, i-1)
				}
			}
			// The server spaces the 6 chunks by 5 delays; allow for the
			// client being late to read the first one.
			if span := r.ChunkTimes[len(r.ChunkTimes)-1].Sub(r.FirstToken); span < 3*chunkDelay {
				t.Errorf("chunks spread over %v, want >= %v: times are not stamped on arrival", span, 3*chunkDelay)
			}
			checkTimes(t, start, r)
			if r.FirstToken.Before(r.FirstByte) || r.End.Before(r.ChunkTimes[len(r.ChunkTimes)-1]) {
				t.Errorf("stream times out of order: first byte %v first token %v end %v", r.FirstByte, r.FirstToken, r.End)
			}
			if !s.Requests()[0].Stream {
				t.Error("server did not see stream=true")
			}
		})
	}
}

// TestStreamDoneTextWins checks that the done event's text, not the joined
// deltas, is the transcript when both are present.
func TestStreamDoneTextWins(t *testing.T) {
	srv := fixedServer(t, "text/event-stream",
		"data: {\"type\":\"transcript.text.delta\",\"delta\":\"helo\"}\n\n"+
			"data: {\"type\":\"transcript.text.done\",\"text\":\"hello\"}\n\n"+
			"data: [DONE]\n\n")
	c := mustClient(t, "openai-stream", protocol.Options{Target: srv})
	r := c.Do(t.Context(), newJob("r", nil))
	if r.Err != nil || r.Text != "hello" || len(r.ChunkTimes) != 1 {
		t.Errorf("got text %q chunks %d err %v, want hello 1 nil", r.Text, len(r.ChunkTimes), r.Err)
	}
}

// fixedServer answers every request with 200 and body.
func fixedServer(t *testing.T, contentType, body string) string {
	return fixedServerStatus(t, http.StatusOK, contentType, body)
}

// fixedServerStatus answers every request with code and body.
func fixedServerStatus(t *testing.T, code int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHeadersAndServerID(t *testing.T) {
	tests := []struct {
		name     string
		serverID func(string) string
		want     string
	}{
		{"echo", nil, "req-42"},
		{"server id", func(c string) string { return "transcription-" + strings.ToUpper(c) }, "transcription-REQ-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, fakeasr.Config{ServerID: tt.serverID})
			for _, name := range protocol.Names() {
				if protocol.IsRealtime(name) {
					continue // realtime_test.go checks the upgrade request's headers
				}
				c := mustClient(t, name, protocol.Options{Target: s.URL + "/"})
				r := c.Do(t.Context(), newJob("req-42", []byte("x")))
				if r.Err != nil {
					t.Fatalf("%s: %v", name, r.Err)
				}
				if r.ServerRequestID != tt.want {
					t.Errorf("%s: ServerRequestID %q, want %q", name, r.ServerRequestID, tt.want)
				}
			}
			for _, got := range s.Requests() {
				if got.RequestID != "req-42" || got.TraceParent != traceParent || got.Model != "whisper" || got.Language != "en" {
					t.Errorf("server saw id %q traceparent %q model %q language %q", got.RequestID, got.TraceParent, got.Model, got.Language)
				}
			}
		})
	}
}

func TestOmittedFields(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{})
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	r := c.Do(t.Context(), &protocol.Job{FileName: "a.flac", ContentType: "audio/flac", Audio: []byte("fLaC")})
	if r.Err != nil || r.ServerRequestID != "" {
		t.Fatalf("err %v server id %q", r.Err, r.ServerRequestID)
	}
	got := s.Requests()[0]
	if got.RequestID != "" || got.TraceParent != "" || got.Model != "" || got.Language != "" {
		t.Errorf("empty fields were sent: %+v", got)
	}
}

func TestMultipartBody(t *testing.T) {
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	crlf := bytes.Repeat([]byte("\r\n--asrprof\r\n"), 100) // looks like a boundary
	tests := []struct {
		name, file, ct string
		audio          []byte
		wantCT         string
	}{
		{"wav", "utt1.wav", "audio/wav", []byte("RIFF\x00\x01\x02WAVE"), "audio/wav"},
		{"empty audio", "e.wav", "audio/wav", []byte{}, "audio/wav"},
		{"3 MiB", "big.wav", "audio/wav", big, "audio/wav"},
		{"boundary-like bytes", "b.wav", "audio/wav", crlf, "audio/wav"},
		{"quoted file name", `my "best" \take.wav`, "audio/x-wav", []byte("abc"), "audio/x-wav"},
		{"default content type", "raw.pcm", "", []byte("abc"), "application/octet-stream"},
	}
	s := fakeasr.NewServer(t, fakeasr.Config{})
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := newJob("m", tt.audio)
			job.FileName, job.ContentType = tt.file, tt.ct
			r := c.Do(t.Context(), job)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			got := s.Requests()[i]
			if got.ParseError != "" {
				t.Fatalf("server could not parse the body: %s", got.ParseError)
			}
			if got.FileSize != len(tt.audio) || got.FileSHA256 != sha256.Sum256(tt.audio) {
				t.Errorf("server got %d bytes (sha %x), want %d bytes identical", got.FileSize, got.FileSHA256[:4], len(tt.audio))
			}
			if got.FileName != tt.file || got.FileContentType != tt.wantCT {
				t.Errorf("server got file name %q type %q, want %q %q", got.FileName, got.FileContentType, tt.file, tt.wantCT)
			}
		})
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name     string
		proto    string
		cfg      fakeasr.Config
		timeout  time.Duration
		cancel   bool // cancel the context while the server hangs
		wantKind string
		wantErr  string
		wantCode int
	}{
		{name: "4xx", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Status(422))}, wantKind: protocol.KindHTTP4xx, wantErr: "injected status 422", wantCode: 422},
		{name: "5xx", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Status(503))}, wantKind: protocol.KindHTTP5xx, wantErr: "injected status 503", wantCode: 503},
		{name: "5xx stream", proto: "openai-stream", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Status(500))}, wantKind: protocol.KindHTTP5xx, wantCode: 500},
		{name: "reset", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Reset)}, wantKind: protocol.KindConnection},
		{name: "reset stream", proto: "openai-stream", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Reset)}, wantKind: protocol.KindConnection},
		{name: "timeout", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Hang)}, timeout: 100 * time.Millisecond, wantKind: protocol.KindTimeout},
		{name: "timeout in stream", proto: "openai-stream", cfg: fakeasr.Config{Text: "a b c d", ChunkDelay: time.Second}, timeout: 100 * time.Millisecond, wantKind: protocol.KindTimeout, wantCode: 200},
		{name: "cancel", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Hang)}, cancel: true, wantKind: protocol.KindCanceled},
		{name: "malformed json", proto: "openai", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.MalformedJSON)}, wantKind: protocol.KindMalformed, wantCode: 200},
		{name: "malformed json in stream", proto: "openai-stream", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.MalformedJSON)}, wantKind: protocol.KindMalformed, wantCode: 200},
		{name: "malformed sse", proto: "openai-stream", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.MalformedSSE)}, wantKind: protocol.KindMalformed, wantErr: "without [DONE]", wantCode: 200},
		{name: "sse error sglang", proto: "openai-stream", cfg: fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.SSEError)}, wantKind: protocol.KindServerError, wantErr: "injected error", wantCode: 200},
		{name: "sse error vllm", proto: "openai-stream", cfg: fakeasr.Config{Dialect: "vllm", Fail: fakeasr.FailAll(fakeasr.SSEError)}, wantKind: protocol.KindServerError, wantErr: "injected error", wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, tt.cfg)
			c := mustClient(t, tt.proto, protocol.Options{Target: s.URL})
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			if tt.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			r := c.Do(ctx, newJob("f", []byte("x")))
			if r.ErrKind != tt.wantKind || r.Err == nil {
				t.Fatalf("kind %q err %v, want kind %q", r.ErrKind, r.Err, tt.wantKind)
			}
			if !strings.Contains(r.Err.Error(), tt.wantErr) {
				t.Errorf("err %q does not mention %q", r.Err, tt.wantErr)
			}
			if r.HTTPStatus != tt.wantCode {
				t.Errorf("status %d, want %d", r.HTTPStatus, tt.wantCode)
			}
			if r.End.IsZero() {
				t.Error("End not set")
			}
			if tt.wantCode >= 400 {
				var se *protocol.StatusError
				if !errors.As(r.Err, &se) || se.StatusCode != tt.wantCode || len(se.Body) > 200 {
					t.Errorf("err %#v is not a StatusError with code %d and a short body", r.Err, tt.wantCode)
				}
			}
		})
	}
}

func TestMoreFailures(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		s := fakeasr.NewNoop(t)
		s.Close()
		r := mustClient(t, "openai", protocol.Options{Target: s.URL}).Do(t.Context(), newJob("x", nil))
		if r.ErrKind != protocol.KindConnection {
			t.Errorf("kind %q err %v, want connection", r.ErrKind, r.Err)
		}
	})
	t.Run("client timeout", func(t *testing.T) {
		s := fakeasr.NewServer(t, fakeasr.Config{Fail: fakeasr.FailAll(fakeasr.Hang)})
		hc := &http.Client{Transport: protocol.NewTransport(4), Timeout: 100 * time.Millisecond}
		r := mustClient(t, "openai", protocol.Options{Target: s.URL, HTTPClient: hc}).Do(t.Context(), newJob("x", nil))
		if r.ErrKind != protocol.KindTimeout {
			t.Errorf("kind %q err %v, want timeout", r.ErrKind, r.Err)
		}
	})
	t.Run("long error body excerpt", func(t *testing.T) {
		srv := fixedServerStatus(t, 500, "text/plain", strings.Repeat("e", 5000))
		r := mustClient(t, "openai", protocol.Options{Target: srv}).Do(t.Context(), newJob("x", nil))
		var se *protocol.StatusError
		if !errors.As(r.Err, &se) || len(se.Body) != 200 || r.ErrKind != protocol.KindHTTP5xx {
			t.Errorf("err %v kind %q, want a StatusError with a 200-byte body", r.Err, r.ErrKind)
		}
	})
	for _, tt := range []struct{ name, ct, body, kind, text string }{
		{"json without text", "application/json", `{"error":"x"}`, protocol.KindMalformed, ""},
		{"html body", "text/html", `<html>oops</html>`, protocol.KindMalformed, ""},
		{"text/plain answer", "text/plain; charset=utf-8", "plain words\n", "", "plain words"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := fixedServer(t, tt.ct, tt.body)
			r := mustClient(t, "openai", protocol.Options{Target: srv}).Do(t.Context(), newJob("x", nil))
			if r.ErrKind != tt.kind || r.Text != tt.text {
				t.Errorf("kind %q text %q err %v, want kind %q text %q", r.ErrKind, r.Text, r.Err, tt.kind, tt.text)
			}
		})
	}
	t.Run("stream answered with json", func(t *testing.T) {
		srv := fixedServer(t, "application/json", `{"text":"x"}`)
		r := mustClient(t, "openai-stream", protocol.Options{Target: srv}).Do(t.Context(), newJob("x", nil))
		if r.ErrKind != protocol.KindMalformed || !strings.Contains(r.Err.Error(), "application/json") {
			t.Errorf("kind %q err %v, want malformed naming the content type", r.ErrKind, r.Err)
		}
	})
	t.Run("nil job", func(t *testing.T) {
		r := mustClient(t, "openai", protocol.Options{Target: "http://127.0.0.1:1"}).Do(t.Context(), nil)
		if r.ErrKind != protocol.KindOther || r.End.IsZero() {
			t.Errorf("kind %q end %v", r.ErrKind, r.End)
		}
	})
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		opts    protocol.Options
		wantErr string
	}{
		{"openai", protocol.Options{Target: "http://127.0.0.1:8000"}, ""},
		{"openai-stream", protocol.Options{Target: "https://asr.example/"}, ""},
		{"grpc", protocol.Options{Target: "http://127.0.0.1:8000"}, "known: openai, openai-stream"},
		{"openai", protocol.Options{Target: "127.0.0.1:8000"}, "want an http or https base URL"},
		{"openai", protocol.Options{Target: "ftp://127.0.0.1"}, "want an http or https base URL"},
		{"openai", protocol.Options{Target: "http://127.0.0.1:8000", ResponseFormat: "srt"}, "response format"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.opts.Target, func(t *testing.T) {
			_, err := protocol.New(tt.name, tt.opts)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestConcurrent runs many requests at once through one client and checks
// each result belongs to its own job; run it with -race.
func TestConcurrent(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{TextFor: func(name string) string { return "text of " + name }, Delay: time.Millisecond})
	hc := &http.Client{Transport: protocol.NewTransport(16)}
	for _, name := range protocol.Names() {
		if protocol.IsRealtime(name) {
			continue // WebSocket sessions: realtime_test.go
		}
		c := mustClient(t, name, protocol.Options{Target: s.URL, HTTPClient: hc})
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				job := newJob(fmt.Sprint(i), bytes.Repeat([]byte{byte(i)}, 1000+i))
				job.FileName = fmt.Sprintf("f%d.wav", i)
				r := c.Do(t.Context(), job)
				if r.Err != nil || r.Text != "text of "+job.FileName || r.ServerRequestID != job.RequestID {
					t.Errorf("%s job %d: text %q id %q err %v", name, i, r.Text, r.ServerRequestID, r.Err)
				}
			})
		}
		wg.Wait()
	}
	seen := map[string]int{}
	for _, r := range s.Requests() {
		seen[r.RequestID]++
		if want := 1000 + len(r.RequestID); r.FileSize < 1000 || r.ParseError != "" {
			t.Errorf("request %s: size %d (>= %d) parse error %q", r.RequestID, r.FileSize, want, r.ParseError)
		}
	}
	if len(seen) != 64 {
		t.Errorf("server saw %d distinct ids, want 64", len(seen))
	}
}

// TestConnectionReuse checks that sequential requests share one keep-alive
// connection, which needs every body drained and closed, error bodies
// longer than the excerpt included.
func TestConnectionReuse(t *testing.T) {
	fake := fakeasr.NewServer(t, fakeasr.Config{Fail: fakeasr.FailOn(map[int]fakeasr.Failure{2: fakeasr.Status(500), 7: fakeasr.Status(500)})})
	longError := fixedServerStatus(t, http.StatusServiceUnavailable, "text/plain", strings.Repeat("overloaded ", 1000))
	tests := []struct {
		name, proto, target string
	}{
		{"openai", "openai", fake.URL},
		{"openai-stream", "openai-stream", fake.URL},
		{"long error body", "openai", longError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := protocol.NewTransport(4)
			var dials atomic.Int32
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
			c := mustClient(t, tt.proto, protocol.Options{Target: tt.target, HTTPClient: &http.Client{Transport: tr}})
			for i := range 5 {
				c.Do(t.Context(), newJob(fmt.Sprint(i), []byte("x")))
			}
			if n := dials.Load(); n != 1 {
				t.Errorf("%d dials for 5 sequential requests, want 1", n)
			}
		})
	}
}
