package refserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/refserver/refservertest"
)

// The whisper engine's tests run the tiny configuration on the CPU with
// Debian's python3-torch; they skip only where /usr/bin/python3 cannot
// import torch.

const whisperTPS = 4.0 // --tokens-per-second of the synthetic-weights server

var synthText = regexp.MustCompile(`^tok[0-9]+( tok[0-9]+)*$`)

// metaInt reads an integer event metadata field (JSON numbers decode as
// float64); ok is false when it is absent or not a whole number.
func metaInt(m map[string]any, key string) (int, bool) {
	f, ok := m[key].(float64)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// completeMeta returns the stage_complete metadata of a request.
func completeMeta(t *testing.T, dir, rid string) map[string]any {
	t.Helper()
	for _, e := range readEvents(t, dir, rid) {
		if e.EventName == "stage_complete" {
			return e.Metadata
		}
	}
	t.Fatalf("no stage_complete event for %s in %s", rid, dir)
	return nil
}

// metricValue returns the value of the Prometheus sample line that starts
// with name (e.g. `asr_decode_batch_size_bucket{le="1"}`).
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no sample %s", name)
	return 0
}

func TestWhisper(t *testing.T) {
	t.Parallel()
	col := &collector{}
	otlp := httptest.NewServer(col)
	defer otlp.Close()
	srv := refservertest.StartWhisper(t, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + otlp.URL + "/v1/traces"},
		"--model", "tiny", "--device", "cpu", "--max-running-requests", "4",
		"--tokens-per-second", fmt.Sprint(whisperTPS))
	base := srv.URL
	speech := speechWAV(t)
	ctx := context.Background()

	t.Run("events and spans", func(t *testing.T) {
		dir := t.TempDir()
		postJSON(t, base+"/start_request_profile", map[string]string{"run_id": "w1", "event_dir": dir})
		const (
			traceID = "5bf92f3577b34da6a3ce929d0e0e4737"
			parent  = "10f067aa0ba902b8"
			rid     = "whisper-traced-1"
		)
		h := http.Header{}
		h.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
		h.Set("X-Request-Id", rid)
		resp, body, err := transcribe(ctx, t, base, speech, map[string]string{"model": "whisper-tiny"}, h)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s: %s", resp.Status, body)
		}
		var answer struct{ Text string }
		if err := json.Unmarshal(body, &answer); err != nil || !synthText.MatchString(answer.Text) {
			t.Fatalf("answer %s: want the synthetic-weights text tok<ID> ... (err %v)", body, err)
		}
		postJSON(t, base+"/stop_request_profile", map[string]string{})

		events := readEvents(t, dir, rid)
		at := map[string]profileEvent{}
		for _, e := range events {
			if _, dup := at[e.EventName]; dup {
				t.Errorf("event %s twice", e.EventName)
			}
			at[e.EventName] = e
		}
		for i, name := range pipelineOrder {
			e, ok := at[name]
			if !ok {
				t.Errorf("event %s missing (have %d events)", name, len(events))
				continue
			}
			if e.Stage != "asr" || e.RunID != "w1" {
				t.Errorf("event %+v: want stage asr, run_id w1", e)
			}
			if i > 0 && e.TimestampNs < at[pipelineOrder[i-1]].TimestampNs {
				t.Errorf("event %s before %s", name, pipelineOrder[i-1])
			}
		}
		if bs, ok := metaInt(at["scheduler_prefill_start"].Metadata, "batch_size"); !ok || bs != 1 {
			t.Errorf("prefill_start batch_size = %v, want 1 (alone)", at["scheduler_prefill_start"].Metadata)
		}
		if _, ok := metaInt(at["scheduler_prefill_start"].Metadata, "queue_depth"); !ok {
			t.Errorf("prefill_start has no queue_depth: %v", at["scheduler_prefill_start"].Metadata)
		}
		m := at["stage_complete"].Metadata
		tokens, _ := metaInt(m, "tokens")
		steps, _ := metaInt(m, "decode_steps")
		first, ok1 := metaInt(m, "first_step")
		last, ok2 := metaInt(m, "last_step")
		maxBatch, _ := metaInt(m, "max_batch")
		audio, _ := m["audio_seconds"].(float64)
		if m["status"] != "ok" || !ok1 || !ok2 || maxBatch != 1 {
			t.Errorf("stage_complete metadata %v: want status ok, first_step, last_step, max_batch 1", m)
		}
		// synthetic weights: round(audio seconds x tokens per second) tokens,
		// the first from the first forward, one per decode step after it
		if math.Abs(float64(tokens)-audio*whisperTPS) > 0.5+1e-6 || tokens < 2 {
			t.Errorf("tokens = %d for %.3f s at %g tokens/s", tokens, audio, whisperTPS)
		}
		if steps != tokens-1 || last-first+1 != steps {
			t.Errorf("decode_steps %d, steps %d..%d for %d tokens: want tokens-1 consecutive steps", steps, first, last, tokens)
		}
		if n := len(strings.Fields(answer.Text)); n != tokens {
			t.Errorf("answer has %d words, stage_complete says %d tokens", n, tokens)
		}

		// Spans: the PocketSphinx engine's four children, with the batching attributes on decode.
		var root otlpSpan
		children := map[string]otlpSpan{}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			root, children = otlpSpan{}, map[string]otlpSpan{}
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
			if len(children) == 4 {
				break
			}
		}
		for _, name := range []string{"build", "queue", "first_forward", "decode"} {
			if _, ok := children[name]; !ok {
				t.Errorf("no child span %q under the request span (have %d)", name, len(children))
			}
		}
		if v, _ := root.attr("gen_ai.request.model"); v != "whisper-tiny" {
			t.Errorf("request span gen_ai.request.model = %v, want whisper-tiny", v)
		}
		dec := children["decode"]
		for key, want := range map[string]int{"decode.steps": steps, "decode.first_step": first,
			"decode.last_step": last, "decode.max_batch": 1, "decode.tokens": tokens} {
			v, _ := dec.attr(key)
			if got, err := strconv.Atoi(fmt.Sprint(v)); err != nil || got != want {
				t.Errorf("decode span %s = %v, want %d", key, v, want)
			}
		}
	})

	t.Run("batching", func(t *testing.T) {
		dir := t.TempDir()
		postJSON(t, base+"/start_request_profile", map[string]string{"run_id": "w2", "event_dir": dir})
		audio := busyWAV(6) // 6 s: 24 tokens, 23 decode steps each
		const n = 4
		var wg sync.WaitGroup
		status := make([]int, n)
		for i := range n {
			wg.Go(func() {
				h := http.Header{}
				h.Set("X-Request-Id", fmt.Sprintf("whisper-batch-%d", i))
				resp, body, err := transcribe(ctx, t, base, audio, nil, h)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				status[i] = resp.StatusCode
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %d: %s %s", i, resp.Status, body)
				}
			})
		}
		wg.Wait()
		postJSON(t, base+"/stop_request_profile", map[string]string{})
		type span struct{ first, last, steps, maxBatch int }
		var spans []span
		for i := range n {
			if status[i] != http.StatusOK {
				continue
			}
			m := completeMeta(t, dir, fmt.Sprintf("whisper-batch-%d", i))
			var s span
			var ok [4]bool
			s.first, ok[0] = metaInt(m, "first_step")
			s.last, ok[1] = metaInt(m, "last_step")
			s.steps, ok[2] = metaInt(m, "decode_steps")
			s.maxBatch, ok[3] = metaInt(m, "max_batch")
			if ok != [4]bool{true, true, true, true} || s.steps != 23 {
				t.Errorf("request %d stage_complete %v: want first_step, last_step, max_batch and 23 decode_steps", i, m)
			}
			// continuous batching: a request takes part in every step from its first to its last
			if s.last-s.first+1 != s.steps {
				t.Errorf("request %d: %d decode steps over steps %d..%d", i, s.steps, s.first, s.last)
			}
			spans = append(spans, s)
		}
		overlaps, maxBatch := 0, 0
		for i, a := range spans {
			maxBatch = max(maxBatch, a.maxBatch)
			for _, b := range spans[i+1:] {
				if a.first <= b.last && b.first <= a.last {
					overlaps++
				}
			}
		}
		t.Logf("decode step ranges and max batch: %+v", spans)
		if overlaps == 0 || maxBatch < 2 {
			t.Errorf("4 concurrent requests were not batched: %d overlapping pairs of step ranges, max batch %d", overlaps, maxBatch)
		}
		_, body := get(t, base+"/metrics")
		ones := metricValue(t, body, `asr_decode_batch_size_bucket{le="1"}`)
		all := metricValue(t, body, "asr_decode_batch_size_count")
		if all <= ones {
			t.Errorf("asr_decode_batch_size: %g steps, %g of them of batch 1; want some larger", all, ones)
		}
		if v := metricValue(t, body, "asr_running_requests"); v != 0 {
			t.Errorf("asr_running_requests = %g after all answers, want 0", v)
		}
	})

	t.Run("stream", func(t *testing.T) {
		resp, body, err := transcribe(ctx, t, base, speech, map[string]string{"stream": "true"}, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v %s", err, resp, body)
		}
		var deltas strings.Builder
		var done string
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, "data: ")
			if !ok || rest == "[DONE]" {
				continue
			}
			var ev struct{ Type, Delta, Text string }
			if err := json.Unmarshal([]byte(rest), &ev); err != nil {
				t.Fatalf("event %q: %v", rest, err)
			}
			switch ev.Type {
			case "transcript.text.delta":
				deltas.WriteString(ev.Delta)
			case "transcript.text.done":
				done = ev.Text
			}
		}
		if !synthText.MatchString(done) || deltas.String() != done {
			t.Errorf("deltas %q do not add up to the done text %q", deltas.String(), done)
		}
	})

	t.Run("models, health, log", func(t *testing.T) {
		var models struct {
			Data []struct {
				ID        string
				Synthetic *bool `json:"synthetic_weights"`
				Note      string
			}
		}
		code, body := get(t, base+"/v1/models")
		if code != http.StatusOK || json.Unmarshal([]byte(body), &models) != nil || len(models.Data) != 1 ||
			models.Data[0].ID != "whisper-tiny" || models.Data[0].Synthetic == nil || !*models.Data[0].Synthetic ||
			!strings.Contains(models.Data[0].Note, "not a measurement") {
			t.Errorf("/v1/models: %d %s; want whisper-tiny, synthetic_weights true and a note", code, body)
		}
		code, body = get(t, base+"/health")
		if code != http.StatusOK || !strings.Contains(body, `"synthetic_weights": true`) {
			t.Errorf("/health: %d %s", code, body)
		}
		if !strings.Contains(srv.Log(), "synthetic weights: WER is not a measurement") {
			t.Errorf("server log does not say the weights are synthetic:\n%s", srv.Log())
		}
		_, body = get(t, base+"/metrics")
		if v := metricValue(t, body, "asr_synthetic_weights"); v != 1 {
			t.Errorf("asr_synthetic_weights = %g, want 1", v)
		}
	})

	t.Run("realtime refused", func(t *testing.T) {
		key := make([]byte, 16)
		rand.Read(key)
		req, _ := http.NewRequest(http.MethodGet, base+"/ws", nil)
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct {
			Error struct{ Message, Type string }
		}
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != http.StatusNotImplemented || e.Error.Type != "not_supported" ||
			!strings.Contains(e.Error.Message, "not supported") {
			t.Errorf("WebSocket upgrade: %s %+v; want 501 not_supported", resp.Status, e)
		}
	})
}

func TestWhisperOverload(t *testing.T) {
	t.Parallel()
	base := refservertest.StartWhisper(t, nil, "--model", "tiny", "--device", "cpu",
		"--build-workers", "1", "--build-max-pending", "2", "--build-delay", "0.5",
		"--max-running-requests", "2", "--tokens-per-second", "2").URL
	audio := speechWAV(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 10
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, body, err := transcribe(ctx, t, base, audio, nil, nil)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				var e struct {
					Error struct{ Message, Type string }
				}
				if json.Unmarshal(body, &e) != nil || e.Error.Type != "server_overloaded" ||
					!strings.Contains(e.Error.Message, "overloaded") || resp.Header.Get("Retry-After") == "" {
					t.Errorf("503 %s: want a server_overloaded error with Retry-After", body)
				}
			}
			mu.Lock()
			got[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("statuses: %v", got)
	// Two fit in the build backlog (one building, one waiting); a request
	// that arrives after they are built may fit too. The rest are refused.
	if got[http.StatusServiceUnavailable] == 0 || got[http.StatusOK] < 2 ||
		got[http.StatusOK]+got[http.StatusServiceUnavailable] != n {
		t.Errorf("statuses %v: want 200s for the backlog and 503s beyond it", got)
	}
	// The handler counts a request just after writing its answer: poll.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, body := get(t, base+"/metrics")
		if metricValue(t, body, `asr_requests_total{status="503"}`) == float64(got[http.StatusServiceUnavailable]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics does not count the %d 503s:\n%s", got[http.StatusServiceUnavailable], body)
		}
	}
}

// TestWhisperCheckpoint writes a seeded tiny model as a Hugging Face
// snapshot (model.safetensors by the engine's own writer, vocab.json,
// added_tokens.json; whisper_checkpoint.py checks the weights read back
// from it and from a pytorch_model.bin), then serves it with --model-path
// and expects the transcript the original model produced in memory. It
// tests the format path; no real Whisper checkpoint was available.
func TestWhisperCheckpoint(t *testing.T) {
	refservertest.RequireTorch(t)
	t.Parallel()
	dir := t.TempDir()
	wav := filepath.Join(dir, "speech.wav")
	if err := os.WriteFile(wav, speechWAV(t), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "whisper-tiny")
	script := filepath.Join(refservertest.Root(), "refserver", "whisper_checkpoint.py")
	out, err := exec.Command(python, script, ckpt, wav, "--max-new-tokens", "10", "--slots", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("whisper_checkpoint.py: %v\n%s", err, out)
	}
	var want struct {
		Text   string
		Tokens []int
	}
	raw, err := os.ReadFile(filepath.Join(ckpt, "expected.json"))
	if err != nil || json.Unmarshal(raw, &want) != nil || want.Text == "" {
		t.Fatalf("expected.json: %v %s", err, raw)
	}
	t.Logf("expected transcript: %q (tokens %v)", want.Text, want.Tokens)

	base := refservertest.StartWhisper(t, nil, "--device", "cpu", "--model-path", ckpt,
		"--max-new-tokens", "10", "--max-running-requests", "2").URL
	ctx := context.Background()
	resp, body, err := transcribe(ctx, t, base, mustRead(t, wav), nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("transcribe: %v %v %s", err, resp, body)
	}
	var answer struct{ Text string }
	if json.Unmarshal(body, &answer) != nil || answer.Text != want.Text {
		t.Errorf("served checkpoint answered %s, want text %q", body, want.Text)
	}
	code, models := get(t, base+"/v1/models")
	if code != http.StatusOK || !strings.Contains(models, `"id": "whisper-tiny"`) ||
		!strings.Contains(models, `"synthetic_weights": false`) || !strings.Contains(models, "model.safetensors") {
		t.Errorf("/v1/models: %d %s; want whisper-tiny, synthetic_weights false, weights from model.safetensors", code, models)
	}
	_, metrics := get(t, base+"/metrics")
	if v := metricValue(t, metrics, "asr_synthetic_weights"); v != 0 {
		t.Errorf("asr_synthetic_weights = %g with --model-path, want 0", v)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A coalesced first forward (--prefill-batch) gives each request the
// logits it gets alone: the batch changes the cost, not the answer.
func TestWhisperPrefillBatch(t *testing.T) {
	refservertest.RequireTorch(t)
	t.Parallel()
	prog := `
import sys, torch
sys.path.insert(0, sys.argv[1])
import whisper_model as wm
torch.manual_seed(0)
d = wm.Dims.named("tiny")
m = wm.Whisper(d)
wm.init_synthetic(m, 0)
sp = wm.Specials(d.vocab)
mels = [torch.randn(d.n_mels, wm.N_FRAMES) for _ in range(3)]
alone = [wm.Runner(m, sp, 4).prefill_logits(s, x)[0] for s, x in zip([3, 0, 2], mels)]
r = wm.Runner(m, sp, 4)
both = r.prefill_logits([3, 0, 2], mels)
diff = max((a - b).abs().max().item() for a, b in zip(alone, both))
scale = max(a.abs().max().item() for a in alone)
print("diff %.3g scale %.3g" % (diff, scale))
sys.exit(0 if diff <= 1e-3 * max(scale, 1.0) else 1)
`
	out, err := exec.Command(python, "-c", prog, filepath.Join(refservertest.Root(), "refserver")).CombinedOutput()
	if err != nil {
		t.Fatalf("batched first forward differs from single ones: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}
