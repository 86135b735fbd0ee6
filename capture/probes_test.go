package capture

import (
	"context"
	"strings"
	"testing"

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
