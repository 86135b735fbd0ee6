package protocol

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/asrprof/asrprof/bench/audio"
)

// Pace values of Options.Pace.
const (
	PaceRealtime = "realtime" // frame i leaves at start + i×chunk (default)
	PaceNone     = "none"     // frames leave as fast as the connection takes them
)

// Dialects of the "openai-realtime" protocol (Options.Dialect).
const (
	DialectOpenAI     = "openai"      // OpenAI GA realtime transcription, 24 kHz
	DialectVLLM       = "vllm"        // vLLM /v1/realtime, 16 kHz
	DialectSGLangOmni = "sglang-omni" // SGLang-Omni realtime transcription, 16 kHz
)

// Lag sources of RealtimeResult.LagSource.
const (
	LagFromServer = "server" // the server said which audio an update covers
	LagFromSent   = "sent"   // it did not: the audio sent when the update arrived
	LagMixed      = "mixed"  // some updates of each kind
)

// RealtimeResult is what a WebSocket session recorded, on the client's
// monotonic clock. A time that was never reached is the zero time.
type RealtimeResult struct {
	AudioStart  time.Time // the first audio frame was handed to the connection
	FirstUpdate time.Time // the first server message that carried text
	StopSent    time.Time // the end of input was sent (STOP, a final commit, …)
	Final       time.Time // the final message arrived
	// LagsS holds one lag per non-final update that carried text, in
	// arrival order, in seconds: (arrival − audio origin) − the audio time
	// the update covers, where the origin is one chunk before AudioStart
	// under realtime pacing and AudioStart otherwise (docs/REALTIME.md).
	LagsS []float64
	// LagAtS holds, beside each of LagsS, when the update arrived in
	// session time: seconds from the audio origin (the lag's zero).
	LagAtS []float64
	// LagSource says where the covered audio time came from: LagFromServer,
	// LagFromSent or LagMixed; "" when there was no update.
	LagSource string
	Partials  int     // non-final updates with provisional text
	Finals    int     // text units the server locked (sentences, items, segments, the final message)
	AudioS    float64 // audio seconds sent (all loops)
	Frames    int     // audio frames sent
	// SendLateMax and SendLateP99 compare each frame's send (the write
	// returned) with its schedule under realtime pacing; 0 with PaceNone.
	SendLateMax time.Duration
	SendLateP99 time.Duration
	// SendLate holds every frame's lateness, in send order (realtime
	// pacing only).
	SendLate []time.Duration
	// ServerErrors counts error events the server sent without ending the
	// session (SGLang-Omni's server_error after a failed decode);
	// LastServerError is the last one's text.
	ServerErrors    int
	LastServerError string
	// ReadStallMax is the longest the session's reader was away from the
	// connection between two messages (handling one, waiting for the
	// session's lock) until the final message: time in which a message
	// that had arrived could not be read. The driver's own lag, not the
	// server's.
	ReadStallMax time.Duration
}

// message is what a dialect learned from one server message.
type message struct {
	ready    bool    // the server is ready for audio
	text     bool    // the message carried text (provisional or locked)
	partial  bool    // provisional text (counted in Partials, gives a lag)
	locked   int     // text units locked by this message
	final    bool    // the session's final message
	coveredS float64 // audio seconds the update covers, as the server says; < 0 unknown
	// serverErr is an error event after which the session goes on (its
	// text); the session counts it.
	serverErr string
}

// serverError is an error event the server sent inside the session.
type serverError struct{ msg string }

func (e *serverError) Error() string { return "server error event: " + e.msg }

// malformedError is a message that does not follow the protocol.
type malformedError struct{ msg string }

func (e *malformedError) Error() string { return "malformed message: " + e.msg }

// decodeText decodes a server message, which must be a text message, as
// JSON into v.
func decodeText(typ websocket.MessageType, data []byte, v any) error {
	if typ != websocket.MessageText {
		return &malformedError{"binary message from the server"}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &malformedError{fmt.Sprintf("%v: %.100s", err, data)}
	}
	return nil
}

// dialectKind is the failure kind of a dialect's error (KindServerError,
// KindMalformed), "" for any other.
func dialectKind(err error) string {
	if _, ok := errors.AsType[*serverError](err); ok {
		return KindServerError
	}
	if _, ok := errors.AsType[*malformedError](err); ok {
		return KindMalformed
	}
	return ""
}

// dialect is one realtime protocol's message vocabulary. Its methods are
// called by one session at a time; handle and text are serialized by the
// session's lock.
type dialect interface {
	// rate is the audio sample rate the server expects (PCM16 mono).
	rate() int
	// hello runs right after the upgrade, before the server is ready.
	hello(ctx context.Context, s *websocket.Conn, job *Job) error
	// configure runs once the server said it is ready, before any audio.
	configure(ctx context.Context, s *websocket.Conn, job *Job) error
	// frame encodes one audio frame.
	frame(pcm []byte) (websocket.MessageType, []byte)
	// stop ends the input.
	stop(ctx context.Context, s *websocket.Conn) error
	// handle reads one server message; stopped says whether stop was sent.
	handle(typ websocket.MessageType, data []byte, stopped bool) (message, error)
	// text is the transcript so far.
	text() string
}

// wsClient runs one WebSocket session per Job with a dialect.
type wsClient struct {
	url  string
	opts Options // HTTPClient and the realtime knobs, defaults filled
	newD func() dialect
	// pcms keeps the decoded PCM16 of each sample at each rate, so a
	// sample is decoded once per run however many sessions send it: its
	// "id@rate" keys hold a func() ([]byte, error) made by sync.OnceValues.
	pcms sync.Map
}

// wsURL turns the target into the session URL: http→ws, https→wss; a
// target without a path gets defPath (which may carry a query).
func wsURL(target, defPath string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", target, err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("target %q: want an http(s) or ws(s) URL such as http://127.0.0.1:10095", target)
	}
	if u.Host == "" {
		return "", fmt.Errorf("target %q: no host", target)
	}
	if u.Path == "" || u.Path == "/" {
		p, err := url.Parse(defPath)
		if err != nil {
			return "", err
		}
		u.Path = p.Path
		u.RawQuery = cmp.Or(u.RawQuery, p.RawQuery)
	}
	return u.String(), nil
}

// newWSClient is the session client of realtime protocol name (wsDialect),
// its realtime knobs checked and their defaults filled.
func newWSClient(name string, opts Options) (*wsClient, error) {
	defPath, newD, err := wsDialect(name, opts)
	if err != nil {
		return nil, err
	}
	opts.ChunkMs = cmp.Or(opts.ChunkMs, 100)
	opts.Pace = cmp.Or(opts.Pace, PaceRealtime)
	opts.Loops = cmp.Or(opts.Loops, 1)
	if opts.ChunkMs < 10 || opts.ChunkMs > 10000 {
		return nil, fmt.Errorf("chunk %d ms: want 10..10000", opts.ChunkMs)
	}
	if opts.Pace != PaceRealtime && opts.Pace != PaceNone {
		return nil, fmt.Errorf("pace %q: want realtime or none", opts.Pace)
	}
	if opts.Loops < 1 {
		return nil, fmt.Errorf("loops %d: must be ≥ 1", opts.Loops)
	}
	u, err := wsURL(opts.Target, defPath)
	if err != nil {
		return nil, err
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Transport: NewTransport(defaultConns)}
	}
	return &wsClient{url: u, opts: opts, newD: newD}, nil
}

// pcm returns job's audio as PCM16 mono at rate Hz.
func (c *wsClient) pcm(job *Job, rate int) ([]byte, error) {
	decode := func() ([]byte, error) {
		p, err := audio.DecodeBytes(job.FileName, job.Audio)
		if err != nil {
			return nil, err
		}
		p = p.Mono()
		if p.SampleRate != rate {
			p = p.Resample(rate)
		}
		return p.PCM16(), nil
	}
	if job.SampleID == "" {
		return decode()
	}
	once, _ := c.pcms.LoadOrStore(fmt.Sprintf("%s@%d", job.SampleID, rate), sync.OnceValues(decode))
	return once.(func() ([]byte, error))()
}

// session is the state of one Do call shared by its sender and reader.
type session struct {
	d      dialect
	rt     *RealtimeResult
	mu     sync.Mutex // guards d's state, rt's update fields and stopped
	sentNs atomic.Int64
	// stopped is set when the end of input was sent.
	stopped bool
	// origin is the audio clock's zero for lags: one chunk before the
	// first frame under realtime pacing (a live source has a chunk only
	// once it was spoken), the first frame otherwise.
	origin   time.Time
	fromSrv  int
	fromSent int
	// stallNs is the reader's longest time away from conn.Read (ns).
	stallNs atomic.Int64

	ready chan struct{} // closed at the first ready message
	final chan struct{} // closed at the final message
	fail  chan error    // the reader's error, at most one
	once  struct{ ready, final sync.Once }
}

// Do runs one session: connect, configure, send the audio paced, end the
// input, wait for the final message. See Client for the contract.
func (c *wsClient) Do(ctx context.Context, job *Job) (res Result) {
	rt := &RealtimeResult{}
	res.Realtime = rt
	defer func() {
		if res.End.IsZero() {
			res.End = time.Now()
		}
	}()
	fail := func(kind string, err error) Result {
		res.Err, res.ErrKind = err, kind
		return res
	}
	d := c.newD()
	pcm, err := c.pcm(job, d.rate())
	if err != nil {
		return fail(KindOther, fmt.Errorf("decoding audio: %w", err))
	}
	if len(pcm) == 0 {
		return fail(KindOther, errors.New("decoding audio: no samples"))
	}
	hdr := http.Header{}
	job.setHeaders(hdr, c.opts.Header)
	// the session's new connection, as the HTTP clients record it (a
	// WebSocket never reuses one)
	dctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			res.Connected = time.Now()
		}
	}})
	conn, resp, err := websocket.Dial(dctx, c.url, &websocket.DialOptions{HTTPClient: c.opts.HTTPClient, HTTPHeader: hdr})
	if resp != nil {
		res.HTTPStatus = resp.StatusCode
		res.ServerRequestID = resp.Header.Get("X-Request-Id")
	}
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return fail(StatusKind(resp.StatusCode), &StatusError{StatusCode: resp.StatusCode, Body: "WebSocket upgrade refused (is the target a WebSocket endpoint?)"})
		}
		return fail(ErrorKind(ctx, err), fmt.Errorf("opening the session: %w", err))
	}
	res.FirstByte = time.Now()
	defer conn.CloseNow()
	conn.SetReadLimit(16 << 20)

	s := &session{d: d, rt: rt, ready: make(chan struct{}), final: make(chan struct{}), fail: make(chan error, 1)}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.read(sctx, conn)

	sessionErr := func(err error) Result {
		s.mu.Lock()
		res.Text = d.text()
		stopped, stopSent, started := s.stopped, rt.StopSent, !rt.AudioStart.IsZero()
		s.mu.Unlock()
		sentS := float64(s.sentNs.Load()) / 1e9
		if kind := dialectKind(err); kind != "" {
			return fail(kind, err)
		}
		if st := websocket.CloseStatus(err); st != -1 {
			stage := ""
			if stopped {
				stage = " (input ended, before the final message)"
			}
			return fail(KindConnection, fmt.Errorf("server closed the session after %.1f s of audio%s: %w", sentS, stage, err))
		}
		kind := ErrorKind(ctx, err)
		if kind == KindOther && ctx.Err() == nil {
			kind = KindConnection
		}
		switch {
		case kind != KindTimeout:
		case stopped:
			err = fmt.Errorf("no final message %.1f s after the end of input: %w", time.Since(stopSent).Seconds(), err)
		case !started:
			err = fmt.Errorf("the server never said it was ready: %w", err)
		default:
			err = fmt.Errorf("timed out sending audio (%.1f s sent): %w", sentS, err)
		}
		return fail(kind, err)
	}
	// wait blocks until ch closes, the reader fails or ctx ends.
	wait := func(ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case err := <-s.fail:
			s.fail <- err
			// The reader closes ch before it can fail on a later message
			// (or on the server closing after its final answer): an error
			// that followed what we wait for does not count.
			select {
			case <-ch:
				return nil
			default:
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	if err := d.hello(sctx, conn, job); err != nil {
		return sessionErr(firstErr(s, err))
	}
	if err := wait(s.ready); err != nil {
		return sessionErr(err)
	}
	if err := d.configure(sctx, conn, job); err != nil {
		return sessionErr(firstErr(s, err))
	}
	if err := c.send(sctx, conn, s, pcm); err != nil {
		return sessionErr(firstErr(s, err))
	}
	// Marked before the write: the answer may arrive before it returns.
	s.mu.Lock()
	s.stopped = true
	rt.StopSent = time.Now()
	s.mu.Unlock()
	if err := d.stop(sctx, conn); err != nil {
		return sessionErr(firstErr(s, err))
	}
	if err := wait(s.final); err != nil {
		return sessionErr(err)
	}
	s.mu.Lock()
	res.Text = strings.TrimSpace(d.text())
	res.End = rt.Final
	res.FirstToken = rt.FirstUpdate
	rt.ReadStallMax = time.Duration(s.stallNs.Load())
	s.mu.Unlock()
	// The close handshake is not part of the session's timings; the
	// reader is still running and takes the server's close frame.
	_ = conn.Close(websocket.StatusNormalClosure, "")
	return res
}

// firstErr prefers the reader's error (the server closed, sent an error)
// over the writer's consequence of it.
func firstErr(s *session, err error) error {
	select {
	case rerr := <-s.fail:
		s.fail <- rerr
		return rerr
	case <-time.After(50 * time.Millisecond):
		return err
	}
}

// read handles server messages until the connection or ctx ends.
func (s *session) read(ctx context.Context, conn *websocket.Conn) {
	for {
		typ, data, err := conn.Read(ctx)
		now := time.Now()
		if err != nil {
			s.fail <- err
			return
		}
		s.mu.Lock()
		m, err := s.d.handle(typ, data, s.stopped)
		if err == nil {
			s.record(m, now)
		}
		s.mu.Unlock()
		if err != nil {
			s.fail <- err
			return
		}
		if m.ready {
			s.once.ready.Do(func() { close(s.ready) })
		}
		if m.final {
			s.once.final.Do(func() { close(s.final) })
		} else if away := time.Since(now).Nanoseconds(); away > s.stallNs.Load() {
			s.stallNs.Store(away) // one reader: no other writer
		}
	}
}

// record books one message's timings; s.mu is held.
func (s *session) record(m message, now time.Time) {
	rt := s.rt
	if m.text && rt.FirstUpdate.IsZero() && !rt.AudioStart.IsZero() {
		rt.FirstUpdate = now
	}
	rt.Finals += m.locked
	if m.serverErr != "" {
		rt.ServerErrors++
		rt.LastServerError = m.serverErr
	}
	if m.final && rt.Final.IsZero() {
		rt.Final = now
		if m.locked == 0 {
			rt.Finals++
		}
	}
	if !m.partial || m.final || rt.AudioStart.IsZero() {
		return
	}
	rt.Partials++
	covered := m.coveredS
	if covered < 0 {
		covered = float64(s.sentNs.Load()) / 1e9
		s.fromSent++
	} else {
		s.fromSrv++
	}
	at := now.Sub(s.origin).Seconds()
	rt.LagsS = append(rt.LagsS, at-covered)
	rt.LagAtS = append(rt.LagAtS, at)
	switch {
	case s.fromSent == 0:
		rt.LagSource = LagFromServer
	case s.fromSrv == 0:
		rt.LagSource = LagFromSent
	default:
		rt.LagSource = LagMixed
	}
}

// send writes the audio, Loops times over, in frames of chunkMs, paced.
func (c *wsClient) send(ctx context.Context, conn *websocket.Conn, s *session, pcm []byte) error {
	rate := s.d.rate()
	frameBytes := rate * c.opts.ChunkMs / 1000 * 2
	total := len(pcm) * c.opts.Loops
	n := (total + frameBytes - 1) / frameBytes
	buf := make([]byte, 0, frameBytes)
	chunk := time.Duration(c.opts.ChunkMs) * time.Millisecond
	var late []time.Duration
	if c.opts.Pace == PaceRealtime {
		late = make([]time.Duration, 0, n)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := time.Now()
	s.mu.Lock()
	s.rt.AudioStart = start
	s.origin = start
	if c.opts.Pace == PaceRealtime {
		s.origin = start.Add(-chunk)
	}
	s.mu.Unlock()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * chunk)
		if d := time.Until(at); c.opts.Pace == PaceRealtime && d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		buf = buf[:0]
		for off := i * frameBytes; off < min((i+1)*frameBytes, total); {
			p := off % len(pcm)
			m := min(len(pcm)-p, min((i+1)*frameBytes, total)-off)
			buf = append(buf, pcm[p:p+m]...)
			off += m
		}
		typ, msg := s.d.frame(buf)
		if err := conn.Write(ctx, typ, msg); err != nil {
			return err
		}
		if c.opts.Pace == PaceRealtime {
			late = append(late, time.Since(at))
		}
		sent := int64(i*frameBytes+len(buf)) / 2
		s.sentNs.Store(sent * int64(time.Second) / int64(rate))
	}
	s.mu.Lock()
	s.rt.Frames = n
	s.rt.AudioS = float64(total/2) / float64(rate)
	if len(late) > 0 {
		s.rt.SendLate = late
		sorted := slices.Sorted(slices.Values(late))
		s.rt.SendLateMax = sorted[len(sorted)-1]
		s.rt.SendLateP99 = sorted[min(len(sorted)-1, len(sorted)*99/100)]
	}
	s.mu.Unlock()
	return nil
}
