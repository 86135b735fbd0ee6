package protocol

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds a non-streaming response body.
const maxBody = 16 << 20

// openAI speaks the OpenAI-compatible transcription API.
type openAI struct {
	hc          *http.Client
	h1          bool        // hc sends through an H1Transport: bodies as segments
	header      http.Header // Options.Header
	url         string
	stream      bool
	textFormat  bool   // response_format=text: the body is the transcript
	boundary    string // multipart boundary, fixed for the client
	contentType string // multipart/form-data; boundary=...
	accept      string
	fixedFields []byte // response_format and stream parts, same for every request
	suffix      []byte // closing boundary after the audio
}

// NewOpenAI returns a client for the OpenAI-compatible
// POST {target}/v1/audio/transcriptions endpoint (or opts.Path): protocol "openai" when
// opts.Stream is false, "openai-stream" when it is true.
func NewOpenAI(opts Options) (Client, error) {
	u, err := url.Parse(opts.Target)
	if err != nil {
		return nil, fmt.Errorf("target %q: want an http or https base URL: %w", opts.Target, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target %q: want an http or https base URL such as http://127.0.0.1:8000", opts.Target)
	}
	format := cmp.Or(opts.ResponseFormat, "json")
	if format != "json" && format != "text" && format != "verbose_json" {
		return nil, fmt.Errorf("response format %q: want json, text or verbose_json", format)
	}
	var raw [15]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	c := &openAI{
		hc:         opts.HTTPClient,
		header:     opts.Header,
		url:        strings.TrimRight(opts.Target, "/") + cmp.Or(opts.Path, TranscriptionsPath),
		stream:     opts.Stream,
		textFormat: format == "text" && !opts.Stream,
		boundary:   "asrprof" + hex.EncodeToString(raw[:]),
		accept:     "application/json",
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: NewH1Transport(defaultConns)}
	}
	_, c.h1 = c.hc.Transport.(*H1Transport)
	c.contentType = "multipart/form-data; boundary=" + c.boundary
	c.fixedFields = c.appendField(nil, "response_format", format)
	if opts.Stream {
		c.accept = "text/event-stream"
		c.fixedFields = c.appendField(c.fixedFields, "stream", "true")
	} else if c.textFormat {
		c.accept = "text/plain"
	}
	c.suffix = []byte("\r\n--" + c.boundary + "--\r\n")
	return c, nil
}

// appendField appends one simple form part.
func (c *openAI) appendField(b []byte, name, value string) []byte {
	return appendAll(b, "--", c.boundary, "\r\nContent-Disposition: form-data; name=\"", name, "\"\r\n\r\n", value, "\r\n")
}

// appendAll appends each of ss to b.
func appendAll(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = append(b, s...)
	}
	return b
}

// Prepare builds job's multipart body in one slice: model, language, the
// fixed fields and the file part's header, then the audio, then the
// closing boundary. Do sends it for every request that carries it as
// Job.Upload.
func (c *openAI) Prepare(job *Job) *Upload {
	prefix := c.prefix(job)
	body := slices.Concat(prefix, job.Audio, c.suffix)
	return &Upload{owner: c, body: body, audio: len(prefix), n: len(job.Audio)}
}

// prefix returns every part before the audio bytes: model, language, the
// fixed fields and the file part's header.
func (c *openAI) prefix(job *Job) []byte {
	ct := cmp.Or(job.ContentType, "application/octet-stream")
	name := quoteEscape(job.FileName)
	n := len(c.fixedFields) + len(name) + len(ct) + len(c.boundary) + 128
	if job.Model != "" {
		n += len(job.Model) + len(c.boundary) + 64
	}
	if job.Language != "" {
		n += len(job.Language) + len(c.boundary) + 64
	}
	b := make([]byte, 0, n)
	if job.Model != "" {
		b = c.appendField(b, "model", job.Model)
	}
	if job.Language != "" {
		b = c.appendField(b, "language", job.Language)
	}
	b = append(b, c.fixedFields...)
	return appendAll(b, "--", c.boundary, "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"", name, "\"\r\nContent-Type: ", ct, "\r\n\r\n")
}

// quoteEscape makes s safe inside a quoted header parameter the way
// mime/multipart does (backslash before '\\' and '"'); CR and LF, which
// would end the header, become spaces.
var quoteEscape = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", " ", "\n", " ").Replace

// parts is job's body as a partsBody sends it: a prepared Upload of c as
// one part (through an H1Transport: it writes that with the head in one
// writev(2)), else the prefix, the audio (not copied) and the suffix.
func (c *openAI) parts(job *Job) [3][]byte {
	if up := job.Upload; up != nil && up.owner == c {
		return [3][]byte{up.body}
	}
	return [3][]byte{c.prefix(job), job.Audio, c.suffix}
}

// partsBody is a request body made of byte slices sent in order without
// copying them together: net.Buffers, whose WriteTo hands each slice to
// the connection directly, where io.MultiReader's WriteTo and io.Copy each
// allocate a 32 KiB buffer per request (measured: 64 KiB of the 76 KiB
// allocated per 100 KB request).
//
// It is the body of a job without a prepared Upload (so that such a job's
// audio is not copied either), and, through an H1Transport, of a prepared
// one too (one part); H1Transport writes the parts as they are.
type partsBody struct{ net.Buffers }

func (b *partsBody) Close() error { return nil }

// Do's httptrace callbacks run on the transport's goroutines and may fire
// after RoundTrip has returned: they keep their times in atomic pointers.
func (c *openAI) Do(ctx context.Context, job *Job) (res Result) {
	var wrote, firstByte, connected atomic.Pointer[time.Time]
	var stamp atomic.Int64
	defer func() {
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("protocol: internal error: %v", p)
			res.ErrKind = KindOther
		}
		if res.End.IsZero() {
			res.End = time.Now()
		}
		res.UploadDone = *cmp.Or(wrote.Load(), new(time.Time)) // the zero time when never stored
		res.Connected = *cmp.Or(connected.Load(), new(time.Time))
		res.FirstByte = *cmp.Or(firstByte.Load(), new(time.Time))
		if ns := stamp.Load(); ns > 0 && !res.FirstByte.IsZero() && ns <= res.FirstByte.UnixNano() {
			// the kernel's, not this goroutine's; not before the upload
			// done read (late, where the answer came first)
			res.FirstByte = time.Unix(0, max(ns, res.UploadDone.UnixNano()))
		}
	}()
	if job == nil {
		res.Err, res.ErrKind = errors.New("nil job"), KindOther
		return res
	}
	tctx := httptrace.WithClientTrace(context.WithValue(ctx, stampKey{}, &stamp), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(new(time.Now())) },
		GotConn: func(c httptrace.GotConnInfo) {
			if !c.Reused {
				connected.Store(new(time.Now()))
			}
		},
		GotFirstResponseByte: func() { firstByte.CompareAndSwap(nil, new(time.Now())) },
	})
	var req *http.Request
	var err error
	if up := job.Upload; up != nil && up.owner == c && !c.h1 {
		// A bytes.Reader: net/http sets ContentLength and GetBody (which
		// lets the transport resend on a keep-alive connection that the
		// server had closed before anything was written) and writes the
		// body with the headers.
		req, err = http.NewRequestWithContext(tctx, http.MethodPost, c.url, bytes.NewReader(up.body))
	} else {
		parts := c.parts(job)
		req, err = http.NewRequestWithContext(tctx, http.MethodPost, c.url, nil)
		if err == nil {
			req.Body = &partsBody{net.Buffers{parts[0], parts[1], parts[2]}}
			req.GetBody = func() (io.ReadCloser, error) { return &partsBody{net.Buffers{parts[0], parts[1], parts[2]}}, nil }
			req.ContentLength = int64(len(parts[0]) + len(parts[1]) + len(parts[2]))
		}
	}
	if err != nil {
		res.Err, res.ErrKind = fmt.Errorf("building request: %w", err), KindOther
		return res
	}
	job.setHeaders(req.Header, c.header)
	req.Header["Content-Type"] = []string{c.contentType}
	req.Header["Accept"] = []string{c.accept}

	resp, err := c.hc.Do(req)
	if err != nil {
		res.Err, res.ErrKind = err, ErrorKind(ctx, err)
		return res
	}
	defer drainClose(resp.Body)
	ReadAnswer(ctx, resp, Answer{Stream: c.stream, Text: c.textFormat}, &res)
	return res
}

// Answer says how to read a transcription response: as an SSE stream
// (either dialect), or, when not streaming, as the transcript itself (Text:
// response_format=text) or as JSON with a "text" field. A text/plain
// response is read as the transcript whatever Text says.
type Answer struct {
	Stream bool
	Text   bool
}

// ReadAnswer reads resp, a transcription response, into res: its status and
// X-Request-Id, the transcript, for a stream the time of each non-empty
// delta, and res.End when the body has been read; on failure res.Err and
// res.ErrKind (a 4xx/5xx body is read up to 200 bytes). It is the one
// reader of answers: the openai clients and the capturing proxy (which
// hands it the upstream body as it copies it to its client) both use it.
// The caller closes resp.Body.
func ReadAnswer(ctx context.Context, resp *http.Response, a Answer, res *Result) {
	res.HTTPStatus = resp.StatusCode
	res.ServerRequestID = resp.Header.Get("X-Request-Id")

	switch code := resp.StatusCode; {
	case code >= 400:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		res.End = time.Now()
		res.Err, res.ErrKind = &StatusError{StatusCode: code, Body: excerpt(b)}, StatusKind(code)
		return
	case code < 200 || code >= 300:
		res.End = time.Now()
		res.Err, res.ErrKind = fmt.Errorf("unexpected http status %d", code), KindOther
		return
	}

	if a.Stream {
		out := decodeStream(resp.Body, time.Now)
		res.End = time.Now()
		res.Text, res.FirstToken, res.ChunkTimes = out.text, out.firstToken, out.chunks
		if out.err != nil {
			res.Err, res.ErrKind = out.err, cmp.Or(out.kind, ErrorKind(ctx, out.err))
			if mt := mediaType(resp.Header); out.kind == KindMalformed && mt != "text/event-stream" {
				res.Err = fmt.Errorf("%w (response content type %q, not text/event-stream)", out.err, mt)
			}
		}
		return
	}

	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	res.End = time.Now()
	if err != nil {
		res.Err, res.ErrKind = fmt.Errorf("reading response: %w", err), ErrorKind(ctx, err)
		return
	}
	if len(b) > maxBody {
		res.Err, res.ErrKind = fmt.Errorf("response body larger than %d bytes", maxBody), KindMalformed
		return
	}
	if a.Text || mediaType(resp.Header) == "text/plain" {
		res.Text = strings.TrimRight(string(b), "\r\n")
		return
	}
	var v struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		res.Err, res.ErrKind = fmt.Errorf("decoding response: %w (body %q)", err, excerpt(b)), KindMalformed
		return
	}
	if v.Text == nil {
		res.Err, res.ErrKind = fmt.Errorf("response has no text field (body %q)", excerpt(b)), KindMalformed
		return
	}
	res.Text = *v.Text
}

// IsEventStream tells whether h says text/event-stream.
func IsEventStream(h http.Header) bool { return mediaType(h) == "text/event-stream" }

func mediaType(h http.Header) string {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt
}

// drainClose reads what is left of a body (up to 256 KiB) so the
// connection can be reused, then closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 256<<10)
	_ = body.Close()
}
