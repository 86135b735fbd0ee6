package fakeasr

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultText is the transcript when Config.Text and Config.TextFor are unset.
const DefaultText = "the quick brown fox jumps over the lazy dog"

// DefaultModel is the model id /v1/models lists when Config.Model is unset.
const DefaultModel = "fake-asr"

// Config shapes the fake server's behaviour. The zero value answers every
// request at once with DefaultText.
type Config struct {
	// Text is the transcript of every file; TextFor, if set, takes
	// precedence and maps the uploaded file name to its transcript.
	Text    string
	TextFor func(fileName string) string

	// Delay is the service time of a request once admitted: before the
	// answer, or before the first chunk of a stream.
	Delay time.Duration
	// Spin, when set, is busy-looped before the Delay, as that much CPU
	// time of one worker thread per request (requests take turns on it:
	// a server bound by its one busy thread).
	Spin time.Duration
	// Capacity, if > 0, is how many requests are processed at once;
	// others wait (after their body was read) in arrival order-ish, as in
	// a server's admission queue.
	Capacity int
	// SlowAfter, if > 0, makes request SlowAfter+1 and later take
	// SlowDelay instead of Delay: a server that slows down.
	SlowAfter int
	SlowDelay time.Duration

	// Dialect of streaming answers: "sglang" (default) or "vllm".
	Dialect string
	// ChunkDelay is the pause between two stream chunks.
	ChunkDelay time.Duration

	// Fail, if set, picks the failure for request n (1-based, counted in
	// arrival order over transcription requests). See FailOn and FailAll.
	// Failures other than MalformedJSON/MalformedSSE/SSEError happen after
	// admission (Capacity) but before Delay.
	Fail func(n int) Failure

	// ServerID, if set, gives the response's X-Request-Id from the
	// client's one; otherwise the client's X-Request-Id is echoed.
	ServerID func(clientID string) string

	// Model is the id listed by GET /v1/models.
	Model string
	// APIKey, if set, is wanted on every /v1 route as "Authorization:
	// Bearer APIKEY", else 401 {"error":"Unauthorized"} (vLLM's and
	// SGLang's --api-key).
	APIKey string
	// Unhealthy makes GET /health answer 503 forever (a server that never
	// finishes loading).
	Unhealthy bool

	// Metrics, if set, serves GET /metrics in the Prometheus text format
	// with vLLM's names (labels model_name and engine): the gauges
	// vllm:num_requests_running (admitted, not yet answered) and
	// vllm:num_requests_waiting (read, waiting for Capacity), the counter
	// vllm:request_success_total{finished_reason="stop"} (answers with a
	// transcript, counted before the answer is written), and, of those
	// answers, the histograms (MetricsBuckets)
	// vllm:e2e_request_latency_seconds (arrival to answer),
	// vllm:request_queue_time_seconds (arrival to admission: the wait for
	// Capacity) and vllm:request_inference_time_seconds (admission to
	// answer). Without it /metrics is a 404.
	Metrics bool
}

// MetricsBuckets are the upper bounds of the fake server's histograms
// (vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
// vllm:request_inference_time_seconds).
var MetricsBuckets = [...]float64{0.01, 0.05, 0.1, 0.5, 1, 5}

// Request is what the server received in one transcription request.
type Request struct {
	N               int // 1-based arrival number
	Arrived         time.Time
	Admitted        time.Time // when processing began (after waiting for Capacity); zero if never
	RequestID       string    // X-Request-Id header
	TraceParent     string    // traceparent header
	Model           string
	Language        string
	ResponseFormat  string
	Stream          bool
	FileName        string
	FileContentType string
	FileSize        int
	FileSHA256      [32]byte
	Failure         Failure // what was injected
	ParseError      string  // why the request was rejected with 400, if it was
}

// Server is a running fake server.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL string

	cfg     Config
	srv     *httptest.Server
	closing chan struct{}
	once    sync.Once
	sem     chan struct{}
	count   atomic.Int64

	mu        sync.Mutex
	reqs      []Request
	active    int
	maxActive int
	waiting   int // read, not yet admitted
	scrapes   int // GET /metrics served
	succeeded int // answered with a transcript
	// Their seconds from arrival to answer, arrival to admission and
	// admission to answer (Config.Metrics).
	e2e, queue, inference histogram
}

// NewServer starts a fake ASR server on the loopback interface, closed
// when the test ends.
func NewServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if !slices.Contains([]string{"", "sglang", "vllm"}, cfg.Dialect) {
		t.Fatalf("fakeasr: unknown dialect %q (want sglang or vllm)", cfg.Dialect)
	}
	s, h := newServer(cfg)
	s.start(t, h)
	return s
}

// newServer makes a server of cfg and its handler, not yet serving.
func newServer(cfg Config) (*Server, http.Handler) {
	cfg.Model = cmp.Or(cfg.Model, DefaultModel)
	s := &Server{cfg: cfg, closing: make(chan struct{})}
	if cfg.Capacity > 0 {
		s.sem = make(chan struct{}, cfg.Capacity)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/audio/transcriptions", s.transcribe)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Unhealthy {
			http.Error(w, "loading", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /v1/models", s.models)
	if cfg.Metrics {
		mux.HandleFunc("GET /metrics", s.metrics)
	}
	if cfg.APIKey == "" {
		return s, mux
	}
	return s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") != "Bearer "+cfg.APIKey {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Unauthorized"}`)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) start(t testing.TB, h http.Handler) {
	s.srv = httptest.NewServer(h)
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
}

// Close releases waiting handlers and shuts the server down. Later requests
// are refused. It is safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// Requests returns a copy of the transcription requests received so far,
// in arrival order.
func (s *Server) Requests() []Request {
	return locked(s, func() []Request { return slices.Clone(s.reqs) })
}

// Count returns how many transcription requests arrived.
func (s *Server) Count() int { return int(s.count.Load()) }

// Scrapes returns how many times GET /metrics was served (Config.Metrics).
func (s *Server) Scrapes() int { return locked(s, func() int { return s.scrapes }) }

// locked returns f's result, called with s.mu held.
func locked[T any](s *Server, f func() T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

// metrics serves /metrics (Config.Metrics).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	lb := fmt.Sprintf(`engine="0",model_name=%q`, s.cfg.Model)
	var b strings.Builder
	head := func(name, help, typ string) {
		fmt.Fprintf(&b, "# HELP vllm:%s %s\n# TYPE vllm:%s %s\n", name, help, name, typ)
	}
	s.mu.Lock()
	s.scrapes++
	head("num_requests_running", "Number of requests in model execution batches.", "gauge")
	fmt.Fprintf(&b, "vllm:num_requests_running{%s} %d.0\n", lb, s.active)
	head("num_requests_waiting", "Number of requests waiting to be processed.", "gauge")
	fmt.Fprintf(&b, "vllm:num_requests_waiting{%s} %d.0\n", lb, s.waiting)
	head("request_success_total", "Count of successfully processed requests.", "counter")
	fmt.Fprintf(&b, "vllm:request_success_total{%s,finished_reason=\"stop\"} %d.0\n", lb, s.succeeded)
	for _, h := range []struct {
		name, help string
		h          *histogram
	}{
		{"e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &s.e2e},
		{"request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", &s.queue},
		{"request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", &s.inference},
	} {
		head(h.name, h.help, "histogram")
		for i, le := range MetricsBuckets {
			fmt.Fprintf(&b, "vllm:%s_bucket{%s,le=\"%g\"} %d.0\n", h.name, lb, le, h.h.counts[i])
		}
		fmt.Fprintf(&b, "vllm:%s_bucket{%s,le=\"+Inf\"} %d.0\n", h.name, lb, h.h.n)
		fmt.Fprintf(&b, "vllm:%s_count{%s} %d.0\n", h.name, lb, h.h.n)
		fmt.Fprintf(&b, "vllm:%s_sum{%s} %g\n", h.name, lb, h.h.sum)
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

// histogram is a Prometheus histogram of seconds over MetricsBuckets.
type histogram struct {
	n      int
	sum    float64
	counts [len(MetricsBuckets)]int // cumulative
}

func (h *histogram) observe(v float64) {
	h.n++
	h.sum += v
	for i, le := range MetricsBuckets {
		if v <= le {
			h.counts[i]++
		}
	}
}

// succeed counts request idx answered with a transcript, before the
// answer is written.
func (s *Server) succeed(idx int) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.reqs[idx]
	s.succeeded++
	s.e2e.observe(now.Sub(r.Arrived).Seconds())
	s.queue.observe(r.Admitted.Sub(r.Arrived).Seconds())
	s.inference.observe(now.Sub(r.Admitted).Seconds())
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": s.cfg.Model, "object": "model", "owned_by": "benchtest"}},
	})
}

// wait sleeps for d unless the client leaves or the server closes first;
// it reports whether the full time passed.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-r.Context().Done():
	case <-s.closing:
	}
	return false
}

func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) {
	n := int(s.count.Add(1))
	rec := Request{
		N:           n,
		Arrived:     time.Now(),
		RequestID:   r.Header.Get("X-Request-Id"),
		TraceParent: r.Header.Get("Traceparent"),
	}
	if s.cfg.Fail != nil {
		rec.Failure = s.cfg.Fail(n)
	}
	parseErr := parseForm(r, &rec)
	if parseErr != nil {
		rec.ParseError = parseErr.Error()
	}
	idx := locked(s, func() int {
		s.reqs = append(s.reqs, rec)
		return len(s.reqs) - 1
	})

	id := rec.RequestID
	if s.cfg.ServerID != nil {
		id = s.cfg.ServerID(id)
	}
	if id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	if parseErr != nil {
		writeError(w, http.StatusBadRequest, parseErr.Error())
		return
	}

	if s.sem != nil {
		s.queued(1)
		select {
		case s.sem <- struct{}{}:
			defer func() { <-s.sem }()
		case <-r.Context().Done():
			s.queued(-1)
			return
		case <-s.closing:
			s.queued(-1)
			return
		}
		s.queued(-1)
	}
	s.admit(idx)
	defer s.done()

	switch f := rec.Failure; {
	case f.StatusCode() != 0:
		writeError(w, f.StatusCode(), fmt.Sprintf("injected status %d", f.StatusCode()))
		return
	case f == Reset:
		reset(w)
		return
	case f == Hang:
		s.wait(r, math.MaxInt64) // until the client leaves or the server closes
		return
	}

	if s.cfg.Spin > 0 {
		spin(s.cfg.Spin)
	}
	delay := s.cfg.Delay
	if s.cfg.SlowAfter > 0 && n > s.cfg.SlowAfter {
		delay = s.cfg.SlowDelay
	}
	if !s.wait(r, delay) {
		return
	}
	text := cmp.Or(s.cfg.Text, DefaultText)
	if s.cfg.TextFor != nil {
		text = s.cfg.TextFor(rec.FileName)
	}
	if rec.Stream {
		if rec.Failure == None {
			s.succeed(idx)
		}
		s.stream(w, r, text, rec.Failure)
		return
	}
	switch rec.Failure {
	case MalformedJSON:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text": "`+text[:len(text)/2])
	case SSEError:
		writeError(w, http.StatusInternalServerError, "injected error")
	default:
		s.succeed(idx)
		if rec.ResponseFormat == "text" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, text)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"text": text})
	}
}

// parseForm reads the multipart body into rec.
func parseForm(r *http.Request, rec *Request) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return fmt.Errorf("reading multipart body: %w", err)
	}
	sawFile := false
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading multipart body: %w", err)
		}
		name := p.FormName()
		if name == "file" {
			sawFile = true
			h := sha256.New()
			size, err := io.Copy(h, p)
			if err != nil {
				return fmt.Errorf("reading file part: %w", err)
			}
			rec.FileName = p.FileName()
			rec.FileContentType = p.Header.Get("Content-Type")
			rec.FileSize = int(size)
			h.Sum(rec.FileSHA256[:0])
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p, 4096))
		if err != nil {
			return fmt.Errorf("reading part %q: %w", name, err)
		}
		v := string(b)
		switch name {
		case "model":
			rec.Model = v
		case "language":
			rec.Language = v
		case "response_format":
			rec.ResponseFormat = v
		case "stream":
			rec.Stream = strings.EqualFold(v, "true") || v == "1"
		}
	}
	if !sawFile {
		return fmt.Errorf("no file part")
	}
	return nil
}

func (s *Server) admit(idx int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[idx].Admitted = time.Now()
	s.active++
	s.maxActive = max(s.maxActive, s.active)
}

// queued adds d to the requests waiting for admission.
func (s *Server) queued(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting += d
}

func (s *Server) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
}

// stream writes an SSE answer in the configured dialect.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, text string, f Failure) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(data string) bool {
		_, err := io.WriteString(w, "data: "+data+"\n\n")
		return err == nil && rc.Flush() == nil
	}
	sendJSON := func(v any) bool {
		b, _ := json.Marshal(v)
		return send(string(b))
	}
	vllm := s.cfg.Dialect == "vllm"
	delta := func(d string) any {
		if vllm {
			return map[string]any{"object": "transcription.chunk", "model": DefaultModel,
				"choices": []any{map[string]any{"delta": map[string]any{"content": d}}}}
		}
		return map[string]any{"type": "transcript.text.delta", "delta": d}
	}

	if f == MalformedJSON {
		send(`{"type": "transcript.text.delta", "delta": `)
		return
	}
	for i, d := range splitWords(text) {
		if i > 0 && !s.wait(r, s.cfg.ChunkDelay) {
			return
		}
		if !sendJSON(delta(d)) {
			return
		}
		if f == SSEError {
			break
		}
	}
	switch {
	case f == MalformedSSE:
		return
	case f == SSEError && vllm:
		sendJSON(map[string]any{"error": map[string]any{"message": "injected error", "type": "InternalServerError", "code": 500}})
	case f == SSEError:
		sendJSON(map[string]any{"type": "error", "error": map[string]any{"message": "injected error"}})
	case vllm:
		// vLLM's last chunk carries the finish reason and an empty delta.
		sendJSON(map[string]any{"object": "transcription.chunk", "model": DefaultModel,
			"choices": []any{map[string]any{"delta": map[string]any{}, "finish_reason": "stop"}}})
	default:
		sendJSON(map[string]any{"type": "transcript.text.done", "text": text,
			"usage": map[string]any{"type": "duration", "seconds": 1}})
	}
	send("[DONE]")
}

// splitWords cuts text into stream deltas: the first word, then each
// following word with its leading space, so the deltas join back to text.
func splitWords(text string) []string {
	var out []string
	for text != "" {
		i := strings.IndexByte(text[1:], ' ')
		if i < 0 {
			out = append(out, text)
			break
		}
		out = append(out, text[:i+1])
		text = text[i+1:]
	}
	return out
}

// reset hijacks the connection and closes it with a TCP reset.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection, without a reset
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "code": code}})
}
