package protocol_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// countConns counts the connections a test server accepts.
func countConns(s *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// okServer answers every request {"text":"ok"}, 500 ms late while slow
// (when given) is set; it counts the connections it accepts.
func okServer(t *testing.T, slow *atomic.Bool) (*httptest.Server, *atomic.Int32) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if slow != nil && slow.Load() {
			time.Sleep(500 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"text":"ok"}`)
	}))
	conns := countConns(s)
	s.Start()
	t.Cleanup(s.Close)
	return s, conns
}

// The openai client's default transport is the H1 one: prepared and
// unprepared uploads arrive whole, request after request on one keep-alive
// connection, with the trace times in order.
func TestH1KeepAliveAndTimes(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{})
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	audio := []byte(strings.Repeat("RIFF and samples ", 4000))
	for i := range 6 {
		job := newJob(fmt.Sprint(i), audio)
		if i%2 == 0 {
			job.Upload = c.(protocol.Preparer).Prepare(job)
		}
		start := time.Now()
		r := c.Do(t.Context(), job)
		if r.Err != nil || r.HTTPStatus != 200 {
			t.Fatalf("request %d: %v (status %d)", i, r.Err, r.HTTPStatus)
		}
		if r.UploadDone.Before(start) || r.FirstByte.Before(r.UploadDone) || r.End.Before(r.FirstByte) {
			t.Errorf("request %d: times out of order: start %v upload %v first byte %v end %v", i, start, r.UploadDone, r.FirstByte, r.End)
		}
		// the first opened the connection, the others reused it
		if opened := !r.Connected.IsZero(); opened != (i == 0) || opened && (r.Connected.Before(start) || r.UploadDone.Before(r.Connected)) {
			t.Errorf("request %d: connected at %v (start %v, upload done %v), want only the first, in order", i, r.Connected, start, r.UploadDone)
		}
		got := s.Requests()[i]
		if got.ParseError != "" || got.FileSize != len(audio) || got.FileSHA256 != sha256.Sum256(audio) {
			t.Errorf("request %d: server got %d bytes (%s)", i, got.FileSize, got.ParseError)
		}
		if got.RequestID != fmt.Sprint(i) || got.TraceParent == "" {
			t.Errorf("request %d: headers X-Request-Id %q traceparent %q", i, got.RequestID, got.TraceParent)
		}
	}
}

func TestH1OneConnection(t *testing.T) {
	s, conns := okServer(t, nil)
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	for i := range 10 {
		if r := c.Do(t.Context(), newJob(fmt.Sprint(i), []byte("audio"))); r.Err != nil || r.Text != "ok" {
			t.Fatalf("request %d: %v %q", i, r.Err, r.Text)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("10 sequential requests opened %d connections, want 1 (keep-alive)", n)
	}
}

// A server that closes a kept-alive connection without saying so (as an
// idle timeout does): the next request finds it closed before it writes,
// and goes on a new connection; the caller sees one success.
func TestH1StaleConnectionRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\":\"ok\"}")
				// then close: the answer said nothing of it
			}()
		}
	}()
	c := mustClient(t, "openai", protocol.Options{Target: "http://" + ln.Addr().String()})
	for i := range 3 {
		if r := c.Do(t.Context(), newJob(fmt.Sprint(i), []byte("audio"))); r.Err != nil || r.Text != "ok" {
			t.Fatalf("request %d: %v %q", i, r.Err, r.Text)
		}
		time.Sleep(50 * time.Millisecond) // the server's close arrives
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("%d connections for 3 requests on a server that closes each, want 3", n)
	}
}

// A request whose context ends while the server thinks fails as a timeout,
// and its connection is not given to the next request, which succeeds.
func TestH1Timeout(t *testing.T) {
	var slow atomic.Bool
	s, conns := okServer(t, &slow)
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	if r := c.Do(t.Context(), newJob("warm", []byte("a"))); r.Err != nil {
		t.Fatal(r.Err)
	}
	slow.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	r := c.Do(ctx, newJob("slow", []byte("a")))
	if r.Err == nil || r.ErrKind != protocol.KindTimeout || time.Since(t0) > 400*time.Millisecond {
		t.Fatalf("after %v: err %v kind %q, want a timeout at 100 ms", time.Since(t0), r.Err, r.ErrKind)
	}
	slow.Store(false)
	if r := c.Do(t.Context(), newJob("after", []byte("a"))); r.Err != nil || r.Text != "ok" {
		t.Fatalf("the request after the timeout: %v", r.Err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the timed-out one is not reused", n)
	}
}

// A streamed (chunked) answer is read to its end and its connection kept;
// an answer with Connection: close is not kept.
func TestH1ChunkedAndClose(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("close") == "1" {
			w.Header().Set("Connection", "close")
		}
		for i := range 3 {
			fmt.Fprintf(w, "part %d;", i)
			w.(http.Flusher).Flush()
		}
	}))
	conns := countConns(s)
	s.Start()
	defer s.Close()
	tr := protocol.NewH1Transport(4)
	hc := &http.Client{Transport: tr}
	get := func(q string) string {
		t.Helper()
		resp, err := hc.Post(s.URL+"/x"+q, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(resp.TransferEncoding) == 0 {
			t.Fatalf("reading %q: %v (transfer encoding %v)", b, err, resp.TransferEncoding)
		}
		return string(b)
	}
	for range 2 {
		if got := get(""); got != "part 0;part 1;part 2;" {
			t.Fatalf("body %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("two chunked answers used %d connections, want 1", n)
	}
	get("?close=1")
	get("")
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the one the server closed is not reused", n)
	}
}

// A server that takes the request and resets the connection instead of
// answering: a connection failure, not resent (the server may have acted
// on a POST).
func TestH1ResetIsAFailure(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{Fail: fakeasr.FailOn(map[int]fakeasr.Failure{2: fakeasr.Reset})})
	c := mustClient(t, "openai", protocol.Options{Target: s.URL})
	for i, want := range []string{"", protocol.KindConnection, ""} {
		r := c.Do(t.Context(), newJob(fmt.Sprint(i), []byte("audio")))
		if r.ErrKind != want {
			t.Errorf("request %d: kind %q (%v), want %q", i, r.ErrKind, r.Err, want)
		}
	}
	if n := s.Count(); n != 3 {
		t.Errorf("the server saw %d requests, want 3: the reset one is not resent", n)
	}
}

// What it does not take goes to the fallback: https here.
func TestH1FallbackHTTPS(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"text":"tls"}`)
	}))
	defer s.Close()
	tr := &protocol.H1Transport{Fallback: s.Client().Transport}
	c := mustClient(t, "openai", protocol.Options{Target: s.URL, HTTPClient: &http.Client{Transport: tr}})
	job := newJob("1", []byte("audio"))
	job.Upload = c.(protocol.Preparer).Prepare(job)
	r := c.Do(t.Context(), job)
	if r.Err != nil || r.Text != "tls" {
		t.Fatalf("https through the fallback: %v %q", r.Err, r.Text)
	}
	if r.Connected.IsZero() || r.Connected.After(r.UploadDone) {
		t.Errorf("https: connected at %v, upload done %v; want the new connection recorded, before the upload", r.Connected, r.UploadDone)
	}
	if _, err := (&http.Client{Transport: &protocol.H1Transport{}}).Get(s.URL); err == nil || !strings.Contains(err.Error(), "no transport") {
		t.Errorf("https without a fallback: %v, want an error naming it", err)
	}
}

// A header that would break the framing is refused, not sent.
func TestH1RefusesBadHeader(t *testing.T) {
	s := fakeasr.NewNoop(t)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/audio/transcriptions", nil)
	req.Header.Set("X-Request-Id", "a")
	req.Header["X-Evil"] = []string{"a\r\nX-Injected: 1"}
	if _, err := protocol.NewH1Transport(1).RoundTrip(req); err == nil || !strings.Contains(err.Error(), "CR or LF") {
		t.Errorf("a header with CRLF: %v, want refused", err)
	}
	if s.Count() != 0 {
		t.Errorf("the server got %d requests", s.Count())
	}
}
