// Package report writes a capture bundle as one self-contained HTML file:
// the sweep, the stage decomposition, the latency distribution, a timeline
// of the capture with each request's waterfall, the diagnosis, the CPU's
// hottest code and its flame graph, realtime panels and provenance; and
// two bundles compared (docs/REPORT.md).
//
// It computes no number of its own: the tables are those of the built-in
// analyses (package analysis runs scripts/*.star), the per-pass metrics
// model/summary', the percentiles package stats'. What it adds is drawing:
// SVG written here, small inline JavaScript for hover, zoom and waterfalls,
// nothing fetched. capture does not import it (cmd/asrprof hands capture a
// capture.Finish that calls WriteFile).
package report
