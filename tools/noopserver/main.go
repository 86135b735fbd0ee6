// Command noopserver is the target of `make bench`: an HTTP server on
// loopback that reads each transcription upload in full and answers
// {"text":"ok"} at once, so a benchmark measures the load generator.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18099", "listen address")
	delay := flag.Duration("delay", 0, "service time added to every transcription")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"noop","object":"model"}]}`)
	})
	mux.HandleFunc("/v1/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(*delay)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"text":"ok"}`)
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
