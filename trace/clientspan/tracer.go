package clientspan

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

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
	resource []kv // sorted by key, service.name included

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

// kv is one attribute: a string, int, float or bool value.
type kv struct {
	key  string
	kind byte // 's', 'i', 'f', 'b'
	s    string
	i    int64
	f    float64
}

// record is one finished span.
type record struct {
	traceID    [16]byte
	spanID     [8]byte
	parentID   [8]byte // zero for the root
	name       string
	client     bool // kind CLIENT (the root); INTERNAL otherwise
	start, end int64
	errMsg     string // status ERROR with this message when failed
	failed     bool
	attrs      []kv
}

// New returns a Tracer writing to w. resourceAttrs become the spans'
// resource attributes, except service.name, which is always
// spans.ClientService so that joins can tell client spans from the
// server's.
//
// As with the OpenTelemetry SDK, $OTEL_RESOURCE_ATTRIBUTES adds resource
// attributes that resourceAttrs do not set.
func New(w *spans.Writer, resourceAttrs map[string]string) *Tracer {
	set := map[string]kv{}
	for _, a := range resource.Environment().Attributes() {
		set[string(a.Key)] = fromAttr(a)
	}
	for k, v := range resourceAttrs {
		set[k] = kv{key: k, kind: 's', s: v}
	}
	set["service.name"] = kv{key: "service.name", kind: 's', s: spans.ClientService}
	res := slices.Collect(maps.Values(set))
	slices.SortFunc(res, func(a, b kv) int { return cmp.Compare(a.key, b.key) })
	t := &Tracer{w: w, resource: res, wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
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
		for i := 0; i < len(b); i += 8 {
			v := mrand.Uint64()
			for j := i; j < i+8 && j < len(b); j++ {
				b[j] = byte(v)
				v >>= 8
			}
		}
		if slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
			return
		}
	}
}

func (s *span) end(rec *model.Request) {
	root := record{traceID: s.traceID, spanID: s.spanID, name: SpanRequest, client: true, start: s.start.UnixNano()}
	outcome := rec.Status
	if rec.Status != model.StatusOK {
		outcome = cmp.Or(rec.ErrorKind, model.StatusFailed)
		root.failed, root.errMsg = true, cmp.Or(rec.Error, outcome)
	}
	attrs := make([]kv, 0, len(spanFields)+2)
	v := reflect.ValueOf(rec).Elem()
	for _, f := range spanFields {
		x, a := v.Field(f.Index), kv{key: f.Span}
		switch f.Kind {
		case model.KindString:
			a.kind, a.s = 's', x.String()
		case model.KindInt, model.KindInt64:
			a.kind, a.i = 'i', x.Int()
		case model.KindFloat:
			a.kind, a.f = 'f', x.Float()
		case model.KindBool:
			a.kind, a.i = 'b', b2i(x.Bool())
		default:
			panic("clientspan: no span attribute for " + f.Name)
		}
		attrs = append(attrs, a)
	}
	attrs = append(attrs, kv{key: AttrOutcome, kind: 's', s: outcome})
	if rec.HTTPStatus != 0 { // no answer: no status attribute
		attrs = append(attrs, kv{key: AttrHTTPStatus, kind: 'i', i: int64(rec.HTTPStatus)})
	}
	root.attrs = attrs

	var out [3]record
	n := 0
	sent := root.start
	if rec.StartUnixNs > 0 {
		sent = rec.StartUnixNs
	}
	if rec.UploadDoneUnixNs > 0 {
		out[n] = s.child(SpanUpload, sent, rec.UploadDoneUnixNs)
		n++
		if rec.FirstByteUnixNs > 0 {
			out[n] = s.child(SpanWaitFirstByte, rec.UploadDoneUnixNs, rec.FirstByteUnixNs)
			n++
		}
	}
	root.end = time.Now().UnixNano()
	if rec.EndUnixNs > 0 {
		root.end = rec.EndUnixNs
	}
	out[n] = root // children first, as they ended first
	n++
	s.t.add(out[:n])
}

func (s *span) child(name string, from, to int64) record {
	r := record{traceID: s.traceID, parentID: s.spanID, name: name, start: from, end: to}
	randomID(r.spanID[:])
	return r
}

// fromAttr is an OpenTelemetry attribute as a kv (other types as text).
func fromAttr(a attribute.KeyValue) kv {
	k := string(a.Key)
	switch a.Value.Type() {
	case attribute.BOOL:
		return kv{key: k, kind: 'b', i: b2i(a.Value.AsBool())}
	case attribute.INT64:
		return kv{key: k, kind: 'i', i: a.Value.AsInt64()}
	case attribute.FLOAT64:
		return kv{key: k, kind: 'f', f: a.Value.AsFloat64()}
	}
	return kv{key: k, kind: 's', s: a.Value.Emit()}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
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
	for len(q) > 0 {
		k := min(batchSize, len(q))
		if err := t.w.Write(toTraces(t.resource, q[:k])); err != nil {
			t.mu.Lock()
			if t.firstErr == nil {
				t.firstErr = err
			}
			t.mu.Unlock()
		}
		q = q[k:]
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
	dropped := t.dropped
	t.mu.Unlock()
	var derr error
	if dropped > 0 {
		derr = fmt.Errorf("%d client spans dropped: more than %d waited to be written", dropped, maxQueue)
	}
	return errors.Join(t.err(), derr)
}

func (t *Tracer) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstErr != nil {
		return errors.New("writing client spans: " + t.firstErr.Error())
	}
	return nil
}
