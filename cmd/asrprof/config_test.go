package main

import (
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/option"
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

// capture's flags are the options of capture.Options, each with the
// table's help, plus only the command's own (the runbook's and
// --length-buckets); capture --help shows them in the table's order.
func TestCaptureFlagsAreTheOptions(t *testing.T) {
	for _, name := range []string{"capture", "ab", "sensitivity"} {
		cfg := capture.DefaultConfig()
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		captureFlags(fs, &cfg)
		own := flag.NewFlagSet(name, flag.ContinueOnError)
		addRunbookFlags(own)
		as := analysis.DefaultSettings()
		option.Named(analysis.OptionTable(), "length-buckets").Define(own, &as, nil)
		opts := map[string]bool{}
		for _, o := range capture.Options() {
			opts[o.Name] = true
			f := fs.Lookup(o.Name)
			if f == nil || f.Usage != o.Usage {
				t.Errorf("%s --%s: flag %v, want the table's", name, o.Name, f)
			}
			if own.Lookup(o.Name) != nil {
				t.Errorf("%s --%s: both an option and the command's own", name, o.Name)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !opts[f.Name] && own.Lookup(f.Name) == nil {
				t.Errorf("%s --%s: neither an option nor the command's own flag", name, f.Name)
			}
		})
		own.VisitAll(func(f *flag.Flag) {
			if fs.Lookup(f.Name) == nil {
				t.Errorf("%s --%s: missing", name, f.Name)
			}
		})
	}
	var order []string
	for _, e := range helpEntries(t, helpOf(t, "capture")) {
		if slices.ContainsFunc(capture.Options(), func(o capture.Option) bool { return o.Name == e.name }) {
			order = append(order, e.name)
		}
	}
	var want []string
	for _, o := range capture.Options() {
		want = append(want, o.Name)
	}
	if !slices.Equal(order, want) {
		t.Errorf("capture --help shows the options in the order\n%q\nwant the table's\n%q", order, want)
	}
}
