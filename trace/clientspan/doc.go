// Package clientspan records the client side of every request as
// OpenTelemetry spans into the capture's span store (trace/spans). It
// builds the OTLP records itself (pdata), as the OpenTelemetry Go SDK's
// batch span processor would write them, for a fraction of the SDK's cost
// (BenchmarkStartEnd on a shared 2-core machine, 2026-12-01: 25–31 µs,
// 7.3 KB and 47 allocations a request through the SDK; 4–8 µs, 2.6–3.5 KB
// and 11–17 allocations now). Spans that find the queue full are dropped
// and counted (Shutdown says how many).
//
// Each request gets a root span "asr.request" (kind CLIENT) whose W3C
// traceparent the driver sends to the server, so that the server's own
// spans land in the same trace; when the request ends, the span gets the
// request's outcome and two children with explicit timestamps: "upload"
// (send start to body sent) and "wait_first_byte" (body sent to the first
// response byte).
//
// Finished spans are batched off the request path and written at least
// every FlushInterval, so a killed capture loses at most that much.
package clientspan
