package protocol_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// toneWAV is seconds of a 440 Hz tone as a 16 kHz mono WAV file.
func toneWAV(seconds float64) []byte {
	s := make([]int16, int(seconds*16000))
	for i := range s {
		s[i] = int16(math.Round(0.3 * 32768 * math.Sin(2*math.Pi*440*float64(i)/16000)))
	}
	return audiotest.WAV16(16000, 1, s...)
}

func rtJob(id string, seconds float64) *protocol.Job {
	j := newJob(id, toneWAV(seconds))
	j.SampleID = "tone-" + id
	return j
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestFunASRSession(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{})
	c := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL, Pace: protocol.PaceNone, Hotwords: []string{"fox", "dog"}})
	r := c.Do(context.Background(), rtJob("r1", 2))
	if r.Err != nil {
		t.Fatalf("%s: %v", r.ErrKind, r.Err)
	}
	if r.Text != fakeasr.DefaultText {
		t.Errorf("text %q, want %q (partials must replace, sentences accumulate)", r.Text, fakeasr.DefaultText)
	}
	rt := r.Realtime
	if rt == nil {
		t.Fatal("no Realtime result")
	}
	if rt.Partials == 0 || rt.Finals < 3 {
		t.Errorf("partials %d finals %d: want partial updates and ≥ 3 locked sentences", rt.Partials, rt.Finals)
	}
	if !near(rt.AudioS, 2, 0.01) || rt.Frames != 20 {
		t.Errorf("sent %.3f s in %d frames, want 2 s in 20 frames of 100 ms", rt.AudioS, rt.Frames)
	}
	if rt.FirstUpdate.IsZero() || rt.StopSent.IsZero() || rt.Final.Before(rt.StopSent) || rt.FirstUpdate.Before(rt.AudioStart) {
		t.Errorf("times out of order: audio %v first %v stop %v final %v", rt.AudioStart, rt.FirstUpdate, rt.StopSent, rt.Final)
	}
	if rt.LagSource != protocol.LagFromServer || len(rt.LagsS) != rt.Partials {
		t.Errorf("lag source %q with %d lags for %d partials", rt.LagSource, len(rt.LagsS), rt.Partials)
	}
	ss := srv.Sessions()
	if len(ss) != 1 {
		t.Fatalf("%d sessions", len(ss))
	}
	s := ss[0]
	want := []string{"START", "LANGUAGE:英文", "HOTWORDS:fox,dog", "STOP"}
	if strings.Join(s.Control, "|") != strings.Join(want, "|") {
		t.Errorf("control messages %q, want %q", s.Control, want)
	}
	if s.Path != "/" || s.RequestID != "r1" || s.TraceParent != traceParent || r.ServerRequestID != "srv-r1" {
		t.Errorf("path %q request id %q traceparent %q server id %q", s.Path, s.RequestID, s.TraceParent, r.ServerRequestID)
	}
	if !near(s.AudioS, 2, 0.01) {
		t.Errorf("server received %.3f s of 16 kHz audio, want 2", s.AudioS)
	}
	if r.Connected.IsZero() || r.FirstByte.Before(r.Connected) {
		t.Errorf("connected %v, the session open %v: want its new connection first", r.Connected, r.FirstByte)
	}
}

func TestRealtimeDialects(t *testing.T) {
	tests := []struct {
		dialect  string
		path     string
		end      string
		checkCfg func(cfg map[string]any) bool
	}{
		{protocol.DialectOpenAI, "/v1/realtime?intent=transcription", "input_audio_buffer.commit", func(cfg map[string]any) bool {
			s, _ := cfg["session"].(map[string]any)
			in, _ := s["audio"].(map[string]any)["input"].(map[string]any)
			f, _ := in["format"].(map[string]any)
			tr, _ := in["transcription"].(map[string]any)
			return s["type"] == "transcription" && f["rate"] == 24000.0 && tr["model"] == "whisper"
		}},
		{protocol.DialectVLLM, "/v1/realtime", "input_audio_buffer.commit final", func(cfg map[string]any) bool {
			return cfg["model"] == "whisper" && cfg["language"] == "en"
		}},
		{protocol.DialectSGLangOmni, "/v1/realtime?intent=transcription", "transcription.done", func(cfg map[string]any) bool {
			// SGLang-Omni forbids unknown session fields; turn_detection
			// is left to the model's default.
			s, _ := cfg["session"].(map[string]any)
			for k := range s {
				if k != "input_audio_format" && k != "language" {
					return false
				}
			}
			return s["input_audio_format"] == "pcm16" && s["language"] == "en"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dialect, func(t *testing.T) {
			for _, words := range []string{fakeasr.DefaultText, "one two three four five six seven eight"} {
				srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: tt.dialect, Text: words})
				c := mustClient(t, "openai-realtime", protocol.Options{Target: srv.URL, Dialect: tt.dialect, Pace: protocol.PaceNone, ChunkMs: 50})
				r := c.Do(context.Background(), rtJob("d1", 2))
				if r.Err != nil {
					t.Fatalf("%s: %v", r.ErrKind, r.Err)
				}
				if r.Text != words {
					t.Errorf("text %q, want %q", r.Text, words)
				}
				rt := r.Realtime
				if rt.Partials == 0 || rt.Final.IsZero() || rt.FirstUpdate.IsZero() {
					t.Errorf("partials %d final %v first %v", rt.Partials, rt.Final, rt.FirstUpdate)
				}
				s := srv.Sessions()[0]
				if s.Path != tt.path {
					t.Errorf("path %q, want %q", s.Path, tt.path)
				}
				if !tt.checkCfg(s.Config) {
					t.Errorf("session.update %v is not the %s shape", s.Config, tt.dialect)
				}
				if len(s.Control) == 0 || s.Control[len(s.Control)-1] != tt.end {
					t.Errorf("control messages %q, want the last to be %q", s.Control, tt.end)
				}
				// The server reads the audio at its own rate: a wrong rate
				// shows as the wrong duration.
				if !near(s.AudioS, 2, 0.01) {
					t.Errorf("server received %.3f s, want 2 (sample rate mismatch?)", s.AudioS)
				}
			}
		})
	}
}

func TestRealtimeUnknownDialect(t *testing.T) {
	if _, err := protocol.New("openai-realtime", protocol.Options{Target: "http://127.0.0.1:1", Dialect: "azure"}); err == nil {
		t.Error("dialect azure accepted")
	}
	if _, err := protocol.New("funasr-ws", protocol.Options{Target: "http://127.0.0.1:1", Pace: "fast"}); err == nil {
		t.Error("pace fast accepted")
	}
}

func TestSessionServerClosesMidSession(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{CloseAfterS: 0.5, CloseOn: func(n int) bool { return n == 2 }})
	c := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL, Pace: protocol.PaceNone})
	var got []protocol.Result
	for i := range 3 {
		got = append(got, c.Do(context.Background(), rtJob(string(rune('a'+i)), 1.5)))
	}
	if got[1].Err == nil || got[1].ErrKind != protocol.KindConnection {
		t.Fatalf("session 2: kind %q err %v, want a connection failure", got[1].ErrKind, got[1].Err)
	}
	if msg := got[1].Err.Error(); !strings.Contains(msg, "closed the session") || !strings.Contains(msg, "closing mid-session") {
		t.Errorf("error %q does not say the server closed it and why", msg)
	}
	if got[1].Realtime.Final.IsZero() == false {
		t.Error("a closed session has a final time")
	}
	for _, i := range []int{0, 2} {
		if got[i].Err != nil || got[i].Text == "" {
			t.Errorf("session %d after/before the closed one: %v %q", i+1, got[i].Err, got[i].Text)
		}
	}
}

// TestSGLangDecodeErrorGoesOn: SGLang-Omni answers a failed decode with a
// server_error event and a silent final segment and carries on; the
// session must too, count the error, and not count the silent segment.
func TestSGLangDecodeErrorGoesOn(t *testing.T) {
	run := func(decodeErr bool) protocol.Result {
		srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: protocol.DialectSGLangOmni, DecodeError: decodeErr})
		c := mustClient(t, "openai-realtime", protocol.Options{Target: srv.URL, Dialect: protocol.DialectSGLangOmni, Pace: protocol.PaceNone})
		return c.Do(context.Background(), rtJob("e1", 2))
	}
	base, r := run(false), run(true)
	if r.Err != nil {
		t.Fatalf("%s: %v", r.ErrKind, r.Err)
	}
	if r.Text != fakeasr.DefaultText || r.Text != base.Text {
		t.Errorf("text %q, want %q", r.Text, fakeasr.DefaultText)
	}
	if r.Realtime.ServerErrors != 1 || !strings.Contains(r.Realtime.LastServerError, "decode failed") {
		t.Errorf("server errors %d (%q), want 1", r.Realtime.ServerErrors, r.Realtime.LastServerError)
	}
	if base.Realtime.ServerErrors != 0 || r.Realtime.Finals != base.Realtime.Finals {
		t.Errorf("finals %d with a silent final segment, %d without: the silent one must not count", r.Realtime.Finals, base.Realtime.Finals)
	}
	// An invalid_request_error ends the session: here the one a
	// conversation session (no intent=transcription in the path) sends.
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: protocol.DialectSGLangOmni})
	c := mustClient(t, "openai-realtime", protocol.Options{Target: srv.URL + "/v1/realtime", Dialect: protocol.DialectSGLangOmni, Pace: protocol.PaceNone})
	if r := c.Do(context.Background(), rtJob("e2", 1)); r.ErrKind != protocol.KindServerError || !strings.Contains(r.Err.Error(), "unknown client event") {
		t.Errorf("conversation session: kind %q err %v, want a server error naming the event", r.ErrKind, r.Err)
	}
}

// TestVLLMErrorEvent: vLLM's error events carry the message as a string
// and the code at the top level; the session ends with both.
func TestVLLMErrorEvent(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Dialect: protocol.DialectVLLM})
	c := mustClient(t, "openai-realtime", protocol.Options{Target: srv.URL, Dialect: protocol.DialectVLLM, Pace: protocol.PaceNone})
	j := rtJob("v1", 1)
	j.Model = ""
	r := c.Do(context.Background(), j)
	if r.ErrKind != protocol.KindServerError || !strings.Contains(r.Err.Error(), "model is required") || !strings.Contains(r.Err.Error(), "invalid_event") {
		t.Errorf("kind %q err %v, want a server error with vLLM's message and code", r.ErrKind, r.Err)
	}
}

func TestSessionWithoutFinalTimesOut(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{NoFinal: true})
	c := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL, Pace: protocol.PaceNone})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := c.Do(ctx, rtJob("t1", 1))
	if r.ErrKind != protocol.KindTimeout {
		t.Fatalf("kind %q err %v, want timeout", r.ErrKind, r.Err)
	}
	if !strings.Contains(r.Err.Error(), "no final message") {
		t.Errorf("error %q does not say what was missing", r.Err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Do returned after %v, want about the 1.5 s deadline", el)
	}
	if r.Text == "" || r.Realtime.StopSent.IsZero() {
		t.Errorf("partial text %q and STOP time %v should be kept", r.Text, r.Realtime.StopSent)
	}
}

func TestLagFollowsServerDelay(t *testing.T) {
	for _, noDur := range []bool{false, true} {
		srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Delay: 40 * time.Millisecond, NoDuration: noDur, WordS: 0.1})
		c := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL})
		r := c.Do(context.Background(), rtJob("l1", 1))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		rt := r.Realtime
		want := protocol.LagFromServer
		if noDur {
			want = protocol.LagFromSent
		}
		if rt.LagSource != want || len(rt.LagsS) < 5 {
			t.Fatalf("lag source %q with %d lags", rt.LagSource, len(rt.LagsS))
		}
		for i, l := range rt.LagsS {
			if l < 0.035 || l > 0.1 {
				t.Errorf("duration_ms absent %v: lag %d = %.3f s, want ≈ the server's 0.04 s delay", noDur, i, l)
			}
		}
	}
}

func TestPacingAt8Sessions(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{})
	c := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL, ChunkMs: 100, Loops: 2})
	// Punctuality is measured against what the machine allows at that
	// moment, and the other test binaries that go test runs alongside can
	// take both cores for a few hundred milliseconds. A pacing bug (drift, a
	// frame sent early, serialized sessions) shows in every attempt; a burst
	// of load on a shared 2-core VM does not, so up to three attempts run and
	// one within the bounds passes. Every attempt's counts and durations
	// must hold.
	var failures []string
	for attempt := 1; attempt <= 3; attempt++ {
		msg := pacingAttempt(t, c)
		if msg == "" {
			if len(failures) > 0 {
				t.Logf("punctual on attempt %d after: %s", attempt, strings.Join(failures, "; "))
			}
			break
		}
		failures = append(failures, msg)
		if attempt == 3 {
			t.Errorf("frames left late in all 3 attempts: %s", strings.Join(failures, "; "))
		}
	}
	// The same session unpaced leaves at once.
	c2 := mustClient(t, "funasr-ws", protocol.Options{Target: srv.URL, Pace: protocol.PaceNone, Loops: 2})
	r := c2.Do(context.Background(), rtJob("p", 1))
	if d := r.Realtime.StopSent.Sub(r.Realtime.AudioStart); r.Err != nil || d > 500*time.Millisecond {
		t.Errorf("unpaced: %v, audio sent over %v", r.Err, d)
	}
}

// pacingAttempt runs 8 paced sessions of 2 s beside 8 bare timer loops on
// the same schedule. It fails t on wrong counts or durations and returns
// why the frames were late ("" when they were punctual): 95 % within 5 ms
// of their schedule and none beyond 25 ms, or, on a machine too busy for
// that, no worse than the bare timers.
func pacingAttempt(t *testing.T, c protocol.Client) string {
	t.Helper()
	const n = 8
	res := make([]protocol.Result, n)
	base := make([][]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i] = c.Do(context.Background(), rtJob("p", 1)) })
		wg.Go(func() {
			t0 := time.Now()
			for k := range 20 {
				at := t0.Add(time.Duration(k) * 100 * time.Millisecond)
				time.Sleep(time.Until(at))
				base[i] = append(base[i], time.Since(at))
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("session %d: %v", i, r.Err)
		}
		rt := r.Realtime
		if rt.Frames != 20 || !near(rt.AudioS, 2, 0.01) {
			t.Fatalf("session %d: %d frames, %.3f s (want 2 loops of 1 s)", i, rt.Frames, rt.AudioS)
		}
		// The last frame is scheduled 1.9 s after the first one.
		if d := rt.StopSent.Sub(rt.AudioStart); d < 1900*time.Millisecond || d > 2100*time.Millisecond {
			t.Fatalf("session %d: audio sent over %v, want ≈ 1.9 s at real time", i, d)
		}
		all = append(all, rt.SendLate...)
	}
	if len(all) != n*20 {
		t.Fatalf("%d frame times, want %d", len(all), n*20)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("8 sessions of 2 s took %v: not concurrent", el)
	}
	slices.Sort(all)
	var bare []time.Duration
	for _, b := range base {
		bare = append(bare, b...)
	}
	slices.Sort(bare)
	p95 := func(d []time.Duration) time.Duration { return d[len(d)*95/100] }
	t.Logf("%d frames: median %v, p95 %v, max %v (bare timers: p95 %v, max %v)",
		len(all), all[len(all)/2], p95(all), all[len(all)-1], p95(bare), bare[len(bare)-1])
	if p95(all) > max(5*time.Millisecond, p95(bare)+2*time.Millisecond) ||
		all[len(all)-1] > max(25*time.Millisecond, bare[len(bare)-1]+10*time.Millisecond) {
		return fmt.Sprintf("p95 %v, max %v (want 5 ms and 25 ms, or bare timers' p95 %v + 2 ms and max %v + 10 ms)",
			p95(all), all[len(all)-1], p95(bare), bare[len(bare)-1])
	}
	return ""
}
