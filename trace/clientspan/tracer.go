package clientspan

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/spans"
)

// FlushInterval is the longest a finished span waits before it is written.
const FlushInterval = 500 * time.Millisecond

// Span and attribute names.
const (
	SpanRequest       = "asr.request"
	SpanUpload        = "upload"
	SpanWaitFirstByte = "wait_first_byte"

	AttrSampleID        = "asrprof.sample_id"
	AttrLevel           = "asrprof.level"
	AttrRepeat          = "asrprof.repeat"
	AttrWarmup          = "asrprof.warmup"
	AttrRequestID       = "asrprof.request_id"
	AttrServerRequestID = "asrprof.server_request_id"
	AttrAudioSeconds    = "asr.audio_seconds"
	AttrOutcome         = "asrprof.outcome"
	AttrHTTPStatus      = "http.response.status_code"
)

// Tracer starts and ends the client spans of requests. It is safe for
// concurrent use.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   oteltrace.Tracer
	exp  *exporter
	prop propagation.TraceContext
}

// New returns a Tracer writing to w. resourceAttrs become the spans'
// resource attributes, except service.name, which is always
// spans.ClientService so that joins can tell client spans from the
// server's.
func New(w *spans.Writer, resourceAttrs map[string]string) *Tracer {
	kvs := make([]attribute.KeyValue, 0, len(resourceAttrs)+1)
	for k, v := range resourceAttrs {
		if k != "service.name" {
			kvs = append(kvs, attribute.String(k, v))
		}
	}
	kvs = append(kvs, attribute.String("service.name", spans.ClientService))
	exp := &exporter{w: w}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(kvs...)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp,
			sdktrace.WithBatchTimeout(FlushInterval),
			sdktrace.WithMaxExportBatchSize(512),
			sdktrace.WithMaxQueueSize(16384), // drops when full rather than block the driver
		),
	)
	return &Tracer{tp: tp, tr: tp.Tracer("github.com/asrprof/asrprof/trace/clientspan"), exp: exp}
}

// carrier takes the traceparent the propagator injects.
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == "traceparent" {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == "traceparent" {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent"} }

// Start begins the root span of rec's request now, sets rec.TraceID and
// returns the traceparent header to send. end must be called exactly once,
// with the finished record; it ends the span at rec.EndUnixNs.
func (t *Tracer) Start(ctx context.Context, rec *trace.Request) (traceparent string, end func(rec *trace.Request)) {
	start := time.Now()
	ctx, span := t.tr.Start(ctx, SpanRequest,
		oteltrace.WithSpanKind(oteltrace.SpanKindClient),
		oteltrace.WithTimestamp(start))
	rec.TraceID = span.SpanContext().TraceID().String()
	var c carrier
	t.prop.Inject(ctx, &c)
	return c.traceparent, func(rec *trace.Request) { t.end(ctx, span, start, rec) }
}

func (t *Tracer) end(ctx context.Context, span oteltrace.Span, start time.Time, rec *trace.Request) {
	outcome := rec.Status
	if rec.Status != trace.StatusOK {
		outcome = rec.ErrorKind
		if outcome == "" {
			outcome = trace.StatusFailed
		}
		msg := rec.Error
		if msg == "" {
			msg = outcome
		}
		span.SetStatus(codes.Error, msg)
	}
	attrs := [...]attribute.KeyValue{
		attribute.String(AttrSampleID, rec.SampleID),
		attribute.String(AttrLevel, rec.Level),
		attribute.Int(AttrRepeat, rec.Repeat),
		attribute.Bool(AttrWarmup, rec.Warmup),
		attribute.String(AttrRequestID, rec.RequestID),
		attribute.String(AttrServerRequestID, rec.ServerRequestID),
		attribute.Float64(AttrAudioSeconds, rec.AudioDurationS),
		attribute.String(AttrOutcome, outcome),
		attribute.Int(AttrHTTPStatus, rec.HTTPStatus),
	}
	n := len(attrs)
	if rec.HTTPStatus == 0 {
		n-- // no answer: no status attribute
	}
	span.SetAttributes(attrs[:n]...)

	sent := start
	if rec.StartUnixNs > 0 {
		sent = time.Unix(0, rec.StartUnixNs)
	}
	if rec.UploadDoneUnixNs > 0 {
		upDone := time.Unix(0, rec.UploadDoneUnixNs)
		t.child(ctx, SpanUpload, sent, upDone)
		if rec.FirstByteUnixNs > 0 {
			t.child(ctx, SpanWaitFirstByte, upDone, time.Unix(0, rec.FirstByteUnixNs))
		}
	}
	endAt := time.Now()
	if rec.EndUnixNs > 0 {
		endAt = time.Unix(0, rec.EndUnixNs)
	}
	span.End(oteltrace.WithTimestamp(endAt))
}

func (t *Tracer) child(ctx context.Context, name string, from, to time.Time) {
	_, s := t.tr.Start(ctx, name,
		oteltrace.WithSpanKind(oteltrace.SpanKindInternal),
		oteltrace.WithTimestamp(from))
	s.End(oteltrace.WithTimestamp(to))
}

// Flush writes every finished span now, waiting until ctx is done.
func (t *Tracer) Flush(ctx context.Context) error {
	return errors.Join(t.tp.ForceFlush(ctx), t.exp.err())
}

// Shutdown flushes and stops the Tracer; spans started later are not
// recorded. It returns the first error writing spans, if any.
func (t *Tracer) Shutdown(ctx context.Context) error {
	return errors.Join(t.tp.Shutdown(ctx), t.exp.err())
}

// exporter writes batches of finished spans to the span store, one record
// per batch.
type exporter struct {
	w *spans.Writer

	mu       sync.Mutex
	firstErr error
}

func (e *exporter) ExportSpans(ctx context.Context, ss []sdktrace.ReadOnlySpan) error {
	if len(ss) == 0 {
		return nil
	}
	if err := e.w.Write(toTraces(ss)); err != nil {
		e.mu.Lock()
		if e.firstErr == nil {
			e.firstErr = err
		}
		e.mu.Unlock()
		return err
	}
	return nil
}

func (e *exporter) Shutdown(ctx context.Context) error { return nil }

func (e *exporter) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.firstErr != nil {
		return errors.New("writing client spans: " + e.firstErr.Error())
	}
	return nil
}
