// Package clientspan records the client side of every request as
// OpenTelemetry spans, with the OpenTelemetry Go SDK, into the capture's
// span store (trace/spans).
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
