package protocol_test

import (
	"net/http"
	"runtime"
	"testing"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// BenchmarkOpenAI100KB measures the client side of one non-streaming
// request with a 100 KB upload against a no-op server, 64 requests in
// flight. ns/op is wall time per request at that parallelism (client and
// server share the machine); allocs/op counts both sides.
func BenchmarkOpenAI100KB(b *testing.B) {
	s := fakeasr.NewNoop(b)
	hc := &http.Client{Transport: protocol.NewTransport(64)}
	c, err := protocol.NewOpenAI(protocol.Options{Target: s.URL, HTTPClient: hc})
	if err != nil {
		b.Fatal(err)
	}
	audio := make([]byte, 100<<10)
	for i := range audio {
		audio[i] = byte(i)
	}
	job := &protocol.Job{RequestID: "bench", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		FileName: "utt.wav", ContentType: "audio/wav", Audio: audio, Model: "whisper", Language: "en"}
	b.SetBytes(int64(len(audio)))
	b.ReportAllocs()
	// RunParallel starts SetParallelism × GOMAXPROCS goroutines; aim at 64.
	b.SetParallelism(max(1, (64+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := c.Do(b.Context(), job); r.Err != nil || r.Text != "ok" {
				b.Errorf("request failed: %v %q", r.Err, r.Text)
				return
			}
		}
	})
	if s.Count() < b.N {
		b.Errorf("server saw %d requests, want %d", s.Count(), b.N)
	}
}
