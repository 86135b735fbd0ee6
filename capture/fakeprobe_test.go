package capture_test

import (
	"context"

	"github.com/asrprof/asrprof/probe"
)

// Fake is a probe that starts, and writes Records records to File in each
// pass it ends: with Records 0 it is "on" and records nothing, the failure
// the capture must report.
type Fake struct {
	ProbeName string
	File      string
	Records   int

	out probe.Sink
}

var _ probe.Probe = (*Fake)(nil)

// Name returns ProbeName.
func (f *Fake) Name() string { return f.ProbeName }

// Start keeps the sink.
func (f *Fake) Start(_ context.Context, _ probe.Target, out probe.Sink) error {
	f.out = out
	return nil
}

// Begin does nothing.
func (f *Fake) Begin(probe.Period) {}

// End writes Records records for the pass.
func (f *Fake) End(_ context.Context, p probe.Period) error {
	for i := 0; i < f.Records; i++ {
		if err := f.out.Append(f.File, map[string]any{"level": p.Level, "repeat": p.Repeat, "i": i}); err != nil {
			return err
		}
	}
	return nil
}

// Stop does nothing.
func (f *Fake) Stop(context.Context) error { return nil }
