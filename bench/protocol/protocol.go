package protocol

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/model"
)

// Job is one request to send. The caller (the load driver) fills every field.
type Job struct {
	RequestID   string // sent as X-Request-Id (omitted if empty)
	TraceParent string // W3C traceparent header value, sent as-is (omitted if empty)
	SampleID    string // the caller's sample identifier; not sent
	FileName    string // e.g. "utt1.wav"
	ContentType string // e.g. "audio/wav"; "application/octet-stream" if empty
	Audio       []byte // the file bytes, sent as the multipart `file` part; not modified
	Model       string // multipart `model` (omitted if empty)
	Language    string // multipart `language` (omitted if empty)
	// Upload is the request body that this client's Prepare built for the
	// same sample fields (FileName, ContentType, Audio, Model, Language),
	// sent as-is; nil (or an Upload of another client) builds the body for
	// this request.
	Upload *Upload
}

// TraceParent is the sampled W3C traceparent of trace id b[:16] and span
// id b[16:] ("00-<trace>-<span>-01"), and the trace id in hex.
func TraceParent(b [24]byte) (traceparent, traceID string) {
	tid := hex.EncodeToString(b[:16])
	return "00-" + tid + "-" + hex.EncodeToString(b[16:]) + "-01", tid
}

// Tracer starts the client-side trace of one request, for the driver and
// the proxy: it sets rec.TraceID and returns the traceparent header to
// send, and a function that ends the trace once rec is complete (called
// exactly once). It is safe for concurrent use; trace/clientspan
// implements it.
type Tracer interface {
	Start(ctx context.Context, rec *model.Request) (traceparent string, end func(rec *model.Request))
}

// setHeaders sets extra's headers in h, then job's X-Request-Id and
// traceparent, each when set.
func (job *Job) setHeaders(h http.Header, extra http.Header) {
	maps.Copy(h, extra)
	if job.RequestID != "" {
		h["X-Request-Id"] = []string{job.RequestID}
	}
	if job.TraceParent != "" {
		h["Traceparent"] = []string{job.TraceParent}
	}
}

// Upload is a request body prepared once per sample ([Preparer]) and sent
// by every request of that sample: one contiguous byte slice, shared by
// those requests, never copied or rebuilt for one, that nobody modifies.
// It is sent as a bytes.Reader, which net/http writes together with the
// headers (through the transport's write buffer: one write(2) when the
// buffer holds it, see WriteBufferFor). It is safe for concurrent use.
type Upload struct {
	owner any    // the client that built it
	body  []byte // the whole request body
	audio int    // where the audio bytes start in body
	n     int    // their length
}

// Audio is the job's audio inside the body: the same bytes, so that a
// caller may keep this slice instead of its own copy.
func (u *Upload) Audio() []byte { return u.body[u.audio : u.audio+u.n : u.audio+u.n] }

// Preparer is implemented by clients whose request body depends only on a
// Job's sample fields (the "openai" and "openai-stream" clients): Prepare
// builds it once (a copy of the audio with the multipart parts around it),
// for the caller to set as Job.Upload on every request of that sample. It
// is safe for concurrent use.
type Preparer interface {
	Prepare(job *Job) *Upload
}

// Result is what happened to one Job. Times are time.Now readings, so they
// carry the monotonic clock; a time that was never reached is the zero time.
type Result struct {
	Text            string
	HTTPStatus      int         // 0 if no response arrived
	ServerRequestID string      // the response's X-Request-Id header, if any
	Connected       time.Time   // a new connection established for it (httptrace.GotConn, not reused); zero when one was reused
	UploadDone      time.Time   // request fully written (httptrace.WroteRequest)
	FirstByte       time.Time   // first response byte (httptrace.GotFirstResponseByte; through an H1Transport on Linux, the kernel's receive time)
	FirstToken      time.Time   // streaming: first non-empty delta; non-streaming: zero
	ChunkTimes      []time.Time // streaming: arrival of each non-empty delta
	End             time.Time   // when Do finished with the response; always set
	Err             error       // nil on success
	ErrKind         string      // one of the Kind constants; "" on success
	// Realtime is set by the realtime (WebSocket) protocols: the session's
	// pacing, update and final timings. Nil for file requests.
	Realtime *RealtimeResult
}

// Failure kinds, the values of Result.ErrKind: the record's failure kinds
// (model.Fail*), which they become.
const (
	KindHTTP4xx     = model.FailHTTP4xx     // the server answered 4xx
	KindHTTP5xx     = model.FailHTTP5xx     // the server answered 5xx
	KindTimeout     = model.FailTimeout     // a context deadline or the http.Client timeout expired
	KindConnection  = model.FailConnection  // refused, reset or closed connection
	KindMalformed   = model.FailMalformed   // a 2xx response we could not read as the protocol says
	KindServerError = model.FailServerError // the server reported an error inside a 2xx response (SSE error event)
	KindCanceled    = model.FailCanceled    // the caller's context was canceled
	KindOther       = model.FailOther       // anything else
)

// TranscriptionsPath is the OpenAI API's transcription endpoint, which
// vLLM, SGLang and most Whisper servers serve.
const TranscriptionsPath = "/v1/audio/transcriptions"

// Client sends one Job.
type Client interface {
	// Do sends job and waits for the whole response or for ctx to end.
	// It never panics and always fills Result.End; on failure it sets
	// Result.Err and Result.ErrKind and keeps what it recorded before the
	// failure (status, partial text, timings). It is safe for concurrent
	// use; job is only read.
	Do(ctx context.Context, job *Job) Result
}

// Options configure a Client.
type Options struct {
	// Target is the server's base URL, e.g. http://127.0.0.1:8000.
	Target string
	// Stream asks for a Server-Sent Events response (stream=true).
	Stream bool
	// HTTPClient sends the requests; if nil, a client on NewTransport(64)
	// without a timeout is used.
	HTTPClient *http.Client
	// ResponseFormat is the multipart response_format: "json" (default),
	// "text" or "verbose_json". Non-streaming only; with "text" the body
	// is the transcript.
	ResponseFormat string

	// The realtime knobs, used by "funasr-ws" and "openai-realtime" only
	// (see docs/REALTIME.md).

	// ChunkMs is the audio per frame in milliseconds (default 100).
	ChunkMs int
	// Pace is PaceRealtime (default: frames leave at the audio's speed)
	// or PaceNone (as fast as the connection takes them).
	Pace string
	// Loops repeats the audio within one session (default 1).
	Loops int
	// Dialect picks the openai-realtime variant: DialectOpenAI (default),
	// DialectVLLM or DialectSGLangOmni.
	Dialect string
	// Hotwords are sent to a funasr-ws server as HOTWORDS:a,b (omitted
	// when empty); other protocols ignore them.
	Hotwords []string

	// Path is the transcription endpoint of the multipart protocols
	// (default TranscriptionsPath); the WebSocket ones take theirs from
	// Target.
	Path string

	// Header holds headers sent with every request and WebSocket upgrade
	// besides the client's own (an API key, a gateway's routing header;
	// option.ParseHeader reads them from flags). The client's own headers
	// win over them.
	Header http.Header
}

// StatusError is Result.Err for a 4xx or 5xx answer.
type StatusError struct {
	StatusCode int
	Body       string // at most the first 200 bytes of the body; for a WebSocket, what was refused
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("http status %d", e.StatusCode)
	}
	return fmt.Sprintf("http status %d: %s", e.StatusCode, e.Body)
}

// StatusKind is the failure kind of an HTTP status ≥ 400: 5xx or 4xx.
func StatusKind(code int) string {
	if code >= 500 {
		return KindHTTP5xx
	}
	return KindHTTP4xx
}

// Names lists the protocol names New accepts.
func Names() []string {
	return []string{"openai", "openai-stream", "funasr-ws", "openai-realtime"}
}

// IsRealtime reports whether the named protocol streams audio over a
// WebSocket session (and fills Result.Realtime).
func IsRealtime(name string) bool { return name == "funasr-ws" || name == "openai-realtime" }

// New returns the client for the named protocol. "openai" and
// "openai-stream" set opts.Stream to false and true respectively;
// "funasr-ws" and "openai-realtime" are the WebSocket session clients
// ([NewFunASR], [NewRealtime]).
func New(name string, opts Options) (Client, error) {
	switch name {
	case "openai":
		opts.Stream = false
		return NewOpenAI(opts)
	case "openai-stream":
		opts.Stream = true
		return NewOpenAI(opts)
	case "funasr-ws":
		return NewFunASR(opts)
	case "openai-realtime":
		return NewRealtime(opts)
	}
	return nil, fmt.Errorf("unknown protocol %q (known: %s)", name, strings.Join(Names(), ", "))
}

// defaultConns is the idle keep-alive connections per host a transport
// keeps unless told otherwise.
const defaultConns = 64

// newDialer is the transports' dialer: a 5 s timeout, 30 s keep-alive,
// and on Linux TCP_NOTSENT_LOWAT (sendLowat): a write returns once what
// the kernel holds unsent is below it, so an upload is "done" when the
// server's side has taken all but that much, not when the client's send
// buffer (megabytes on loopback) swallowed the body. A server that reads
// its uploads slowly then shows as upload time on the client's clock.
func newDialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: lowatControl}
}

// sendLowat is the unsent bytes a connection may hold before a write
// blocks (TCP_NOTSENT_LOWAT): 16 KB, the value HTTP/2 servers use for
// latency; throughput is kept by the in-flight window, which it does not
// limit.
const sendLowat = 16 << 10

// NewTransport returns an HTTP/1.1 transport tuned for load generation:
// up to maxConns idle keep-alive connections per host (64 if maxConns <= 0),
// no limit on open connections, no HTTP/2, no compression, no proxy, a 5 s
// dial timeout and large write buffers for audio uploads.
func NewTransport(maxConns int) *http.Transport {
	var protos http.Protocols
	protos.SetHTTP1(true) // HTTP/1.1 only, over TLS too
	return &http.Transport{
		DialContext:         newDialer().DialContext,
		MaxIdleConns:        0, // no global limit; the per-host one applies
		MaxIdleConnsPerHost: cmp.Or(max(maxConns, 0), defaultConns),
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
		Protocols:           &protos,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      16 << 10,
	}
}

// WriteBufferFor is the transport write buffer (http.Transport's
// WriteBufferSize) that holds a whole request whose upload is maxUpload
// bytes, with room for its headers and multipart parts, between 64 KiB and
// 1 MiB. A request that fits is copied into the buffer and written in one
// write(2); a larger one goes through net's generic copy, which allocates
// a 32 KiB buffer per request and writes 32 KiB at a time.
func WriteBufferFor(maxUpload int) int {
	return min(max(maxUpload+16<<10, 64<<10), 1<<20)
}

// ErrorKind is the failure kind of a transport or body-read error (one of
// the Kind constants, "" for nil); ctx, the request's context, decides
// between a timeout and a cancellation. The clients and the capturing proxy
// (for its upstream failures) classify with it.
func ErrorKind(ctx context.Context, err error) string {
	if err == nil {
		return ""
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return KindTimeout
		}
		return KindCanceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return KindTimeout
	}
	if errors.Is(err, context.Canceled) {
		return KindCanceled
	}
	connErrs := []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed}
	if _, ok := errors.AsType[*net.OpError](err); ok || slices.ContainsFunc(connErrs, func(target error) bool { return errors.Is(err, target) }) {
		return KindConnection
	}
	return KindOther
}
