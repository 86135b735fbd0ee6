package refserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

const (
	python      = "/usr/bin/python3"
	librivoxWAV = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
)

func requirePocketSphinx(t *testing.T) { refservertest.RequirePocketSphinx(t) }

// startServer runs refserver.py on a free loopback port and waits for
// /health; it returns the base URL. The server is stopped at cleanup.
func startServer(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return refservertest.Start(t, env, args...).URL
}

// speechWAV returns a short English utterance: espeak-ng's rendering of a
// sentence (22.05 kHz, so the server resamples) or a PocketSphinx test clip.
func speechWAV(t *testing.T) []byte {
	t.Helper()
	if path, err := exec.LookPath("espeak-ng"); err == nil {
		out := filepath.Join(t.TempDir(), "speech.wav")
		if err := exec.Command(path, "-v", "en-us", "-w", out, "the weather report says it will rain this week").Run(); err == nil {
			if b, err := os.ReadFile(out); err == nil && len(b) > 44 {
				return b
			}
		}
	}
	return librivox(t)
}

// librivox returns the LibriVox clip of Debian's pocketsphinx-testdata
// (tools/deps.sh installs it); without it the test skips, and fails under
// CI (internal/need).
func librivox(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(librivoxWAV)
	if err != nil {
		need.Dep(t, "pocketsphinx-testdata (the LibriVox test clip)", err)
	}
	return b
}

// busyWAV returns a 32-bit stereo 48 kHz WAV of a noisy warble: costly to
// build (conversion and resampling) and to decode (the recognizer searches
// hard for words in it), handy to overflow the build pool and to keep
// requests in flight.
func busyWAV(seconds float64) []byte {
	const rate, channels, width = 48000, 2, 4
	n := int(seconds * rate)
	var b bytes.Buffer
	dataLen := n * channels * width
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(36+dataLen))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(channels),
		uint32(rate), uint32(rate * channels * width), uint16(channels * width), uint16(width * 8)} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	binary.Write(&b, binary.LittleEndian, uint32(dataLen))
	seed := uint32(1)
	for i := range n {
		x := float64(i) / rate
		seed = seed*1664525 + 1013904223
		noise := float64(int32(seed)) / math.MaxInt32
		v := int32(math.MaxInt32 * (0.25*math.Sin(2*math.Pi*(300+200*math.Sin(3*x))*x) + 0.1*noise))
		binary.Write(&b, binary.LittleEndian, []int32{v, v})
	}
	return b.Bytes()
}

// form builds a transcription upload.
func form(t *testing.T, audio []byte, fields map[string]string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", "audio.wav")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(audio)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.Bytes()
}

func transcribe(ctx context.Context, t *testing.T, base string, audio []byte,
	fields map[string]string, header http.Header) (*http.Response, []byte, error) {
	t.Helper()
	ctype, body := form(t, audio, fields)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/audio/transcriptions", bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", ctype)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// OTLP/HTTP JSON, the parts the test reads.
type otlpValue map[string]any

type otlpSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []struct {
		Key   string    `json:"key"`
		Value otlpValue `json:"value"`
	} `json:"attributes"`
}

func (s otlpSpan) attr(key string) (any, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			for _, v := range a.Value {
				return v, true
			}
		}
	}
	return nil, false
}

type otlpRequest struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []struct {
				Key   string    `json:"key"`
				Value otlpValue `json:"value"`
			} `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []otlpSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

// collector is an OTLP/HTTP JSON endpoint that keeps what it receives.
type collector struct {
	mu       sync.Mutex
	spans    []otlpSpan
	services map[string]bool
	bad      int
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req otlpRequest
	err := json.NewDecoder(r.Body).Decode(&req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/json" {
		c.bad++
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	if c.services == nil {
		c.services = map[string]bool{}
	}
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.Resource.Attributes {
			if a.Key == "service.name" {
				c.services[fmt.Sprint(a.Value["stringValue"])] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, "{}")
}

func (c *collector) trace(traceID string) []otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []otlpSpan
	for _, s := range c.spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

type profileEvent struct {
	RequestID   string         `json:"request_id"`
	Stage       string         `json:"stage"`
	EventName   string         `json:"event_name"`
	TimestampNs int64          `json:"timestamp_ns"`
	RunID       string         `json:"run_id"`
	PID         int            `json:"pid"`
	Metadata    map[string]any `json:"metadata"`
}

func readEvents(t *testing.T, dir, requestID string) []profileEvent {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "events_asr_*.jsonl"))
	var out []profileEvent
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e profileEvent
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%s: bad event line %q: %v", f, line, err)
			}
			if e.RequestID == requestID {
				out = append(out, e)
			}
		}
	}
	return out
}

func postJSON(t *testing.T, url string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s: %s", url, resp.Status, body)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pipelineOrder is the order of the SGLang-Omni request-profile events.
var pipelineOrder = []string{
	"stage_input_received",
	"scheduler_request_build_start",
	"scheduler_request_build_end",
	"scheduler_queue_enter",
	"scheduler_prefill_start",
	"scheduler_prefill_end",
	"scheduler_first_emit",
	"stage_complete",
}

func TestRefServer(t *testing.T) {
	requirePocketSphinx(t)
	t.Parallel()
	col := &collector{}
	otlp := httptest.NewServer(col)
	defer otlp.Close()
	base := startServer(t, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + otlp.URL + "/v1/traces"},
		"--max-running-requests", "2")
	speech := speechWAV(t)
	ctx := context.Background()

	t.Run("traced request", func(t *testing.T) {
		eventDir := t.TempDir()
		postJSON(t, base+"/start_request_profile", map[string]string{"run_id": "run-1", "event_dir": eventDir})
		const (
			traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			parent  = "00f067aa0ba902b7"
			rid     = "test-traced-1"
		)
		h := http.Header{}
		h.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
		h.Set("X-Request-Id", rid)
		resp, body, err := transcribe(ctx, t, base, speech, map[string]string{"model": "pocketsphinx-en-us", "language": "en"}, h)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s: %s", resp.Status, body)
		}
		if got := resp.Header.Get("X-Request-Id"); got != rid {
			t.Errorf("X-Request-Id = %q, want %q", got, rid)
		}
		var answer struct{ Text string }
		if err := json.Unmarshal(body, &answer); err != nil || strings.TrimSpace(answer.Text) == "" {
			t.Fatalf("answer %s: want {\"text\": non-empty} (err %v)", body, err)
		}
		t.Logf("transcript: %q", answer.Text)

		// Spans: the request span under the caller's span, four children under it.
		var root otlpSpan
		children := map[string]otlpSpan{}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			children = map[string]otlpSpan{}
			root = otlpSpan{}
			spans := col.trace(traceID)
			for _, s := range spans {
				if s.Name == "transcription" && s.ParentSpanID == parent {
					root = s
				}
			}
			for _, s := range spans {
				if root.SpanID != "" && s.ParentSpanID == root.SpanID {
					children[s.Name] = s
				}
			}
			if root.SpanID != "" && len(children) == 4 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if root.SpanID == "" {
			t.Fatalf("no span named transcription with parent %s in trace %s", parent, traceID)
		}
		if root.Kind != 2 {
			t.Errorf("request span kind = %d, want 2 (SERVER)", root.Kind)
		}
		if v, _ := root.attr("request.id"); v != rid {
			t.Errorf("request span request.id = %v, want %s", v, rid)
		}
		for _, k := range []string{"gen_ai.latency.e2e", "gen_ai.latency.time_in_queue",
			"gen_ai.latency.time_to_first_token", "gen_ai.latency.time_in_model_prefill",
			"gen_ai.latency.time_in_model_decode", "audio.seconds"} {
			v, ok := root.attr(k)
			if f, isFloat := v.(float64); !ok || !isFloat || f < 0 {
				t.Errorf("request span attribute %s = %v (present %v), want a non-negative double", k, v, ok)
			}
		}
		for _, name := range []string{"build", "queue", "first_forward", "decode"} {
			c, ok := children[name]
			if !ok {
				t.Errorf("no child span %q under the request span (have %v)", name, children)
				continue
			}
			cs, _ := strconv.ParseInt(c.Start, 10, 64)
			ce, _ := strconv.ParseInt(c.End, 10, 64)
			rs, _ := strconv.ParseInt(root.Start, 10, 64)
			re, _ := strconv.ParseInt(root.End, 10, 64)
			if c.TraceID != traceID || cs < rs || ce > re || ce < cs || cs == 0 {
				t.Errorf("span %s [%d, %d] is not inside its parent [%d, %d] in trace %s", name, cs, ce, rs, re, traceID)
			}
		}
		if v, ok := children["decode"].attr("decode.steps"); !ok || v == "0" {
			t.Errorf("decode span decode.steps = %v", v)
		}
		col.mu.Lock()
		if !col.services["asrprof-refserver"] || col.bad != 0 {
			t.Errorf("collector saw services %v and %d bad exports", col.services, col.bad)
		}
		col.mu.Unlock()

		// Request-profile events: all eight, once each, in pipeline order.
		postJSON(t, base+"/stop_request_profile", map[string]string{})
		events := readEvents(t, eventDir, rid)
		if len(events) != len(pipelineOrder) {
			t.Fatalf("got %d events for %s, want %d: %+v", len(events), rid, len(pipelineOrder), events)
		}
		at := map[string]int64{}
		for _, e := range events {
			if e.Stage != "asr" || e.RunID != "run-1" || e.PID == 0 {
				t.Errorf("event %+v: want stage asr, run_id run-1, a pid", e)
			}
			at[e.EventName] = e.TimestampNs
		}
		for i, name := range pipelineOrder {
			if _, ok := at[name]; !ok {
				t.Errorf("event %s missing", name)
			} else if i > 0 && at[name] < at[pipelineOrder[i-1]] {
				t.Errorf("event %s before %s", name, pipelineOrder[i-1])
			}
		}
		if d := time.Since(time.Unix(0, at["stage_complete"])); d < 0 || d > time.Minute {
			t.Errorf("stage_complete timestamp %d is not recent wall-clock time", at["stage_complete"])
		}
	})

	t.Run("stream", func(t *testing.T) {
		resp, body, err := transcribe(ctx, t, base, speech, map[string]string{"stream": "true"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %s, content type %q: %s", resp.Status, resp.Header.Get("Content-Type"), body)
		}
		if !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "transcription-") {
			t.Errorf("X-Request-Id = %q, want the server's transcription-<uuid>", resp.Header.Get("X-Request-Id"))
		}
		var datas []string
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, "data: "); ok {
				datas = append(datas, rest)
			}
		}
		if len(datas) < 3 || datas[len(datas)-1] != "[DONE]" {
			t.Fatalf("want deltas, done, [DONE]; got %q", datas)
		}
		deltas := 0
		for i, d := range datas[:len(datas)-1] {
			var ev struct {
				Type  string
				Delta string
				Text  string
				Usage struct {
					Type    string
					Seconds float64
				}
			}
			if err := json.Unmarshal([]byte(d), &ev); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			last := i == len(datas)-2
			switch {
			case !last && ev.Type == "transcript.text.delta" && ev.Delta != "":
				deltas++
			case last && ev.Type == "transcript.text.done":
				if ev.Text == "" || ev.Usage.Type != "duration" || ev.Usage.Seconds <= 0 {
					t.Errorf("done event %q: want text and usage duration seconds", d)
				}
			default:
				t.Errorf("unexpected event %d of %d: %q", i, len(datas), d)
			}
		}
		if deltas == 0 {
			t.Errorf("no transcript.text.delta events in %q", datas)
		}
	})

	t.Run("bad upload", func(t *testing.T) {
		for name, audio := range map[string][]byte{
			"not audio": []byte("this is a text file, not a recording\n"),
			"empty":     {},
			"bad wav":   append([]byte("RIFF\x24\x00\x00\x00WAVEfmt "), make([]byte, 8)...),
		} {
			resp, body, err := transcribe(ctx, t, base, audio, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var e struct{ Error struct{ Message string } }
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
				t.Errorf("%s: got %s %s, want 400 with {\"error\":{\"message\":...}}", name, resp.Status, body)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Errorf("%s: no X-Request-Id on the error", name)
			}
		}
		resp, body, err := transcribe(ctx, t, base, speech, map[string]string{"response_format": "text"}, nil)
		if err != nil || resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) == "" {
			t.Fatalf("after bad uploads: %v %v %q, want 200 with text", err, resp, body)
		}
	})

	t.Run("models and metrics", func(t *testing.T) {
		code, body := get(t, base+"/v1/models")
		if code != http.StatusOK || !strings.Contains(body, `"pocketsphinx-en-us"`) || !strings.Contains(body, `"list"`) {
			t.Errorf("/v1/models: %d %s", code, body)
		}
		code, body = get(t, base+"/metrics")
		for _, want := range []string{
			"\nasr_queue_depth ", "\nasr_running_requests ",
			`asr_requests_total{status="200"}`, `asr_requests_total{status="400"}`,
			`asr_stage_duration_seconds_bucket{stage="queue",le="+Inf"}`,
			`asr_otlp_spans_dropped_total{reason="export_failed"}`,
		} {
			if code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q (status %d)", want, code)
			}
		}
	})
}

func TestOverload(t *testing.T) {
	requirePocketSphinx(t)
	t.Parallel()
	base := startServer(t, nil, "--build-workers", "1", "--build-max-pending", "1", "--build-delay", "0.5", "--max-running-requests", "1")
	audio := busyWAV(4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const n = 16
	type result struct {
		status int
		body   []byte
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, body, err := transcribe(ctx, t, base, audio, nil, nil)
			if err != nil {
				results <- result{} // cancelled below
				return
			}
			results <- result{resp.StatusCode, body}
		})
	}
	// Refusals come back at once; the accepted requests would take seconds
	// each on one decoder, so once the 503s have had time to arrive, hang up
	// on the rest: the server must cope with that too.
	got := map[int]int{}
	timeout := time.After(20 * time.Second)
	quiet := time.NewTimer(time.Hour)
	defer quiet.Stop()
	for received := 0; received < n; {
		select {
		case r := <-results:
			received++
			got[r.status]++
			if r.status == http.StatusServiceUnavailable {
				var e struct{ Error struct{ Message string } }
				if json.Unmarshal(r.body, &e) != nil || e.Error.Message == "" {
					t.Errorf("503 body %s: want {\"error\":{\"message\":...}}", r.body)
				}
				quiet.Reset(3 * time.Second)
			}
		case <-quiet.C:
			cancel()
		case <-timeout:
			cancel()
		}
	}
	cancel()
	wg.Wait()
	t.Logf("statuses (0 = hung up): %v", got)
	if got[http.StatusServiceUnavailable] == 0 {
		t.Errorf("no 503 among %d concurrent requests with --build-max-pending 1", n)
	}
	// The hung-up requests must release the decoder and leave the queue.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, base+"/metrics")
		if strings.Contains(body, "\nasr_running_requests 0\n") && strings.Contains(body, "\nasr_queue_depth 0\n") &&
			strings.Contains(body, `asr_requests_total{status="503"}`) &&
			(got[0] == 0 || strings.Contains(body, `asr_requests_total{status="499"}`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not drain after the clients hung up:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Errorf("/health after overload: %d", code)
	}
}
