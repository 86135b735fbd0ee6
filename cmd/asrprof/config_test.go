package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/capture"
)

// The command line's defaults are capture's: a capture given only its
// target and dataset is capture.DefaultConfig with SetDefaults.
func TestCaptureDefaultsAreTheLibrarys(t *testing.T) {
	got, _, err := parseCapture("capture", []string{"--target", "http://127.0.0.1:8000", "--dataset", "m.jsonl"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := capture.DefaultConfig()
	want.Target, want.Dataset = "http://127.0.0.1:8000", "m.jsonl"
	want.SetDefaults(time.Now())
	if !strings.HasPrefix(got.Out, "runs/") || len(got.Out) != len(want.Out) {
		t.Errorf("--out default %q, want like %q", got.Out, want.Out)
	}
	got.Out = want.Out
	if len(got.Rates) == 0 {
		got.Rates = nil // an empty list flag
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults from the command line:\n%+v\nwant capture's:\n%+v", got, want)
	}
}
