// Command noopserver is the target of `make bench`: fakeasr's no-op
// server (fakeasr.NoopHandler) on loopback, which reads each transcription
// upload in full and answers {"text":"ok"} at once, so a benchmark
// measures the load generator.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18099", "listen address")
	delay := flag.Duration("delay", 0, "service time added to every transcription")
	flag.Parse()
	log.Fatal(http.ListenAndServe(*addr, fakeasr.NoopHandler(*delay, nil)))
}
