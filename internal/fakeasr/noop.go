package fakeasr

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// NoopModel is the model id the no-op server lists.
const NoopModel = "noop"

// NoopHandler is the no-op server (NewNoop, and the noopserver command
// that `make bench` drives): it answers GET /health, GET /v1/models, and
// POST /v1/audio/transcriptions by reading the body in full, sleeping
// delay and answering {"text":"ok"} at once, so a benchmark measures the
// client. count, if not nil, counts the transcription requests.
func NoopHandler(delay time.Duration, count *atomic.Int64) http.Handler {
	body := []byte(`{"text":"ok"}`)
	models := []byte(`{"object":"list","data":[{"id":"` + NoopModel + `","object":"model"}]}`)
	ct := []string{"application/json"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = ct
		_, _ = w.Write(models)
	})
	mux.HandleFunc("POST /v1/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if count != nil {
			count.Add(1)
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Header()["Content-Type"] = ct
		_, _ = w.Write(body)
	})
	return mux
}

// NewNoop starts the no-op server (NoopHandler) on the loopback
// interface, closed when the test ends. It records only the count of
// requests (Count), not Requests.
func NewNoop(t testing.TB) *Server {
	t.Helper()
	s := &Server{closing: make(chan struct{})}
	s.start(t, NoopHandler(0, &s.count))
	return s
}
