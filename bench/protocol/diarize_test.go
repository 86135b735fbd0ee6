package protocol_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/asrprof/asrprof/bench/protocol"
)

// TestDiarizeRequest checks the transcribe-diarize client sends what
// MOSS-Transcribe-Diarize's benchmark client sends, plain and streaming,
// and reads the markup from the answer.
func TestDiarizeRequest(t *testing.T) {
	const markup = "[0.00][S01]hello[1.00][1.00][S02]world[2.00]"
	type seen struct {
		fields map[string]string
		file   []byte
		header string
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		s := seen{fields: map[string]string{}, header: r.Header.Get("x-sglang-omni-route-stream")}
		for k, v := range r.MultipartForm.Value {
			s.fields[k] = v[0]
		}
		f, _, err := r.FormFile("file")
		if err == nil {
			s.file, _ = io.ReadAll(f)
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		if s.fields["stream"] == "true" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"type\":\"transcript.text.delta\",\"delta\":\"[0.00][S01]hello\"}\n\n")
			fmt.Fprintf(w, "data: {\"type\":\"transcript.text.done\",\"text\":%q}\n\ndata: [DONE]\n\n", markup)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":%q,"segments":[{"text":"hello"},{"text":"world"}]}`, markup)
	}))
	defer srv.Close()

	for _, stream := range []bool{false, true} {
		c, err := protocol.NewDiarize(protocol.Options{Target: srv.URL, Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		job := &protocol.Job{FileName: "a.wav", ContentType: "audio/wav", Audio: []byte("RIFFdata"),
			Model: protocol.DiarizeModel, Language: "en"}
		r := c.Do(t.Context(), job)
		if r.Err != nil || r.Text != markup {
			t.Fatalf("stream %v: err %v text %q, want %q", stream, r.Err, r.Text, markup)
		}
	}
	if len(got) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(got))
	}
	for i, want := range []map[string]string{
		// No language: SGLang-Omni's client sends none unless told to.
		{"model": protocol.DiarizeModel, "max_new_tokens": "65536", "response_format": "verbose_json"},
		{"model": protocol.DiarizeModel, "max_new_tokens": "65536", "response_format": "json", "stream": "true"},
	} {
		s := got[i]
		if fmt.Sprint(s.fields) != fmt.Sprint(want) {
			t.Errorf("request %d fields %v, want %v", i, s.fields, want)
		}
		if string(s.file) != "RIFFdata" {
			t.Errorf("request %d file %q", i, s.file)
		}
		if wantH := map[int]string{0: "", 1: "true"}[i]; s.header != wantH {
			t.Errorf("request %d x-sglang-omni-route-stream %q, want %q", i, s.header, wantH)
		}
	}
}
