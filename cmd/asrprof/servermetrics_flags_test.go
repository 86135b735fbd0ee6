package main

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/asrprof/asrprof/capture"
)

// --server-metrics and --server-metrics-interval set the metrics probe's
// configuration; a bad value is refused before anything runs.
func TestServerMetricsFlags(t *testing.T) {
	base := []string{"--target", "http://127.0.0.1:8000", "--dataset", "m.jsonl"}
	cfg, _, err := parseCapture("capture", base, io.Discard, io.Discard)
	if err != nil || cfg.ServerMetrics != "auto" || cfg.ServerMetricsInterval != 500*time.Millisecond {
		t.Errorf("defaults: %q every %v (%v), want auto every 500ms", cfg.ServerMetrics, cfg.ServerMetricsInterval, err)
	}
	cfg, _, err = parseCapture("capture", append(base, "--server-metrics", "off", "--server-metrics-interval", "2s"), io.Discard, io.Discard)
	if err != nil || cfg.ServerMetrics != "off" || cfg.ServerMetricsInterval != 2*time.Second {
		t.Errorf("--server-metrics off --server-metrics-interval 2s: %q every %v (%v)", cfg.ServerMetrics, cfg.ServerMetricsInterval, err)
	}
	rec, err := cfg.Record()
	if err != nil || rec["server_metrics"] != "off" || rec["server_metrics_interval_s"] == nil {
		t.Errorf("manifest config record: server_metrics %v, interval %v (%v)", rec["server_metrics"], rec["server_metrics_interval_s"], err)
	}
	for _, bad := range [][]string{{"--server-metrics", "127.0.0.1:8000/metrics"}, {"--server-metrics-interval", "1ms"}} {
		cfg, _, err := parseCapture("capture", append(base, bad...), io.Discard, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if !errors.Is(err, capture.ErrInvalidConfig) {
			t.Errorf("%v: %v, want an invalid configuration", bad, err)
		}
	}
}
