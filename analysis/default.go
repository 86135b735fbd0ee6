package analysis

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/table"
)

// DefaultTimeout bounds each default analysis (asrprof analyze, capture).
const DefaultTimeout = 30 * time.Second

// DefaultScripts lists the analyses that `asrprof analyze DIR` runs without
// script arguments: sweep; stages when the server left spans or events;
// metrics_stages when server_metrics.jsonl holds metrics of the built-in
// metrics map (the server's own queue, prefill, decode... times: vLLM,
// SGLang); bottleneck; buckets (the results by audio length:
// Options.LengthBuckets, which emits nothing when off); gpu and cpu when
// those probes ran.
func DefaultScripts(c *Capture) []string { return DefaultScriptsFor(c, Options{}) }

// DefaultScriptsFor is DefaultScripts under o: with o.MetricsMap (a
// user's metrics map), metrics_stages is always among them, and says what
// it found under that map.
func DefaultScriptsFor(c *Capture, o Options) []string {
	out := []string{"validity", "sweep"} // the run's checks on itself first (docs/VALIDITY.md)
	if c.hasServerTelemetry() {
		out = append(out, "stages")
	}
	if o.MetricsMap != "" || c.hasServerMetrics() {
		out = append(out, "metrics_stages")
	}
	if p, _ := c.Bundle.Manifest.Config["protocol"].(string); p == "funasr-ws" || p == "openai-realtime" {
		out = append(out, "realtime")
	}
	if c.driverLagged() {
		out = append(out, "driver") // before the diagnosis: the load generator may have set the pace
	}
	if !c.hasServerTelemetry() {
		out = append(out, "blackbox") // what the diagnosis stands on, seen from outside
	}
	out = append(out, "bottleneck", "buckets")
	if c.Bundle.Has(bundle.GPUFile) {
		out = append(out, "gpu")
	}
	if c.Bundle.Has(bundle.SchedFile) {
		out = append(out, "cpu")
	}
	return out
}

// driverLagged reports whether the driver's self-check (the manifest's
// extra.driver_self_check) says it lagged in a scored pass.
func (c *Capture) driverLagged() bool {
	recs, _ := c.Bundle.Manifest.Extra["driver_self_check"].([]any)
	return slices.ContainsFunc(recs, func(r any) bool {
		m, _ := r.(map[string]any)
		lag, _ := m["lagging"].([]any)
		return len(lag) > 0 && m["warmup"] != true
	})
}

// hasServerTelemetry reports whether the capture holds server spans or
// events (client spans alone give no stage table).
func (c *Capture) hasServerTelemetry() bool {
	return c.HasEvents() || c.HasSpans() && len(c.Tables.SpanNames()) > 0
}

// RunScripts runs names in one session, as many at once as there are
// cores, and returns every table emitted, in the order of names. A failing
// script does not stop the others; the error joins their failures, in
// order.
func RunScripts(ctx context.Context, s *Session, names []string) ([]*table.Table, error) {
	tabs := make([][]*table.Table, len(names))
	errs := make([]error, len(names))
	var g errgroup.Group // errors are kept per script, not returned
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, n := range names {
		g.Go(func() error {
			tabs[i], errs[i] = s.Run(ctx, n)
			return nil
		})
	}
	g.Wait()
	all := slices.Concat(tabs...)
	// The tables the capture's Load or its scripts are still writing in
	// the background: a bundle that cannot be written to is analysed all
	// the same, so that is not an error here (Capture.Tables.Wait says it).
	s.c.Tables.Wait()
	return all, errors.Join(errs...)
}
