package fakeasr_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

type form struct {
	fields map[string]string
	file   []byte
	name   string
}

func post(t *testing.T, ctx context.Context, url string, f form, hdr map[string]string) (*http.Response, error) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range f.fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if f.file != nil {
		fw, err := mw.CreateFormFile("file", f.name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(f.file)
	}
	mw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/audio/transcriptions", &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func TestRecordsRequest(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{Text: "hello there"})
	audio := bytes.Repeat([]byte{1, 2, 3, 0}, 1000)
	resp, err := post(t, t.Context(), s.URL, form{
		fields: map[string]string{"model": "m1", "language": "en", "stream": "false", "response_format": "json"},
		file:   audio, name: "utt1.wav",
	}, map[string]string{"X-Request-Id": "rid-1", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 200 || body != `{"text":"hello there"}` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "rid-1" {
		t.Errorf("X-Request-Id echoed %q, want rid-1", got)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded, want 1", len(reqs))
	}
	r := reqs[0]
	want := fakeasr.Request{
		N: 1, RequestID: "rid-1", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Model: "m1", Language: "en", ResponseFormat: "json", FileName: "utt1.wav",
		FileContentType: "application/octet-stream", FileSize: len(audio), FileSHA256: sha256.Sum256(audio),
		Arrived: r.Arrived, Admitted: r.Admitted,
	}
	if r != want {
		t.Errorf("recorded\n%+v\nwant\n%+v", r, want)
	}
	if r.Arrived.IsZero() || r.Admitted.Before(r.Arrived) {
		t.Errorf("Arrived %v Admitted %v", r.Arrived, r.Admitted)
	}
	if s.Count() != 1 {
		t.Errorf("Count %d", s.Count())
	}
}

func TestAnswers(t *testing.T) {
	tests := []struct {
		name     string
		cfg      fakeasr.Config
		fields   map[string]string
		fileName string
		wantCT   string
		wantBody string
		wantID   string
	}{
		{"json", fakeasr.Config{Text: "a b"}, nil, "x.wav", "application/json", `{"text":"a b"}`, "cid"},
		{"text format", fakeasr.Config{Text: "a b"}, map[string]string{"response_format": "text"}, "x.wav", "text/plain; charset=utf-8", "a b", "cid"},
		{"default text", fakeasr.Config{}, nil, "x.wav", "application/json", `{"text":"` + fakeasr.DefaultText + `"}`, "cid"},
		{"TextFor", fakeasr.Config{Text: "no", TextFor: func(n string) string { return "file " + n }}, nil, "y.wav", "application/json", `{"text":"file y.wav"}`, "cid"},
		{"ServerID", fakeasr.Config{Text: "a", ServerID: func(c string) string { return "transcription-" + c }}, nil, "x.wav", "application/json", `{"text":"a"}`, "transcription-cid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, tt.cfg)
			resp, err := post(t, t.Context(), s.URL, form{fields: tt.fields, file: []byte("abc"), name: tt.fileName}, map[string]string{"X-Request-Id": "cid"})
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != 200 || body != tt.wantBody {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, tt.wantBody)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantCT {
				t.Errorf("Content-Type %q, want %q", ct, tt.wantCT)
			}
			if id := resp.Header.Get("X-Request-Id"); id != tt.wantID {
				t.Errorf("X-Request-Id %q, want %q", id, tt.wantID)
			}
		})
	}
}

// sseData returns the data of each event of an SSE body and whether the
// body ended with a blank line after the last event.
func sseData(body string) []string {
	var out []string
	for ev := range strings.SplitSeq(body, "\n\n") {
		if d, ok := strings.CutPrefix(ev, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestStream(t *testing.T) {
	const text = "one two three"
	tests := []struct {
		name, dialect string
		fail          fakeasr.Failure
		want          []string
	}{
		{"sglang", "", fakeasr.None, []string{
			`{"delta":"one","type":"transcript.text.delta"}`,
			`{"delta":" two","type":"transcript.text.delta"}`,
			`{"delta":" three","type":"transcript.text.delta"}`,
			`{"text":"one two three","type":"transcript.text.done","usage":{"seconds":1,"type":"duration"}}`,
			`[DONE]`}},
		{"vllm", "vllm", fakeasr.None, []string{
			`{"choices":[{"delta":{"content":"one"}}],"model":"fake-asr","object":"transcription.chunk"}`,
			`{"choices":[{"delta":{"content":" two"}}],"model":"fake-asr","object":"transcription.chunk"}`,
			`{"choices":[{"delta":{"content":" three"}}],"model":"fake-asr","object":"transcription.chunk"}`,
			`{"choices":[{"delta":{},"finish_reason":"stop"}],"model":"fake-asr","object":"transcription.chunk"}`,
			`[DONE]`}},
		{"sglang malformed sse", "sglang", fakeasr.MalformedSSE, []string{
			`{"delta":"one","type":"transcript.text.delta"}`,
			`{"delta":" two","type":"transcript.text.delta"}`,
			`{"delta":" three","type":"transcript.text.delta"}`}},
		{"sglang error", "sglang", fakeasr.SSEError, []string{
			`{"delta":"one","type":"transcript.text.delta"}`,
			`{"error":{"message":"injected error"},"type":"error"}`,
			`[DONE]`}},
		{"vllm error", "vllm", fakeasr.SSEError, []string{
			`{"choices":[{"delta":{"content":"one"}}],"model":"fake-asr","object":"transcription.chunk"}`,
			`{"error":{"code":500,"message":"injected error","type":"InternalServerError"}}`,
			`[DONE]`}},
		{"malformed json", "vllm", fakeasr.MalformedJSON, []string{`{"type": "transcript.text.delta", "delta": `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, fakeasr.Config{Text: text, Dialect: tt.dialect, Fail: fakeasr.FailAll(tt.fail)})
			resp, err := post(t, t.Context(), s.URL, form{fields: map[string]string{"stream": "true"}, file: []byte("x"), name: "a.wav"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type %q", ct)
			}
			got := sseData(body)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if !s.Requests()[0].Stream {
				t.Error("stream flag not recorded")
			}
		})
	}
}

func TestChunkDelay(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{Text: "a b c d", ChunkDelay: 40 * time.Millisecond})
	start := time.Now()
	resp, err := post(t, t.Context(), s.URL, form{fields: map[string]string{"stream": "true"}, file: []byte("x")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("4 chunks with 40ms between took %v, want >= 120ms", d)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		fail       fakeasr.Failure
		wantStatus int
		wantErr    bool
		check      func(t *testing.T, body string)
	}{
		{"none", fakeasr.None, 200, false, func(t *testing.T, b string) {
			if b != `{"text":"ok"}` {
				t.Errorf("body %q", b)
			}
		}},
		{"status 503", fakeasr.Status(503), 503, false, func(t *testing.T, b string) {
			if !strings.Contains(b, "injected status 503") {
				t.Errorf("body %q", b)
			}
		}},
		{"status 422", fakeasr.Status(422), 422, false, nil},
		{"reset", fakeasr.Reset, 0, true, nil},
		{"hang", fakeasr.Hang, 0, true, nil},
		{"malformed json", fakeasr.MalformedJSON, 200, false, func(t *testing.T, b string) {
			var v any
			if json.Unmarshal([]byte(b), &v) == nil {
				t.Errorf("body %q is valid JSON", b)
			}
		}},
		{"sse error, not streaming", fakeasr.SSEError, 500, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeasr.NewServer(t, fakeasr.Config{Text: "ok", Fail: fakeasr.FailOn(map[int]fakeasr.Failure{2: tt.fail})})
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			for n := 1; n <= 3; n++ {
				resp, err := post(t, ctx, s.URL, form{file: []byte("x")}, nil)
				if n != 2 {
					if err != nil || resp.StatusCode != 200 {
						t.Fatalf("request %d: %v", n, err)
					}
					readAll(t, resp)
					continue
				}
				if tt.wantErr {
					if err == nil {
						t.Fatalf("request 2: got status %d, want an error", resp.StatusCode)
					}
					if tt.fail == fakeasr.Hang && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("hang: err %v, want deadline exceeded", err)
					}
					ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
					defer cancel()
					continue
				}
				if err != nil {
					t.Fatalf("request 2: %v", err)
				}
				body := readAll(t, resp)
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				if tt.check != nil {
					tt.check(t, body)
				}
			}
			if got := s.Requests()[1].Failure; got != tt.fail {
				t.Errorf("recorded failure %v, want %v", got, tt.fail)
			}
		})
	}
}

// TestCapacity checks that a server with Capacity queues: never more than
// Capacity requests in service, so the batch takes ceil(n/cap) service times.
func TestCapacity(t *testing.T) {
	const n, delay = 6, 60 * time.Millisecond
	tests := []struct {
		capacity, wantMax int
		minTime           time.Duration
	}{
		{0, n, delay},
		{2, 2, 3 * delay},
		{1, 1, 6 * delay},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("capacity %d", tt.capacity), func(t *testing.T) {
			s := fakeasr.NewServer(t, fakeasr.Config{Delay: delay, Capacity: tt.capacity})
			start := time.Now()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					resp, err := post(t, t.Context(), s.URL, form{file: []byte("x")}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					readAll(t, resp)
				})
			}
			wg.Wait()
			el := time.Since(start)
			if got := s.MaxActive(); got != tt.wantMax {
				t.Errorf("MaxActive %d, want %d", got, tt.wantMax)
			}
			if el < tt.minTime {
				t.Errorf("took %v, want >= %v", el, tt.minTime)
			}
			if tt.capacity == 0 && el > 5*delay {
				t.Errorf("unlimited server took %v for %d parallel requests of %v", el, n, delay)
			}
		})
	}
}

func TestSlowAfter(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{SlowAfter: 2, SlowDelay: 150 * time.Millisecond})
	for n := 1; n <= 3; n++ {
		start := time.Now()
		resp, err := post(t, t.Context(), s.URL, form{file: []byte("x")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		d := time.Since(start)
		if slow := d >= 150*time.Millisecond; slow != (n == 3) {
			t.Errorf("request %d took %v; only request 3 should be slow", n, d)
		}
	}
}

func TestOtherEndpoints(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{Model: "whisper-x"})
	resp, err := http.Get(s.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	readAll(t, resp)
	resp, err = http.Get(s.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(readAll(t, resp)), &models); err != nil || len(models.Data) != 1 || models.Data[0].ID != "whisper-x" {
		t.Errorf("models %+v, %v", models, err)
	}
	// A request without a file part is a 400 and is recorded as such.
	resp, err = post(t, t.Context(), s.URL, form{fields: map[string]string{"model": "m"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 400 {
		t.Errorf("no file: status %d, want 400", resp.StatusCode)
	}
	if r := s.Requests(); len(r) != 1 || r[0].ParseError == "" {
		t.Errorf("recorded %+v, want one request with a parse error", r)
	}
}

// Config.Unhealthy: /health answers 503 while transcriptions work;
// Config.Spin: a request takes at least its spin of CPU time.
func TestUnhealthySpin(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{Unhealthy: true, Spin: 30 * time.Millisecond})
	resp, err := http.Get(s.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health: %d, want 503", resp.StatusCode)
	}
	t0 := time.Now()
	resp, err = post(t, t.Context(), s.URL, form{file: []byte("x")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, fakeasr.DefaultText) {
		t.Errorf("transcription: %d %q", resp.StatusCode, body)
	}
	if el := time.Since(t0); el < 30*time.Millisecond {
		t.Errorf("a request with 30 ms of spin took %v", el)
	}
}

func TestNoop(t *testing.T) {
	s := fakeasr.NewNoop(t)
	resp, err := post(t, t.Context(), s.URL, form{file: make([]byte, 100<<10)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); body != `{"text":"ok"}` {
		t.Errorf("body %q", body)
	}
	if s.Count() != 1 {
		t.Errorf("Count %d, want 1", s.Count())
	}
	// It passes a capture's target check: /health and /v1/models answer.
	for path, want := range map[string]string{"/health": "", "/v1/models": `"id":"noop"`} {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q, want 200 and %q", path, resp.StatusCode, body, want)
		}
	}
	s.Close()
	if _, err := post(t, t.Context(), s.URL, form{file: []byte("x")}, nil); err == nil {
		t.Error("request to a closed server succeeded")
	}
}

func TestFailureString(t *testing.T) {
	for f, want := range map[fakeasr.Failure]string{
		fakeasr.None: "none", fakeasr.Reset: "reset", fakeasr.Status(429): "status_429", fakeasr.SSEError: "sse_error",
	} {
		if f.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(f), f.String(), want)
		}
	}
}

// /metrics is served only with Config.Metrics, and says what the server
// is doing: requests running and answered, and their latency, queue and
// inference time histograms.
func TestMetrics(t *testing.T) {
	off := fakeasr.NewServer(t, fakeasr.Config{})
	resp, err := http.Get(off.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics without Config.Metrics: status %d, want 404", resp.StatusCode)
	}

	s := fakeasr.NewServer(t, fakeasr.Config{Metrics: true, Delay: 300 * time.Millisecond, Capacity: 1})
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("Content-Type %q", ct)
		}
		return readAll(t, resp)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := post(t, context.Background(), s.URL, form{file: []byte("RIFF"), name: "a.wav"}, nil)
			if err == nil {
				readAll(t, resp)
			}
		}()
	}
	// One request runs, the other waits for Capacity.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(scrape(), "vllm:num_requests_waiting{engine=\"0\",model_name=\"fake-asr\"} 1.0") {
		if time.Now().After(deadline) {
			t.Fatalf("never saw one request waiting:\n%s", scrape())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if body := scrape(); !strings.Contains(body, `vllm:num_requests_running{engine="0",model_name="fake-asr"} 1.0`) {
		t.Errorf("running gauge not 1 while one request is admitted:\n%s", body)
	}
	wg.Wait()
	body := scrape()
	for _, want := range []string{
		"# TYPE vllm:request_success_total counter",
		`vllm:request_success_total{engine="0",model_name="fake-asr",finished_reason="stop"} 2.0`,
		`vllm:num_requests_running{engine="0",model_name="fake-asr"} 0.0`,
		`vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="fake-asr",le="0.1"} 0.0`,
		`vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="fake-asr",le="5"} 2.0`,
		`vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="fake-asr",le="+Inf"} 2.0`,
		`vllm:e2e_request_latency_seconds_count{engine="0",model_name="fake-asr"} 2.0`,
		// One request was admitted at once, the other waited for the
		// first's 300 ms; each then ran for 300 ms.
		"# TYPE vllm:request_queue_time_seconds histogram",
		`vllm:request_queue_time_seconds_bucket{engine="0",model_name="fake-asr",le="0.1"} 1.0`,
		`vllm:request_queue_time_seconds_bucket{engine="0",model_name="fake-asr",le="0.5"} 2.0`,
		`vllm:request_queue_time_seconds_count{engine="0",model_name="fake-asr"} 2.0`,
		"# TYPE vllm:request_inference_time_seconds histogram",
		`vllm:request_inference_time_seconds_bucket{engine="0",model_name="fake-asr",le="0.1"} 0.0`,
		`vllm:request_inference_time_seconds_bucket{engine="0",model_name="fake-asr",le="0.5"} 2.0`,
		`vllm:request_inference_time_seconds_count{engine="0",model_name="fake-asr"} 2.0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if s.Succeeded() != 2 || s.Scrapes() < 3 {
		t.Errorf("Succeeded %d, Scrapes %d", s.Succeeded(), s.Scrapes())
	}
}

// TestFreePortReserves: FreePort's ports lie below the kernel's ephemeral
// range (where a parallel test's listener on port 0 cannot be handed them),
// are free, and are never handed out twice while reserved.
func TestFreePortReserves(t *testing.T) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo)
	}
	seen := map[int]bool{}
	for range 200 {
		p := fakeasr.FreePort(t)
		if p >= lo || p < 1024 || seen[p] {
			t.Fatalf("port %d: in the ephemeral range (from %d), privileged, or handed out twice", p, lo)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("reserved port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
