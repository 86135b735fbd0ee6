package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/record"
	"github.com/asrprof/asrprof/model"
)

// isUpgrade tells whether r opens a WebSocket session.
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// handshakeHeaders are the WebSocket handshake's own headers: the dial to
// the server makes its own.
var handshakeHeaders = []string{"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions",
	"Sec-Websocket-Protocol", "Sec-Websocket-Accept"}

// serveSession relays a realtime WebSocket session frame by frame and
// records it: the session is dialed to the target first (so a server that
// refuses it is answered with its status), then the client's upgrade is
// accepted and every message is copied across and shown to a
// protocol.Observer with the time it passed.
func (p *Proxy) serveSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	obs, err := protocol.NewObserver(p.cfg.Realtime, protocol.Options{Dialect: p.cfg.Dialect, Pace: p.cfg.Pace})
	if err != nil { // New checked the protocol
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	rec, hdr, end, injectedID, injectedTP := p.begin(r)
	for _, k := range handshakeHeaders {
		delete(hdr, k)
	}
	u := *p.target
	u.Path = singleJoin(p.target.Path, r.URL.Path)
	u.RawQuery = r.URL.RawQuery
	var subs []string
	for _, v := range r.Header.Values("Sec-Websocket-Protocol") {
		for _, s := range strings.Split(v, ",") {
			subs = append(subs, strings.TrimSpace(s))
		}
	}
	up, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: p.wsClient, HTTPHeader: hdr, Subprotocols: subs})
	var res protocol.Result
	// finish hands res on once the session is over.
	finish := func() {
		p.inflight.Add(-1)
		go p.finishSession(rec, start, &res, end, injectedID, injectedTP)
	}
	if err != nil {
		code := http.StatusBadGateway
		if resp != nil && resp.StatusCode >= 400 {
			code = resp.StatusCode
		}
		http.Error(w, "upstream: "+err.Error(), code)
		res.HTTPStatus = code
		res.Err, res.ErrKind = fmt.Errorf("opening the session upstream: %w", err), protocol.ErrorKind(ctx, err)
		if resp != nil {
			res.ErrKind = protocol.StatusKind(code) // code ≥ 400: the server's, else 502
		}
		res.End = time.Now()
		finish()
		return
	}
	serverID := resp.Header.Get("X-Request-Id")
	defer up.CloseNow()
	var accept []string
	if sp := up.Subprotocol(); sp != "" {
		accept = []string{sp}
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, Subprotocols: accept})
	if err != nil {
		up.Close(websocket.StatusGoingAway, "client handshake failed")
		res = protocol.Result{Err: fmt.Errorf("accepting the client's session: %w", err), ErrKind: protocol.KindOther, End: time.Now()}
		finish()
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(16 << 20)
	up.SetReadLimit(16 << 20)
	closeErr := relay(ctx, conn, up, obs)
	res = obs.Result(start, time.Now(), closeErr)
	res.ServerRequestID = serverID
	finish()
}

// relay copies messages both ways until one side closes or fails, then
// closes the other with the same status; it returns why it ended (nil for
// a normal closure).
func relay(ctx context.Context, client, server *websocket.Conn, obs *protocol.Observer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	var once sync.Once
	ended := func(err error) {
		once.Do(func() {
			st, reason := websocket.StatusGoingAway, "peer gone"
			if ce, ok := errors.AsType[websocket.CloseError](err); ok {
				st, reason = ce.Code, ce.Reason
			}
			go client.Close(st, reason)
			go server.Close(st, reason)
		})
		errs <- err
	}
	pump := func(from, to *websocket.Conn, see func(websocket.MessageType, []byte, time.Time)) {
		for {
			typ, data, err := from.Read(ctx)
			if err != nil {
				ended(err)
				return
			}
			see(typ, data, time.Now())
			if err := to.Write(ctx, typ, data); err != nil {
				ended(err)
				return
			}
		}
	}
	go pump(client, server, obs.FromClient)
	go pump(server, client, func(typ websocket.MessageType, data []byte, now time.Time) {
		_ = obs.FromServer(typ, data, now) // the observer keeps the first error
	})
	first := <-errs
	select { // the other side, briefly: its close handshake
	case <-errs:
	case <-time.After(5 * time.Second):
	}
	if st := websocket.CloseStatus(first); st == websocket.StatusNormalClosure || st == websocket.StatusGoingAway {
		return nil
	}
	return first
}

func (p *Proxy) finishSession(rec *model.Request, start time.Time, res *protocol.Result, end func(*model.Request), injectedID, injectedTP bool) {
	defer p.wg.Done()
	record.Fill(context.Background(), rec, start, start, res, nil)
	rec.SampleID = "session"
	if res.Realtime != nil {
		rec.AudioDurationS = res.Realtime.AudioS
	}
	p.book(rec, end, injectedID, injectedTP, false, false, nil, res.HTTPStatus == 0 || res.HTTPStatus == http.StatusBadGateway)
}
