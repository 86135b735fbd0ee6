// Package otlp receives OTLP traces from the server under test.
//
// A Receiver listens for OTLP/HTTP (POST /v1/traces, protobuf or JSON,
// optionally gzip-compressed) and OTLP/gRPC, decodes every export request
// with pdata and hands it, synchronously, to a sink: in a capture, the span
// store's Write (trace/spans). Payloads that do not decode are answered with
// an error and counted; they never stop the receiver.
//
// The receiver binds loopback addresses only, unless Config.AllowRemote says
// otherwise: it has no authentication.
package otlp
