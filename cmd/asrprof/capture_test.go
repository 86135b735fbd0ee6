package main

import (
	"io"
	"slices"
	"testing"
)

// The defaults a user gets from the command line: every probe of auto, and
// the gpu probe on every GPU (an empty --gpus list once meant "none").
func TestCaptureFlagDefaults(t *testing.T) {
	cfg, rb, err := parseCapture("capture", []string{"--target", "http://127.0.0.1:8000", "--dataset", "m.jsonl"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.GPUs) != 0 {
		t.Errorf("default --gpus = %v, want none named (every GPU)", cfg.GPUs)
	}
	if !slices.Equal(cfg.Probes, []string{"auto"}) {
		t.Errorf("default --probes = %v, want auto", cfg.Probes)
	}
	if !slices.Equal(cfg.Concurrency, []int{1, 8, 16, 32, 64}) {
		t.Errorf("default levels = %v", cfg.Concurrency)
	}
	if rb.enabled() {
		t.Error("a runbook without --server-cmd")
	}
	cfg, _, err = parseCapture("capture", []string{"--target", "http://x", "--dataset", "m", "--gpus", "0,2"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(cfg.GPUs, []int{0, 2}) {
		t.Errorf("--gpus 0,2 = %v (%v)", cfg.GPUs, err)
	}
}
