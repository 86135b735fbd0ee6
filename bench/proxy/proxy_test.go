package proxy_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/proxy"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

// startProxy runs a proxy in front of srv and returns its URL.
func startProxy(t *testing.T, cfg proxy.Config) (*proxy.Proxy, string) {
	t.Helper()
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	return p, hs.URL
}

func TestProxyRecordsEveryDialect(t *testing.T) {
	wav := audiotest.WAV16(16000, 1, make([]int16, 24000)...) // 1.5 s
	other := audiotest.WAV16(8000, 1, make([]int16, 4000)...) // 0.5 s, in no dataset
	for _, tc := range []struct {
		name     string
		proto    string
		dialect  string
		clientID string
	}{
		{"json", "openai", "", ""},
		{"json-client-ids", "openai", "", "client-7"},
		{"sse-sglang", "openai-stream", "sglang", ""},
		{"sse-vllm", "openai-stream", "vllm", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Text: "the cat sat on the mat", Delay: 20 * time.Millisecond,
				Dialect: tc.dialect, ChunkDelay: 5 * time.Millisecond,
				ServerID: func(c string) string { return "srv-" + c }})
			refs := proxy.NewIndex()
			refs.Add(wav, proxy.Ref{SampleID: "utt1", Text: "the cat sat on a mat", Lang: "en", AudioS: 1.5})
			var mu sync.Mutex
			var live []model.Request
			p, url := startProxy(t, proxy.Config{Target: srv.URL, Refs: refs, Lang: "en",
				OnRecord: func(r *model.Request) { mu.Lock(); live = append(live, *r); mu.Unlock() }})
			c, err := protocol.New(tc.proto, protocol.Options{Target: url})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Do(context.Background(), &protocol.Job{RequestID: tc.clientID, FileName: "a.wav", ContentType: "audio/wav", Audio: wav, Language: "en"})
			if res.Err != nil || res.Text != "the cat sat on the mat" {
				t.Fatalf("through the proxy: %v %q", res.Err, res.Text)
			}
			res2 := c.Do(context.Background(), &protocol.Job{FileName: "b.wav", ContentType: "audio/wav", Audio: other})
			if res2.Err != nil {
				t.Fatal(res2.Err)
			}
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			recs := p.Records()
			if len(recs) != 2 || len(live) != 2 {
				t.Fatalf("%d records (%d live), want 2", len(recs), len(live))
			}
			got := srv.Requests()
			r := recs[0]
			if r.Status != model.StatusOK || r.Hyp != "the cat sat on the mat" || r.HTTPStatus != 200 {
				t.Errorf("record %+v", r)
			}
			// Ids: the client's kept, else injected; the server's read back.
			if tc.clientID != "" && r.RequestID != tc.clientID {
				t.Errorf("request id %q, want the client's %q", r.RequestID, tc.clientID)
			}
			if got[0].RequestID != r.RequestID || r.ServerRequestID != "srv-"+r.RequestID || !strings.HasPrefix(recs[1].RequestID, "asrprof-proxy-") {
				t.Errorf("ids: sent %q, recorded %q, server %q; second %q", got[0].RequestID, r.RequestID, r.ServerRequestID, recs[1].RequestID)
			}
			if len(r.TraceID) != 32 || !strings.Contains(got[0].TraceParent, r.TraceID) {
				t.Errorf("trace id %q, server saw traceparent %q", r.TraceID, got[0].TraceParent)
			}
			// Timing on the proxy's clock, in order.
			if !(r.StartUnixNs <= r.UploadDoneUnixNs && r.UploadDoneUnixNs <= r.FirstByteUnixNs && r.FirstByteUnixNs <= r.EndUnixNs) || r.LatencyS < 0.02 {
				t.Errorf("timing start %d upload %d first byte %d end %d latency %.4f", r.StartUnixNs, r.UploadDoneUnixNs, r.FirstByteUnixNs, r.EndUnixNs, r.LatencyS)
			}
			if tc.proto == "openai-stream" && (r.FirstTokenUnixNs == 0 || len(r.ChunkGapsS) == 0) {
				t.Errorf("stream without token times: %+v", r)
			}
			// Matched by content: the reference, its id, scored (1 substitution).
			if r.SampleID != "utt1" || r.Ref != "the cat sat on a mat" || !r.Scored || r.Errors == nil || r.Errors.Sub != 1 || r.AudioDurationS != 1.5 {
				t.Errorf("matching/scoring: %+v %+v", r, r.Errors)
			}
			// Unmatched: its duration from the upload's own audio, not scored.
			if u := recs[1]; u.SampleID != "b.wav" || u.Scored || u.AudioDurationS != 0.5 {
				t.Errorf("unmatched upload: %+v", u)
			}
			st, _ := p.Stats()
			if st.Recorded != 2 || st.Matched != 1 || st.Unmatched != 1 || st.NoAudio != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestProxyFailuresAreRecorded(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Text: "x", Fail: fakeasr.FailOn(map[int]fakeasr.Failure{1: fakeasr.Status(503)})})
	p, url := startProxy(t, proxy.Config{Target: srv.URL})
	c, _ := protocol.New("openai", protocol.Options{Target: url})
	wav := audiotest.WAV16(16000, 1, make([]int16, 1600)...)
	res := c.Do(context.Background(), &protocol.Job{FileName: "a.wav", Audio: wav})
	if res.HTTPStatus != 503 {
		t.Fatalf("client saw %d, want the server's 503 passed through", res.HTTPStatus)
	}
	dead := fakeasr.NewServer(t, fakeasr.Config{})
	deadURL := dead.URL
	dead.Close()
	p2, url2 := startProxy(t, proxy.Config{Target: deadURL})
	c2, _ := protocol.New("openai", protocol.Options{Target: url2})
	if res := c2.Do(context.Background(), &protocol.Job{FileName: "a.wav", Audio: wav}); res.HTTPStatus != 502 {
		t.Errorf("dead upstream: client saw %d, want 502", res.HTTPStatus)
	}
	p.Wait(context.Background())
	p2.Wait(context.Background())
	if r := p.Records(); len(r) != 1 || r[0].Status != model.StatusFailed || r[0].ErrorKind != model.FailHTTP5xx {
		t.Errorf("503: %+v", r)
	}
	if r := p2.Records(); len(r) != 1 || r[0].ErrorKind != model.FailConnection {
		t.Errorf("dead upstream: %+v", r)
	}
}

// A realtime WebSocket session passes through the proxy (unrecorded: the
// proxy records file uploads only; docs/PROXY.md).
func TestProxyPassesWebSocketSessions(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{})
	p, url := startProxy(t, proxy.Config{Target: srv.URL})
	c, err := protocol.New("funasr-ws", protocol.Options{Target: url, Pace: protocol.PaceNone})
	if err != nil {
		t.Fatal(err)
	}
	wav := audiotest.WAV16(16000, 1, make([]int16, 16000)...)
	res := c.Do(context.Background(), &protocol.Job{RequestID: "ws-1", FileName: "a.wav", Audio: wav})
	if res.Err != nil || res.Text == "" {
		t.Fatalf("session through the proxy: %v %q", res.Err, res.Text)
	}
	if st, _ := p.Stats(); st.Passed != 1 || st.Recorded != 0 {
		t.Errorf("stats %+v: want the session passed, not recorded", st)
	}
}

// With Realtime set, a WebSocket session is relayed frame by frame and
// recorded: its text, partials, finals and audio are the client's own, and
// its first-update and final-after-stop times lie within the client's, in
// every dialect.
func TestProxyRecordsRealtimeSessions(t *testing.T) {
	for _, tc := range []struct {
		proto, dialect, fake, pace string
	}{
		{"funasr-ws", "", "funasr", protocol.PaceRealtime},
		{"openai-realtime", protocol.DialectOpenAI, "openai", protocol.PaceNone},
		{"openai-realtime", protocol.DialectVLLM, "vllm", protocol.PaceNone},
		{"openai-realtime", protocol.DialectSGLangOmni, "sglang-omni", protocol.PaceNone},
	} {
		t.Run(tc.fake, func(t *testing.T) {
			srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: tc.fake})
			p, url := startProxy(t, proxy.Config{Target: srv.URL, Realtime: tc.proto, Dialect: tc.dialect, Pace: tc.pace})
			c, err := protocol.New(tc.proto, protocol.Options{Target: url, Dialect: tc.dialect, Pace: tc.pace})
			if err != nil {
				t.Fatal(err)
			}
			wav := audiotest.WAV16(16000, 1, make([]int16, 16000)...) // 1 s
			res := c.Do(context.Background(), &protocol.Job{FileName: "a.wav", Audio: wav, Model: "m"})
			if res.Err != nil || res.Text == "" {
				t.Fatalf("session through the proxy: %v %q", res.Err, res.Text)
			}
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			recs := p.Records()
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			r, rt := recs[0], res.Realtime
			if r.Status != model.StatusOK || r.Hyp != res.Text || r.HTTPStatus != 101 || r.Partials != rt.Partials || r.Finals != rt.Finals || r.AudioS != rt.AudioS {
				t.Errorf("record %+v\nclient %+v text %q", r, *rt, res.Text)
			}
			sess := srv.Sessions()
			if len(sess) != 1 || sess[0].RequestID != r.RequestID || !strings.HasPrefix(r.RequestID, "asrprof-proxy-") || !strings.Contains(sess[0].TraceParent, r.TraceID) {
				t.Errorf("ids: record %q/%q, server saw %+v", r.RequestID, r.TraceID, sess)
			}
			near := func(what string, proxySide *float64, client time.Time, from time.Time) {
				if proxySide == nil || client.IsZero() {
					t.Errorf("%s: proxy %v, client %v", what, proxySide, client)
					return
				}
				// The proxy sees the client's message after the client sent
				// it and the server's before the client reads it: its
				// interval lies inside the client's, but for a few ms of
				// scheduling on a loaded machine.
				if d := client.Sub(from).Seconds() - *proxySide; d < -0.005 || d > 0.05 {
					t.Errorf("%s: proxy %.4f s, client %.4f s: want the client's 0 to 50 ms longer", what, *proxySide, client.Sub(from).Seconds())
				}
			}
			near("first update", r.FirstUpdateS, rt.FirstUpdate, rt.AudioStart)
			near("final after stop", r.FinalAfterStopS, rt.Final, rt.StopSent)
			if (r.LagP95S == nil) != (len(rt.LagsS) == 0) {
				t.Errorf("lags: proxy %v, client %d", r.LagP95S, len(rt.LagsS))
			}
		})
	}
}
