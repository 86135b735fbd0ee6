package protocol

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// H1Transport is the load driver's HTTP/1.1 client for plain-HTTP targets:
// an http.RoundTripper that writes each request (its head and its
// in-memory body) in one writev(2) on a keep-alive connection of its own
// and reads the answer on the caller's goroutine. net/http's Transport
// hands every request to two goroutines per connection (its read and
// write loops) and back; on loopback that costs about as much CPU as the
// 100 KB upload's send (docs/PERFORMANCE.md §7), and a client that shares
// the CPUs with the server takes it from the server.
//
// It takes a request only when its URL is http://, it has no Expect
// header, and its body is nil, http.NoBody or one of this package's
// in-memory bodies (partsBody: the openai clients' uploads). Any
// other request (https, a streamed body) goes to Fallback unchanged.
//
// An idle connection is checked before it is reused (one non-blocking
// read): one the server has closed meanwhile is dropped for the next or a
// new one. A request whose write on a reused connection failed before any
// byte went out is sent once more on a new connection. Nothing else is
// resent: once the server may have the request (a POST: not idempotent),
// a reset or an EOF instead of the answer is the request's failure, as
// with net/http.
// httptrace's GotConn (its Conn and Reused), WroteRequest and
// GotFirstResponseByte hooks are called as net/http calls them; a 1xx
// answer other than 101 is skipped. Where the context holds a stampKey,
// the answer's first byte is stamped by the kernel (firstByteStamp).
type H1Transport struct {
	// Fallback sends the requests this transport does not take.
	Fallback http.RoundTripper
	// MaxIdlePerHost is how many idle keep-alive connections are kept per
	// host (64 if <= 0); connections beyond it are closed when released.
	// A connection idle for over 90 s is closed; each has a 16 KiB read
	// buffer and is dialed by newDialer.
	MaxIdlePerHost int

	mu   sync.Mutex
	idle map[string][]*h1Conn
}

type h1Conn struct {
	conn   net.Conn
	br     *bufio.Reader
	host   string
	reused bool
	since  time.Time // idle since
}

// NewH1Transport returns an H1Transport whose fallback is
// NewTransport(maxConns), both keeping maxConns idle connections per host
// (64 if <= 0).
func NewH1Transport(maxConns int) *H1Transport {
	return &H1Transport{Fallback: NewTransport(maxConns), MaxIdlePerHost: maxConns}
}

// takes reports whether t sends req itself, and the body's slices.
func (t *H1Transport) takes(req *http.Request) ([][]byte, bool) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" || req.Method == http.MethodConnect {
		return nil, false
	}
	for _, h := range []string{"Expect", "Upgrade"} {
		if _, ok := req.Header[h]; ok {
			return nil, false
		}
	}
	if b, ok := req.Body.(*partsBody); ok {
		return b.Buffers, true // what is left to send, written as it is
	}
	return nil, req.Body == nil || req.Body == http.NoBody
}

// RoundTrip implements http.RoundTripper.
func (t *H1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, ok := t.takes(req)
	if !ok {
		if t.Fallback == nil {
			return nil, fmt.Errorf("protocol: no transport for %s %s", req.Method, req.URL)
		}
		return t.Fallback.RoundTrip(req)
	}
	if req.Body != nil {
		defer req.Body.Close() // as a RoundTripper must, on every path
	}
	head, err := requestHead(req, body)
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	host := net.JoinHostPort(req.URL.Hostname(), cmp.Or(req.URL.Port(), "80")) // port 80 when the URL names none
	for attempt := 0; ; attempt++ {
		c, err := t.conn(ctx, host)
		if err != nil {
			return nil, err
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: c.conn, Reused: c.reused})
		}
		resp, retry, err := t.exchange(ctx, c, req, head, body, trace)
		if err == nil {
			return resp, nil
		}
		if !retry || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// stampKey's context value, an *atomic.Int64, receives the kernel's
// receive time of the answer's first byte (unix ns; 0: none).
type stampKey struct{}

// exchange sends the request on c and reads the answer's head. retry
// says that none of the request went out on a reused connection (which
// the server had closed), so it may go again on another.
func (t *H1Transport) exchange(ctx context.Context, c *h1Conn, req *http.Request, head []byte, body [][]byte,
	trace *httptrace.ClientTrace) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return nil, false, err
	}
	bufs := append(make(net.Buffers, 0, 1+len(body)), head)
	for _, b := range body {
		if len(b) > 0 {
			bufs = append(bufs, b)
		}
	}
	wrote, werr := bufs.WriteTo(c.conn)
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: werr})
	}
	if werr != nil {
		// nothing of it went out on a reused connection: the server
		// closed it in the meantime and has none of the request
		_, _, err := fail(werr)
		return nil, c.reused && wrote == 0 && ctx.Err() == nil, err
	}
	if st, _ := ctx.Value(stampKey{}).(*atomic.Int64); st != nil && c.br.Buffered() == 0 {
		if sc, ok := c.conn.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				st.Store(firstByteStamp(rc))
			}
		}
	}
	if _, err := c.br.Peek(1); err != nil {
		return fail(err)
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	resp, err := http.ReadResponse(c.br, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, req) // an interim answer: the real one follows
	}
	if err != nil {
		return fail(err)
	}
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &h1Body{rc: resp.Body, t: t, c: c, stop: stop, keep: keep}
	return resp, false, nil
}

// conn returns an idle connection to host, or dials one.
func (t *H1Transport) conn(ctx context.Context, host string) (*h1Conn, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[host]; len(list) > 0; list = t.idle[host] {
		c := list[len(list)-1]
		t.idle[host] = list[:len(list)-1]
		if now.Sub(c.since) > 90*time.Second {
			c.conn.Close()
			continue
		}
		t.mu.Unlock()
		if !c.alive() {
			c.conn.Close()
			t.mu.Lock()
			continue
		}
		c.reused = true
		return c, nil
	}
	t.mu.Unlock()
	nc, err := newDialer().DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	return &h1Conn{conn: nc, br: bufio.NewReaderSize(nc, 16<<10), host: host}, nil
}

// alive reports whether the server has left the idle connection open:
// a peek that may not wait (recv with MSG_PEEK|MSG_DONTWAIT) finds nothing
// to read. A closed one gives EOF or a reset, a confused server bytes
// nobody asked for; either way it is not reused.
func (c *h1Conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && open
}

// release puts c back among the idle connections, or closes it.
func (t *H1Transport) release(c *h1Conn, keep bool) {
	// Bytes buffered after the answer put the connection out of step: closed.
	if keep && c.br.Buffered() == 0 {
		t.mu.Lock()
		if t.idle == nil {
			t.idle = map[string][]*h1Conn{}
		}
		if len(t.idle[c.host]) < cmp.Or(max(t.MaxIdlePerHost, 0), defaultConns) {
			c.since = time.Now()
			t.idle[c.host] = append(t.idle[c.host], c)
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}
	c.conn.Close()
}

// CloseIdleConnections closes the idle connections, and the fallback's
// (http.Client.CloseIdleConnections calls it).
func (t *H1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.conn.Close()
		}
	}
	if ci, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// h1Body is an answer's body: read to its end, it gives its connection
// back for the next request; closed before, it closes the connection.
type h1Body struct {
	rc   io.ReadCloser
	t    *H1Transport
	c    *h1Conn
	stop func() bool
	keep bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *h1Body) finish(complete bool) {
	b.done = true
	// stop reports false when the context's AfterFunc already ran (the
	// deadline is set): that connection is done for.
	stopped := b.stop()
	b.t.release(b.c, complete && b.keep && stopped)
}

// requestHead writes req's request line and headers: Host, User-Agent
// (net/http's default unless set), the caller's headers, Content-Length
// and, where req.Close, Connection: close. It refuses what would break
// the framing (CR or LF in a header, a body whose length disagrees).
func requestHead(req *http.Request, body [][]byte) ([]byte, error) {
	var n int64
	for _, b := range body {
		n += int64(len(b))
	}
	if req.ContentLength > 0 && req.ContentLength != n {
		return nil, fmt.Errorf("protocol: request body is %d bytes, ContentLength says %d", n, req.ContentLength)
	}
	host := cmp.Or(req.Host, req.URL.Host)
	b := appendAll(make([]byte, 0, 256), req.Method, " ", req.URL.RequestURI(), " HTTP/1.1\r\nHost: ", host, "\r\n")
	if _, ok := req.Header["User-Agent"]; !ok {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...)
	}
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("protocol: invalid header name %q", k)
		}
		for _, v := range vs {
			if k == "User-Agent" && v == "" {
				continue // net/http's way to send none
			}
			if strings.ContainsAny(v, "\r\n") {
				return nil, fmt.Errorf("protocol: header %s: value has CR or LF", k)
			}
			b = appendAll(b, k, ": ", v, "\r\n")
		}
	}
	if n > 0 || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, n, 10)
		b = append(b, "\r\n"...)
	}
	if req.Close {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...), nil
}
