package capture

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/probe"
)

// lossy is a running probe that reports a fixed loss.
type lossy struct{ name, loss string }

func (l *lossy) Name() string                                          { return l.name }
func (l *lossy) Start(context.Context, probe.Target, probe.Sink) error { return nil }
func (l *lossy) Begin(probe.Period)                                    {}
func (l *lossy) End(context.Context, probe.Period) error               { return nil }
func (l *lossy) Stop(context.Context) error                            { return nil }
func (l *lossy) Losses() string                                        { return l.loss }

func TestLossesAreSaidAndKept(t *testing.T) {
	set := &probeSet{running: []probe.Probe{&lossy{"sched", "3 events skipped"}, &lossy{"cpu", ""}}}
	var said []string
	got := set.losses(func(s string) { said = append(said, s) })
	if len(got) != 1 || got["sched"] != "3 events skipped" {
		t.Errorf("losses = %v, want only sched's", got)
	}
	if len(said) != 1 || !strings.Contains(said[0], "probe sched: 3 events skipped") {
		t.Errorf("said %q, want one line naming the probe and its loss", said)
	}
}

// costly is a running probe with a BPF cost that grows by one step per
// read.
type costly struct {
	lossy
	rt   time.Duration
	runs uint64
}

func (c *costly) BPFCost() (time.Duration, uint64, error) {
	c.rt += 2 * time.Millisecond
	c.runs += 1000
	return c.rt, c.runs, nil
}

type nopCloser struct{ closed *bool }

func (n nopCloser) Close() error { *n.closed = true; return nil }

func TestBPFReportCountsFromTheBaseline(t *testing.T) {
	p := &costly{lossy: lossy{name: "sched"}}
	closed := false
	set := &probeSet{running: []probe.Probe{p, &lossy{name: "gpu"}}}
	set.stats, set.statsFrom = nopCloser{&closed}, time.Now().Add(-time.Second)
	set.costBase = set.bpfCosts() // 2 ms, 1000 runs
	var said []string
	got := set.bpfReport(func(s string) { said = append(said, s) }) // 4 ms, 2000 runs
	c, ok := got["sched"].(map[string]any)
	if !ok || len(got) != 1 {
		t.Fatalf("report %v, want sched only", got)
	}
	if c["runs"] != uint64(1000) || c["runtime_s"] != 0.002 || c["ns_per_run"] != 2000.0 {
		t.Errorf("sched cost %v, want 1000 runs, 0.002 s, 2000 ns a run (since the baseline)", c)
	}
	if len(said) != 1 || !strings.Contains(said[0], "sched 0.002 s in 1000 runs (2000 ns a run)") {
		t.Errorf("said %q", said)
	}
	set.stop(func(string) {})
	if !closed {
		t.Error("stop left the BPF statistics on")
	}
	if (&probeSet{}).bpfReport(func(string) { t.Error("said something without --bpf-stats") }) != nil {
		t.Error("a report without --bpf-stats")
	}
}
