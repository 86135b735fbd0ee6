package capture_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/capture"
)

// The manifest records the configuration by marshalling it: every field
// that says what was measured (the probes' knobs included), durations in
// seconds, and none of the presentation fields.
func TestConfigRecord(t *testing.T) {
	cfg := capture.DefaultConfig()
	cfg.Target, cfg.Dataset = "http://127.0.0.1:8000", "m.jsonl"
	cfg.CPUHz, cfg.CPUEngine, cfg.GPUs, cfg.BPFStats = 49, "fp", []int{0, 2}, true
	cfg.GPMWindow, cfg.Timeout, cfg.SpanGrace = 250*time.Millisecond, 30*time.Second, 1500*time.Millisecond
	cfg.Seed = 1<<63 + 1 // more digits than a float64 keeps
	cfg.Quiet, cfg.Overwrite = true, true
	rec, err := cfg.Record()
	if err != nil {
		t.Fatal(err)
	}
	num := func(k string) string { return string(rec[k].(json.Number)) }
	for k, want := range map[string]string{"cpu_hz": "49", "gpm_window_s": "0.25", "timeout_s": "30", "span_grace_s": "1.5",
		"grace_s": "5", "ready_timeout_s": "120", "seed": "9223372036854775809", "repeats": "3", "proc_hz": "10",
		"server_metrics_interval_s": "0.5"} {
		if _, ok := rec[k].(json.Number); !ok || num(k) != want {
			t.Errorf("config[%q] = %v, want %s", k, rec[k], want)
		}
	}
	if rec["cpu_engine"] != "fp" || rec["bpf_stats"] != true || rec["server_metrics"] != "auto" || rec["target"] != cfg.Target || rec["arrivals"] != "poisson" {
		t.Errorf("config %v", rec)
	}
	if g, _ := rec["gpus"].([]any); len(g) != 2 {
		t.Errorf("gpus %v", rec["gpus"])
	}
	for _, k := range []string{"quiet", "overwrite", "format", "Timeout", "timeout_ns", "Quiet"} {
		if _, ok := rec[k]; ok {
			t.Errorf("config records %q", k)
		}
	}
	// The keys readers used before the config marshalled itself are all there.
	for _, k := range []string{"target", "dataset", "protocol", "model", "lang", "concurrency", "rates", "arrivals", "seed",
		"repeats", "warmup", "max_samples", "timeout_s", "grace_s", "out", "skip_bad", "probes", "pid", "otlp_http",
		"otlp_grpc", "span_grace_s", "events_dir", "profile_url", "chunk_ms", "pace", "loops", "realtime_dialect", "hotwords"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("config lacks %q", k)
		}
	}
	// Every exported field is recorded or tagged "-" with a seconds form.
	seconds := map[string]bool{"Timeout": true, "Grace": true, "ReadyTimeout": true, "GPMWindow": true, "SpanGrace": true, "ServerMetricsInterval": true,
		"LevelGap": true, "Duration": true, "Period": true}
	skip := map[string]bool{"Overwrite": true, "Format": true, "Quiet": true, "Verbose": true, "AgentToken": true, "Headers": true, // a secret is not recorded
		"TargetGiven": true} // what was typed: Target is what was measured
	for _, f := range reflect.VisibleFields(reflect.TypeOf(cfg)) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" && (seconds[f.Name] || skip[f.Name]):
		case name == "-" || name == "":
			t.Errorf("field %s is not recorded", f.Name)
		default:
			if _, ok := rec[name]; !ok {
				t.Errorf("field %s: no %q in the record", f.Name, name)
			}
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := capture.DefaultConfig()
	cfg.Target, cfg.Dataset = "http://127.0.0.1:8000", "m.jsonl"
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg.SetDefaults(now)
	if !slices.Equal(cfg.Concurrency, capture.DefaultLevels) || cfg.Out != "runs/20260102-030405" {
		t.Errorf("defaults: levels %v out %q", cfg.Concurrency, cfg.Out)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	cfg.Concurrency[0] = 99
	if capture.DefaultLevels[0] != 1 {
		t.Error("SetDefaults shares DefaultLevels")
	}
	open := capture.DefaultConfig()
	open.Rates, open.Out = []float64{2}, "x"
	open.SetDefaults(now)
	if len(open.Concurrency) != 0 || open.Out != "x" {
		t.Errorf("SetDefaults overrode given levels or --out: %v %q", open.Concurrency, open.Out)
	}
}
