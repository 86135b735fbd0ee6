// Package export sends a capture bundle's traces to trace viewers.
//
// OTLP (otlp.go) posts every request's trace to an OTLP/HTTP endpoint such
// as Jaeger: the client's asr.request span stays the root of the server's
// spans (the server took its parent from the traceparent the client sent),
// every span of a request's trace gets the request's asrprof.level, the
// resource names the capture, and the stage decomposition that the caller
// derived (PlanConfig.Stages) becomes one synthesized span per stage under
// the client span. Spans are streamed from spans.otlp in batches, paced by a
// rate limit, and retried with exponential backoff.
//
// Perfetto (perfetto.go) writes the Chrome trace-event JSON that
// ui.perfetto.dev opens: one track per in-flight client slot, the server's
// spans on tracks per thread or per span name, flow arrows from each
// request to its server spans, and counter tracks for the GPU and
// scheduler probes.
//
// Both read the bundle only; deciding what to send (the planner, BuildPerfetto)
// is pure and tested without a network.
package export
