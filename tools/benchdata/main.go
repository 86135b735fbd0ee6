// Command benchdata writes the inputs of `make bench`: one WAV file of the
// requested size, a JSONL manifest that lists it N times, and the same
// upload as a vegeta target (multipart body + header), so both load
// generators send identical requests.
//
// With -bundle DIR it writes instead the analysis benchmark's capture
// bundle: a simulated SGLang-Omni server (analysis/fixture), 4 levels of
// -requests/4 requests, 10 request-profile events each (100,000 requests
// and 1,000,000 events by default: requests.jsonl ~57 MB, events.jsonl
// ~189 MB), in the documented bundle format.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"mime/multipart"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"

	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fixture"
)

func main() {
	out := flag.String("out", "runs/refserver/data", "output folder")
	n := flag.Int("n", 4000, "manifest entries")
	size := flag.Int("bytes", 102400, "WAV file size in bytes")
	url := flag.String("url", "http://127.0.0.1:18099", "server base URL for the vegeta target")
	bundleDir := flag.String("bundle", "", "write the analysis benchmark's SGLang-Omni bundle into this folder instead")
	requests := flag.Int("requests", 100000, "with -bundle: requests in the bundle (a multiple of 8)")
	flag.Parse()
	if *bundleDir != "" {
		cfg := fixture.Config{Format: fixture.SGLang, Levels: fixture.SweepLevels(true), Repeats: 1,
			RequestsPerPass: *requests / 4, ClockOffset: 50e6, Seed: 9, NoClientSpans: true}
		tr, err := fixture.Write(*bundleDir, cfg)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("benchdata: %s: %d requests, %d events\n", *bundleDir, tr.Requests, 10*tr.Requests)
		return
	}
	must(os.MkdirAll(*out, 0o755))
	wav := makeWAV(*size)
	must(os.WriteFile(filepath.Join(*out, "a.wav"), wav, 0o644))
	var m strings.Builder
	for i := 0; i < *n; i++ {
		fmt.Fprintf(&m, "{\"id\":\"b%06d\",\"audio\":\"a.wav\",\"text\":\"ok\",\"lang\":\"en\"}\n", i)
	}
	must(os.WriteFile(filepath.Join(*out, "manifest.jsonl"), []byte(m.String()), 0o644))
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="a.wav"`)
	h.Set("Content-Type", "audio/wav")
	pw, _ := mw.CreatePart(h)
	pw.Write(wav)
	mw.WriteField("language", "en")
	mw.WriteField("response_format", "json")
	mw.Close()
	bodyPath, _ := filepath.Abs(filepath.Join(*out, "vegeta.body"))
	must(os.WriteFile(bodyPath, body.Bytes(), 0o644))
	target := fmt.Sprintf("POST %s/v1/audio/transcriptions\nContent-Type: %s\n@%s\n", strings.TrimRight(*url, "/"), mw.FormDataContentType(), bodyPath)
	must(os.WriteFile(filepath.Join(*out, "vegeta.targets"), []byte(target), 0o644))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// makeWAV returns a 16 kHz mono 16-bit WAV file of exactly size bytes
// (size even, at least 44).
func makeWAV(size int) []byte {
	samples := make([]int16, (size-44)/2)
	for i := range samples {
		samples[i] = int16((i*131)%4000 - 2000)
	}
	return audiotest.WAV16(16000, 1, samples...)
}
