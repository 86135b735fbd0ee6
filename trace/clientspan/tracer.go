package clientspan

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

// FlushInterval is the longest a finished span waits before it is written.
const FlushInterval = 500 * time.Millisecond

// Span and attribute names.
const (
	SpanRequest       = "asr.request"
	SpanUpload        = "upload"
	SpanWaitFirstByte = "wait_first_byte"

	AttrOutcome    = "asrprof.outcome"
	AttrHTTPStatus = "http.response.status_code"
)

// spanFields are the request's fields that the request span holds, each
// as the attribute its tag names (model.Request's span:"..."), in the
// record's order.
var spanFields = slices.DeleteFunc(slices.Clone(model.RequestFields), func(f model.Field) bool { return f.Span == "" })

// AttrLevel is the attribute of the request's level.
var AttrLevel = spanFields[slices.IndexFunc(spanFields, func(f model.Field) bool { return f.GoName == "Level" })].Span

// ScopeName is the instrumentation scope of the client spans.
const ScopeName = "github.com/asrprof/asrprof/trace/clientspan"

const (
	batchSize = 512   // spans that wake the writer before FlushInterval
	maxQueue  = 16384 // finished spans waiting; more are dropped and counted
)

// Tracer starts and ends the client spans of requests. It is safe for
// concurrent use.
//
// It builds OTLP spans itself: a request's three spans are three small
// records appended to a queue under a lock, converted to pdata and written
// by one goroutine in batches (at least every FlushInterval), as the
// OpenTelemetry SDK's batch span processor would, at a fraction of its
// cost per request (BenchmarkStartEnd).
type Tracer struct {
	w        *spans.Writer
	resource []attribute.KeyValue // sorted by key, service.name included

	mu       sync.Mutex
	queue    []record
	dropped  int64
	closed   bool
	firstErr error

	writeMu sync.Mutex // one batch written at a time, in order
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

// record is one finished span.
type record struct {
	traceID    [16]byte
	spanID     [8]byte
	parentID   [8]byte // zero for the root
	name       string
	kind       ptrace.SpanKind // CLIENT for the root, INTERNAL otherwise
	start, end int64
	errMsg     string // status ERROR with this message when failed ("" when ok: a failure always has one)
	attrs      []attribute.KeyValue
}

// New returns a Tracer writing to w. resourceAttrs become the spans'
// resource attributes, except service.name, which is always
// spans.ClientService so that joins can tell client spans from the
// server's.
//
// As with the OpenTelemetry SDK, $OTEL_RESOURCE_ATTRIBUTES adds resource
// attributes that resourceAttrs do not set.
func New(w *spans.Writer, resourceAttrs map[string]string) *Tracer {
	res := resource.Environment().Attributes()
	for k, v := range resourceAttrs {
		res = append(res, attribute.String(k, v))
	}
	res = append(res, attribute.String("service.name", spans.ClientService))
	set := attribute.NewSet(res...) // sorted by key, the last value of a key kept
	t := &Tracer{w: w, resource: set.ToSlice(), wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go t.loop()
	return t
}

// span is a started request: what end needs.
type span struct {
	t       *Tracer
	traceID [16]byte
	spanID  [8]byte
	start   time.Time
}

// Start begins the root span of rec's request now, sets rec.TraceID and
// returns the traceparent header to send. end must be called exactly once,
// with the finished record; it ends the span at rec.EndUnixNs.
func (t *Tracer) Start(ctx context.Context, rec *model.Request) (traceparent string, end func(rec *model.Request)) {
	s := &span{t: t, start: time.Now()}
	randomID(s.traceID[:])
	randomID(s.spanID[:])
	var b [55]byte // 00-<32 hex>-<16 hex>-01
	copy(b[:], "00-")
	hex.Encode(b[3:35], s.traceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], s.spanID[:])
	copy(b[52:], "-01")
	rec.TraceID = string(b[3:35])
	return string(b[:]), s.end
}

// randomID fills b with random bytes, never all zero (an invalid id).
func randomID(b []byte) {
	for {
		for i := 0; i < len(b); i += 8 { // ids are 8 or 16 bytes
			binary.LittleEndian.PutUint64(b[i:], mrand.Uint64())
		}
		if slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
			return
		}
	}
}

func (s *span) end(rec *model.Request) {
	root := record{traceID: s.traceID, spanID: s.spanID, name: SpanRequest, kind: ptrace.SpanKindClient,
		start: s.start.UnixNano()}
	outcome := rec.Status
	if rec.Status != model.StatusOK {
		outcome = cmp.Or(rec.ErrorKind, model.StatusFailed)
		root.errMsg = cmp.Or(rec.Error, outcome)
	}
	root.attrs = make([]attribute.KeyValue, len(spanFields), len(spanFields)+2)
	v := reflect.ValueOf(rec).Elem()
	for i, f := range spanFields {
		switch x := v.Field(f.Index); f.Kind {
		case model.KindString:
			root.attrs[i] = attribute.String(f.Span, x.String())
		case model.KindInt, model.KindInt64:
			root.attrs[i] = attribute.Int64(f.Span, x.Int())
		case model.KindFloat:
			root.attrs[i] = attribute.Float64(f.Span, x.Float())
		case model.KindBool:
			root.attrs[i] = attribute.Bool(f.Span, x.Bool())
		default:
			panic("clientspan: no span attribute for " + f.Name)
		}
	}
	root.attrs = append(root.attrs, attribute.String(AttrOutcome, outcome))
	if rec.HTTPStatus != 0 { // no answer: no status attribute
		root.attrs = append(root.attrs, attribute.Int(AttrHTTPStatus, rec.HTTPStatus))
	}

	out := make([]record, 0, 3) // children first, as they ended first
	if rec.UploadDoneUnixNs > 0 {
		out = append(out, s.child(SpanUpload, cmp.Or(max(rec.StartUnixNs, 0), root.start), rec.UploadDoneUnixNs))
		if rec.FirstByteUnixNs > 0 {
			out = append(out, s.child(SpanWaitFirstByte, rec.UploadDoneUnixNs, rec.FirstByteUnixNs))
		}
	}
	root.end = cmp.Or(max(rec.EndUnixNs, 0), time.Now().UnixNano())
	s.t.add(append(out, root))
}

func (s *span) child(name string, from, to int64) record {
	r := record{traceID: s.traceID, parentID: s.spanID, name: name, kind: ptrace.SpanKindInternal, start: from, end: to}
	randomID(r.spanID[:])
	return r
}

// add queues finished spans; when the queue is full they are dropped and
// counted (the driver never waits for the span store).
func (t *Tracer) add(rs []record) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if len(t.queue)+len(rs) > maxQueue {
		t.dropped += int64(len(rs))
		t.mu.Unlock()
		return
	}
	t.queue = append(t.queue, rs...)
	full := len(t.queue) >= batchSize
	t.mu.Unlock()
	if full {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// loop writes the queue every FlushInterval, or sooner when a batch is full.
func (t *Tracer) loop() {
	defer close(t.stopped)
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		case <-t.wake:
		}
		t.write()
	}
}

// write takes the queue and writes it, batchSize spans a record.
func (t *Tracer) write() {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.Lock()
	q := t.queue
	t.queue = make([]record, 0, max(batchSize, len(q)))
	t.mu.Unlock()
	for batch := range slices.Chunk(q, batchSize) {
		if err := t.w.Write(toTraces(t.resource, batch)); err != nil {
			t.mu.Lock()
			t.firstErr = cmp.Or(t.firstErr, err) // the first kept
			t.mu.Unlock()
		}
	}
}

// Shutdown flushes and stops the Tracer; spans started later are not
// recorded. It returns the first error writing spans, if any, and says how
// many spans were dropped because the queue was full.
func (t *Tracer) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.mu.Unlock()
	if !already {
		close(t.done)
		<-t.stopped
	}
	t.write()
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	if t.firstErr != nil {
		errs = append(errs, errors.New("writing client spans: "+t.firstErr.Error()))
	}
	if t.dropped > 0 {
		errs = append(errs, fmt.Errorf("%d client spans dropped: more than %d waited to be written", t.dropped, maxQueue))
	}
	return errors.Join(errs...)
}
