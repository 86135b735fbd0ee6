// Package proxy is a capturing reverse proxy: it stands in front of an ASR
// server while a user's own benchmark client sends the load, forwards every
// request unchanged (but for the trace headers it adds when missing), and
// makes a model.Request of every transcription upload that passes, timed
// on its own clock. The answer is read by protocol.ReadAnswer as it is
// copied to the client, the record is built by bench/record, the audio
// comes out of the multipart upload (bench/audio) and is matched to a
// dataset reference by its content (Index). InferLevels finds the sweep's
// levels afterwards, from pauses and from the concurrency the proxy saw
// (docs/PROXY.md).
package proxy

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/record"
	"github.com/asrprof/asrprof/model"
)

// Unassigned is the level of a record until InferLevels names its phase
// (what requests.jsonl holds for a capture that was killed).
const Unassigned = "proxy"

// DefaultMaxUpload bounds the part of an upload the proxy keeps to find
// its audio; a larger upload is forwarded whole but recorded without audio.
const DefaultMaxUpload = 64 << 20

// Config configures a Proxy.
type Config struct {
	// Target is the server's base URL, e.g. http://127.0.0.1:8000.
	Target string
	// Transport sends upstream; nil: protocol.NewTransport(256).
	Transport http.RoundTripper
	// Tracer makes the client span of a request that came without a
	// traceparent; nil: a random traceparent and no span.
	Tracer protocol.Tracer
	// Refs matches uploads to dataset references by their audio; nil: no
	// matching (no WER).
	Refs *Index
	// Lang is the language of an upload that names none and matches no
	// reference (en or zh).
	Lang string
	// MaxUpload: DefaultMaxUpload when 0.
	MaxUpload int64
	// OnRecord receives every finished request, from many goroutines.
	OnRecord func(rec *model.Request)
	// Realtime, when set ("funasr-ws" or "openai-realtime"), records
	// WebSocket sessions frame by frame in that protocol, with Dialect
	// (openai-realtime's) and Pace (how the client paces its audio, for
	// the lag origin); when empty sessions pass through unrecorded.
	Realtime, Dialect, Pace string
}

// Stats counts what the proxy saw.
type Stats struct {
	Recorded        int64 `json:"recorded"` // transcription requests made into records
	Passed          int64 `json:"passed"`   // other requests forwarded unrecorded (health, models, WebSocket upgrades)
	InjectedTrace   int64 `json:"injected_traceparent"`
	InjectedID      int64 `json:"injected_request_id"`
	Matched         int64 `json:"matched"`           // uploads matched to a dataset reference
	Unmatched       int64 `json:"unmatched"`         // with a dataset: uploads that matched none
	NoAudio         int64 `json:"no_audio"`          // uploads whose audio could not be found or probed
	UpstreamFailure int64 `json:"upstream_failures"` // requests the server did not answer (502 to the client)
}

// Proxy is an http.Handler. Create it with New.
type Proxy struct {
	cfg      Config // Transport and MaxUpload defaults filled
	target   *url.URL
	pass     *httputil.ReverseProxy
	wsClient *http.Client
	prefix   string
	seq      atomic.Int64
	inflight atomic.Int64
	wg       sync.WaitGroup // requests being handled or finished off
	// bufs holds upload copies for reuse: without it the 100 KB copy of
	// every upload was most of the proxy's garbage.
	bufs sync.Pool

	mu   sync.Mutex
	recs []model.Request
	ends map[string]func(*model.Request) // client spans to end, by record id
	st   Stats
	lerr string // the last audio problem, for the report
}

// New returns a proxy for cfg.Target.
func New(cfg Config) (*Proxy, error) {
	u, err := url.Parse(cfg.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target %q: want an http(s) base URL such as http://127.0.0.1:8000", cfg.Target)
	}
	cfg.MaxUpload = cmp.Or(max(cfg.MaxUpload, 0), DefaultMaxUpload)
	if cfg.Transport == nil {
		cfg.Transport = protocol.NewTransport(256)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if cfg.Realtime != "" {
		if _, err := protocol.NewObserver(cfg.Realtime, protocol.Options{Dialect: cfg.Dialect, Pace: cfg.Pace}); err != nil {
			return nil, err
		}
	}
	p := &Proxy{cfg: cfg, target: u, prefix: "asrprof-proxy-" + hex.EncodeToString(b[:]), ends: map[string]func(*model.Request){}}
	p.wsClient = &http.Client{Transport: protocol.NewTransport(16)}
	p.pass = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) }, // Host: the target's
		Transport:     cfg.Transport,
		FlushInterval: -1,
	}
	return p, nil
}

// recordable tells whether r is a transcription upload to record: a POST
// whose body is a multipart form or raw audio.
func recordable(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "multipart/form-data" || strings.HasPrefix(mt, "audio/")
}

// ServeHTTP forwards r to the target. A transcription upload is recorded;
// anything else (health checks, model lists, WebSocket upgrades) passes
// through httputil.ReverseProxy unrecorded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.cfg.Realtime != "" && isUpgrade(r) {
		p.serveSession(w, r)
		return
	}
	if !recordable(r) {
		p.mu.Lock()
		p.st.Passed++
		p.mu.Unlock()
		p.pass.ServeHTTP(w, r)
		return
	}
	p.serveRecorded(w, r)
}

// begin starts the record of r (InFlight and Wait count it from here):
// its ids and trace (the client's, or injected), and the headers to send
// upstream (the client's without the hop-by-hop ones, with the injected
// ids).
func (p *Proxy) begin(r *http.Request) (rec *model.Request, hdr http.Header, end func(*model.Request), injectedID, injectedTP bool) {
	p.wg.Add(1)
	p.inflight.Add(1)
	n := p.seq.Add(1)
	rec = &model.Request{ID: strconv.FormatInt(n, 10), Level: Unassigned, Repeat: 1, Lang: p.cfg.Lang}
	hdr = r.Header.Clone()
	dropHop(hdr)
	if rec.RequestID = r.Header.Get("X-Request-Id"); rec.RequestID == "" {
		rec.RequestID = fmt.Sprintf("%s-%06d", p.prefix, n)
		hdr["X-Request-Id"] = []string{rec.RequestID}
		injectedID = true
	}
	if tp := r.Header.Get("Traceparent"); tp != "" {
		rec.TraceID = traceIDOf(tp)
	} else {
		if p.cfg.Tracer != nil {
			tp, end = p.cfg.Tracer.Start(r.Context(), rec)
		} else {
			tp, rec.TraceID = randomTraceParent()
		}
		hdr["Traceparent"] = []string{tp}
		injectedTP = true
	}
	return rec, hdr, end, injectedID, injectedTP
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) a proxy drops.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func dropHop(h http.Header) {
	for _, f := range h["Connection"] {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

func (p *Proxy) serveRecorded(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	rec, hdr, end, injectedID, injectedTP := p.begin(r)
	out := r.Clone(ctx)
	out.Header = hdr
	out.RequestURI = ""
	out.Host = "" // the target's, as for requests passed through
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.URL.Path = singleJoin(p.target.Path, r.URL.Path)
	out.URL.RawPath = ""
	up := &upload{r: r.Body, max: p.cfg.MaxUpload}
	if r.ContentLength > 0 && r.ContentLength <= p.cfg.MaxUpload {
		up.buf = p.getBuf(int(r.ContentLength))
	}
	out.Body = up
	if r.ContentLength == 0 {
		out.Body = nil
	}
	var firstByte atomic.Int64
	out = out.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { firstByte.CompareAndSwap(0, time.Now().UnixNano()) },
	}))

	var res protocol.Result
	resp, err := p.cfg.Transport.RoundTrip(out)
	if err != nil {
		res.Err, res.ErrKind = fmt.Errorf("upstream: %w", err), protocol.ErrorKind(ctx, err)
		w.WriteHeader(http.StatusBadGateway)
		res.End = time.Now()
	} else {
		maps.Copy(w.Header(), resp.Header)
		dropHop(w.Header())
		w.WriteHeader(resp.StatusCode)
		stream := protocol.IsEventStream(resp.Header)
		cw := &clientWriter{w: w}
		if stream {
			cw.f, _ = w.(http.Flusher)
		}
		body := resp.Body
		resp.Body = readCloser{io.TeeReader(body, cw), body}
		protocol.ReadAnswer(ctx, resp, protocol.Answer{Stream: stream}, &res)
		// What ReadAnswer left unread (an error body past 200 bytes) still
		// goes to the client.
		if _, cerr := io.Copy(io.Discard, resp.Body); cerr != nil && res.Err == nil {
			res.Err = fmt.Errorf("forwarding the answer: %w", cerr)
		}
		body.Close()
		_ = http.NewResponseController(w).Flush()
		res.End = time.Now()
		res.ErrKind = cmp.Or(res.ErrKind, protocol.ErrorKind(ctx, res.Err))
	}
	if t := firstByte.Load(); t != 0 {
		res.FirstByte = time.Unix(0, t)
	}
	res.UploadDone = up.doneAt()
	p.inflight.Add(-1)
	// The rest (finding the audio, matching, scoring, the bundle line) is
	// done after the answer is out, off the client's path.
	go p.finish(rec, start, &res, up, r.Header.Get("Content-Type"), end, injectedID, injectedTP, err != nil)
}

func (p *Proxy) finish(rec *model.Request, start time.Time, res *protocol.Result, up *upload, ctype string,
	end func(*model.Request), injectedID, injectedTP, upstreamFailed bool) {
	defer p.wg.Done()
	body, complete := up.bytes()
	f, aerr := parseUpload(ctype, body, complete)
	matched, unmatched := false, false
	if aerr == nil {
		rec.SampleID = f.fileName
		rec.Lang = cmp.Or(f.lang, rec.Lang)
		if ref, ok := p.cfg.Refs.lookup(f.audio); ok {
			rec.SampleID, rec.Ref, rec.AudioDurationS, matched = ref.SampleID, ref.Text, ref.AudioS, true
			rec.Lang = cmp.Or(ref.Lang, rec.Lang)
		} else {
			unmatched = p.cfg.Refs != nil
			info, err := audio.ProbeBytes(f.fileName, f.audio)
			if rec.AudioDurationS = info.DurationS; err != nil {
				aerr = fmt.Errorf("%w: %v", errNoAudio, err)
			}
		}
	}
	record.Fill(context.Background(), rec, start, start, res, nil)
	up.release(&p.bufs) // nothing of rec points into the upload
	p.book(rec, end, injectedID, injectedTP, matched, unmatched, aerr, upstreamFailed)
}

// book counts a finished record, keeps it and hands it to OnRecord.
func (p *Proxy) book(rec *model.Request, end func(*model.Request), injectedID, injectedTP, matched, unmatched bool, aerr error, upstreamFailed bool) {
	p.mu.Lock()
	p.st.Recorded++
	if injectedID {
		p.st.InjectedID++
	}
	if injectedTP {
		p.st.InjectedTrace++
	}
	if matched {
		p.st.Matched++
	}
	if unmatched {
		p.st.Unmatched++
	}
	if aerr != nil {
		p.st.NoAudio++
		p.lerr = aerr.Error()
	}
	if upstreamFailed {
		p.st.UpstreamFailure++
	}
	p.recs = append(p.recs, *rec)
	if end != nil {
		p.ends[rec.ID] = end
	}
	p.mu.Unlock()
	if p.cfg.OnRecord != nil {
		p.cfg.OnRecord(rec)
	}
}

// InFlight is the number of recorded requests being forwarded now.
func (p *Proxy) InFlight() int { return int(p.inflight.Load()) }

// Wait returns once every request that reached the proxy has been
// recorded, or when ctx ends (then with its error).
func (p *Proxy) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Records returns the finished requests in completion order.
func (p *Proxy) Records() []model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.recs)
}

// Stats returns the counts so far, and the last audio problem ("" if none).
func (p *Proxy) Stats() (Stats, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st, p.lerr
}

// EndSpans ends the client spans of recs (the records as they finally
// are, levels assigned); each span ends at most once.
func (p *Proxy) EndSpans(recs []model.Request) {
	p.mu.Lock()
	ends := p.ends
	p.ends = map[string]func(*model.Request){}
	p.mu.Unlock()
	for i := range recs {
		if end := ends[recs[i].ID]; end != nil {
			end(&recs[i])
		}
	}
}

// upload passes the client's body to the transport and keeps a copy of it
// (up to max bytes), noting when its last byte went through.
type upload struct {
	r    io.ReadCloser
	max  int64
	mu   sync.Mutex
	buf  []byte
	over bool  // more than max bytes: the copy is dropped
	done int64 // unix ns of EOF
	n    int64
}

func (u *upload) Read(b []byte) (int, error) {
	n, err := u.r.Read(b)
	u.mu.Lock()
	u.n += int64(n)
	if !u.over {
		if u.n > u.max {
			u.over, u.buf = true, nil
		} else {
			u.buf = append(u.buf, b[:n]...)
		}
	}
	if err == io.EOF && u.done == 0 {
		u.done = time.Now().UnixNano()
	}
	u.mu.Unlock()
	return n, err
}

func (u *upload) Close() error { return nil } // the server closes the client's body

func (u *upload) doneAt() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done == 0 {
		return time.Time{}
	}
	return time.Unix(0, u.done)
}

func (p *Proxy) getBuf(n int) []byte {
	if b, ok := p.bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

// release gives the copy back once nothing refers to it.
func (u *upload) release(pool *sync.Pool) {
	u.mu.Lock()
	b := u.buf
	u.buf, u.over = nil, true
	u.mu.Unlock()
	if cap(b) > 0 && cap(b) <= 1<<20 {
		pool.Put(&b)
	}
}

// bytes returns the copy and whether it is the whole body.
func (u *upload) bytes() ([]byte, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.buf, u.done != 0 && !u.over
}

// clientWriter writes the answer to the client, flushing after each write
// when f is set (an SSE stream).
type clientWriter struct {
	w io.Writer
	f http.Flusher
}

func (c *clientWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	if c.f != nil && err == nil {
		c.f.Flush()
	}
	return n, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

func singleJoin(a, b string) string {
	switch {
	case a == "" || a == "/":
		return b
	case strings.HasSuffix(a, "/") && strings.HasPrefix(b, "/"):
		return a + b[1:]
	case !strings.HasSuffix(a, "/") && !strings.HasPrefix(b, "/"):
		return a + "/" + b
	}
	return a + b
}

// traceIDOf returns the trace id of a W3C traceparent ("" if malformed).
func traceIDOf(tp string) string {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdefABCDEF") != "" {
		return ""
	}
	return strings.ToLower(parts[1])
}

// randomTraceParent returns a sampled W3C traceparent and its trace id.
func randomTraceParent() (string, string) {
	var b [24]byte
	_, _ = rand.Read(b[:])
	if binary.LittleEndian.Uint64(b[:8]) == 0 {
		b[0] = 1
	}
	return protocol.TraceParent(b)
}

var errNoAudio = errors.New("no audio in the upload")
