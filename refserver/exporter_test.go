package refserver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

// TestSpanExporterSurvivesReceiverRestart: one long-running server, two
// captures in a row (the README's tour). The first capture's receiver
// closes the server's kept-alive export connection when it stops; the next
// receiver listens on the same port. The server's first export after that
// must reach the new receiver (retried on a fresh connection), not be
// dropped as export_failed: before the fix every capture after the first
// lost its first request's spans ("only 94% of requests joined").
func TestSpanExporterSurvivesReceiverRestart(t *testing.T) {
	requirePocketSphinx(t)
	addr := "127.0.0.1:" + strconv.Itoa(fakeasr.FreePort(t)) // reserved: free to listen on again
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	first := &collector{}
	srv1 := httptest.NewUnstartedServer(first)
	srv1.Listener = ln
	srv1.Start()
	base := startServer(t, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://" + addr + "/v1/traces"})
	speech := speechWAV(t)

	send := func(traceID string) {
		t.Helper()
		h := http.Header{}
		h.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		resp, body, err := transcribe(context.Background(), t, base, speech, map[string]string{"language": "en"}, h)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("transcribe: %v %v %s", err, resp, body)
		}
	}
	waitSpans := func(c *collector, traceID string) int {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if n := len(c.trace(traceID)); n > 0 {
				return n
			}
		}
		return 0
	}

	const trace1, trace2 = "11111111111111111111111111111111", "22222222222222222222222222222222"
	send(trace1)
	if waitSpans(first, trace1) == 0 {
		t.Fatal("first receiver: no spans of the first request")
	}
	srv1.Close() // closes the server's kept-alive connection, as a capture's end does

	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot listen again on %s: %v", addr, err)
	}
	second := &collector{}
	srv2 := httptest.NewUnstartedServer(second)
	srv2.Listener = ln2
	srv2.Start()
	defer srv2.Close()

	send(trace2)
	if waitSpans(second, trace2) == 0 {
		_, metrics := get(t, base+"/metrics")
		var dropped string
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "asr_otlp_spans_dropped_total") {
				dropped += l + "; "
			}
		}
		t.Fatalf("second receiver on the same port: no spans of the request sent after the first receiver closed (%s)", dropped)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `asr_otlp_spans_dropped_total{reason="export_failed"} 0`) {
		t.Errorf("spans dropped as export_failed, want none:\n%s", metrics)
	}
}
