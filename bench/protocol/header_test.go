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
