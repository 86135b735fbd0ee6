package otlp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/trace/spans"
)

type answer struct {
	code int
	body []byte
}

func serve(h http.Handler, ct string, body []byte) answer {
	req := httptest.NewRequest(http.MethodPost, TracesPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Body.Bytes()}
}

func FuzzHTTPHandler(f *testing.F) {
	f.Add([]byte{}, uint8(0), false)
	f.Add(protoBody(f, makeTraces(2, "f")), uint8(0), false)
	f.Add(jsonBody(f, makeTraces(2, "f")), uint8(1), false)
	f.Add(gzipped(protoBody(f, makeTraces(2, "f"))), uint8(0), true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`), uint8(1), false)
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10}, uint8(0), false)
	cts := []string{"application/x-protobuf", "application/json", "text/plain", "", "application/json; charset=\"", "application/protobuf"}
	f.Fuzz(func(t *testing.T, body []byte, cti uint8, gz bool) {
		r := NewReceiver(Config{MaxRequestBytes: 1 << 16}, (&collector{}).sink)
		req := httptest.NewRequest(http.MethodPost, TracesPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", cts[int(cti)%len(cts)])
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		r.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 413, 415:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		s := r.Stats()
		if s.Requests != 1 || s.Malformed+s.TooLarge+s.Rejected > 1 {
			t.Fatalf("stats %+v after one request", s)
		}
	})
}

// dirAppender appends to files in a directory, as bundle.Writer does.
type dirAppender struct {
	dir   string
	files map[string]*os.File
}

func (d *dirAppender) AppendRaw(name string, b []byte) error {
	f, ok := d.files[name]
	if !ok {
		var err error
		f, err = os.OpenFile(filepath.Join(d.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		d.files[name] = f
	}
	_, err := f.Write(b)
	return err
}

func BenchmarkReceiverHTTPProto(b *testing.B) {
	const batch = 512
	body := protoBody(b, makeTraces(batch, "bench"))
	app := &dirAppender{dir: b.TempDir(), files: map[string]*os.File{}}
	defer func() {
		for _, f := range app.files {
			f.Close()
		}
	}()
	w := spans.NewWriter(app)
	r := NewReceiver(Config{}, w.Write)
	h := r.Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, TracesPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctProto)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	b.ReportMetric(float64(r.Stats().Spans)/b.Elapsed().Seconds(), "spans/s")
}
