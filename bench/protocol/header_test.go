package protocol_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// ParseHeader takes curl's -H form and refuses, without quoting a value,
// what would break the request or fight the client's own headers.
func TestParseHeader(t *testing.T) {
	h, err := protocol.ParseHeader([]string{"Authorization: Bearer k:1", "x-route:  a ", "X-Route: b"})
	if err != nil || h.Get("Authorization") != "Bearer k:1" || strings.Join(h.Values("X-Route"), ",") != "a,b" {
		t.Errorf("got %v, %v", h, err)
	}
	for _, tt := range []struct{ line, want string }{
		{"Authorization Bearer secret", `header 1: want "Name: value"`},
		{": secret", `header 1: want "Name: value"`},
		{"Bad Name: secret", `header 1: want "Name: value"`},
		{"X-A: secret\r\nX-B: 1", "header X-A: its value has a line break"},
		{"content-type: secret", "header content-type: the client writes it itself"},
		{"Host: secret", "header Host: the client writes it itself"},
	} {
		_, err := protocol.ParseHeader([]string{tt.line})
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: err %v, want %q and no value", tt.line, err, tt.want)
		}
	}
}

// Options.Header goes with every HTTP request and WebSocket upgrade; the
// client's own headers win over it.
func TestOptionsHeaderSent(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer k1"}, "X-Request-Id": {"theirs"}}
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"text":"hi"}`))
	}))
	defer srv.Close()
	c := mustClient(t, "openai", protocol.Options{Target: srv.URL, Header: h})
	if r := c.Do(context.Background(), &protocol.Job{RequestID: "ours", FileName: "a.wav", Audio: []byte("RIFF")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got.Get("Authorization") != "Bearer k1" || got.Get("X-Request-Id") != "ours" || !strings.HasPrefix(got.Get("Content-Type"), "multipart/form-data") {
		t.Errorf("openai: the server saw %v", got)
	}
	ws := fakeasr.NewWSServer(t, fakeasr.WSConfig{})
	wc := mustClient(t, "funasr-ws", protocol.Options{Target: ws.URL, Pace: protocol.PaceNone, Header: h})
	if r := wc.Do(context.Background(), rtJob("r1", 1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if s := ws.Sessions()[0]; s.Authorization != "Bearer k1" || s.RequestID != "r1" {
		t.Errorf("funasr-ws: the upgrade carried %+v", s)
	}
}
