package capture_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

func TestCaptureRealtimeSessions(t *testing.T) {
	// Two loops of each one-second sample: the fake's transcript is the
	// reference twice, so WER is 0 only if the reference was looped too.
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Text: fakeasr.DefaultText + " " + fakeasr.DefaultText, WordS: 0.05})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 3))
	cfg.Protocol = "funasr-ws"
	cfg.Pace = "none"
	cfg.Loops = 2
	cfg.Concurrency = []int{1, 2}
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(o.Results.Results) != 2 {
		t.Fatalf("%d levels", len(o.Results.Results))
	}
	for _, lr := range o.Results.Results {
		p := lr.PerRepeat[0]
		if p.Coverage.Evaluated != 3 || p.CorpusWER != 0 {
			t.Errorf("%s: evaluated %d WER %v (want 3 and 0)", lr.Level, p.Coverage.Evaluated, p.CorpusWER)
		}
		if p.AudioSPerWallS == nil || p.FirstUpdateP50S == nil || p.FinalAfterStopP95S == nil || p.LagP95WorstS == nil {
			t.Errorf("%s: realtime metrics missing: %+v", lr.Level, p)
		}
	}
	// The realtime table reads capture.passes: the numbers of results.json.
	c, err := analysis.Load(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := analysis.NewSession(c, analysis.Options{}).Run(context.Background(), "realtime")
	// Two tables: the sessions per level, then their lag over session time.
	if err != nil || len(tabs) != 2 || len(tabs[0].Values) != 2 || tabs[1].Name != "realtime_lag" {
		t.Fatalf("realtime tables: %v %+v", err, tabs)
	}
	for i, lr := range o.Results.Results {
		row := tabs[0].Values[i]
		if row[0] != lr.Level || row[1] != int64(lr.Concurrency) || row[2] != *lr.PerRepeat[0].AudioSPerWallS {
			t.Errorf("realtime row %v, want level %s, %d sessions, aggregate RTF %v", row, lr.Level, lr.Concurrency, *lr.PerRepeat[0].AudioSPerWallS)
		}
	}
	if !strings.Contains(out, "Realtime sessions") {
		t.Errorf("the capture does not print the realtime table:\n%s", out)
	}
	if got := len(srv.Sessions()); got != 6 {
		t.Errorf("%d sessions, want 6", got)
	}
	for _, s := range srv.Sessions() {
		if s.AudioS < 1.99 || s.AudioS > 2.01 {
			t.Errorf("session sent %.3f s, want 2 (two loops of 1 s)", s.AudioS)
		}
	}
}

func TestConfigRealtimeValidation(t *testing.T) {
	ok := func(c *capture.Config) {}
	for _, tc := range []struct {
		name string
		edit func(c *capture.Config)
		want string
	}{
		{"funasr ws target", func(c *capture.Config) { c.Protocol, c.Target = "funasr-ws", "ws://127.0.0.1:10095" }, ""},
		{"ws target for openai", func(c *capture.Config) { c.Target = "ws://127.0.0.1:10095" }, "http(s) base URL"},
		{"bad pace", func(c *capture.Config) { c.Protocol, c.Pace = "funasr-ws", "fast" }, "--pace"},
		{"bad dialect", func(c *capture.Config) { c.Protocol, c.Dialect = "openai-realtime", "azure" }, "--realtime-dialect"},
		{"chunk too small", func(c *capture.Config) { c.Protocol, c.ChunkMs = "funasr-ws", 5 }, "--chunk-ms"},
		{"defaults", ok, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := baseConfig(t, "http://127.0.0.1:1", "x.jsonl")
			c.Timeout = time.Second
			tc.edit(&c)
			err := c.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// vLLM's realtime session must name a model: without --model the capture
// takes the one /v1/models lists; where it lists none, the capture stops
// before it writes anything, and says why.
func TestCaptureRealtimeVLLMModel(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: "vllm", Model: "openai/whisper-large-v3", WordS: 0.05})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 1))
	cfg.Protocol, cfg.Dialect, cfg.Pace = "openai-realtime", "vllm", "none"
	if _, out, err := runCapture(t, context.Background(), cfg); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range srv.Sessions() {
		if s.Config["model"] != "openai/whisper-large-v3" {
			t.Errorf("session.update %v: want the model /v1/models lists", s.Config)
		}
	}
	bare := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: "vllm"})
	cfg = baseConfig(t, bare.URL, makeDataset(t, 1))
	cfg.Protocol, cfg.Dialect, cfg.Pace = "openai-realtime", "vllm", "none"
	_, out, err := runCapture(t, context.Background(), cfg)
	if !errors.Is(err, capture.ErrInvalidConfig) || !strings.Contains(err.Error(), "--realtime-dialect vllm needs --model") {
		t.Errorf("no model listed: err %v, want ErrInvalidConfig naming --model\n%s", err, out)
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) || len(bare.Sessions()) != 0 {
		t.Errorf("the refused capture wrote %s (%v) or opened %d sessions", cfg.Out, err, len(bare.Sessions()))
	}
}
