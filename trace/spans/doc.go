// Package spans is the capture's span store: the bundle file spans.otlp and
// a flat view of its spans for analyses and for joining with requests.
//
// spans.otlp is a sequence of records. Each record is a uvarint byte length
// followed by that many bytes: one serialized OTLP ExportTraceServiceRequest
// (what ptraceotlp.ExportRequest.MarshalProto produces). Writer appends every
// record in one write, so a killed capture leaves whole records behind, save
// perhaps a truncated last one, which Read drops and reports.
//
// Spans from every source share the file: the client's own spans (service
// name ClientService, written by trace/clientspan) and the server's (received
// by trace/otlp).
package spans
