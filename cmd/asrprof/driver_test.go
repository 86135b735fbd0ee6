package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// TestCaptureOneFileManyTimes runs `asrprof capture` the way `make bench`
// does, over a manifest that lists one file many times: every request
// carries the file intact (the upload built once and shared), distinct
// request ids and trace ids, and the manifest's dataset fingerprint is the
// documented v2 scheme (the file hashed once, its digest per sample).
func TestCaptureOneFileManyTimes(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	dir := t.TempDir()
	wav := audiotest.WAV16(16000, 1, make([]int16, 8000)...)
	if err := os.WriteFile(filepath.Join(dir, "a.wav"), wav, 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 24
	var m strings.Builder
	for i := range n {
		fmt.Fprintf(&m, "{\"id\":\"b%03d\",\"audio\":\"a.wav\",\"text\":%q}\n", i, fakeasr.DefaultText)
	}
	ds := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(ds, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "cap")
	var stdout, stderr bytes.Buffer
	args := []string{"capture", "--target", srv.URL, "--dataset", ds, "--concurrency", "4", "--repeats", "2",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}
	if code := runTest(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	reqs := srv.Requests()
	if len(reqs) != 2*n {
		t.Fatalf("server saw %d requests, want %d", len(reqs), 2*n)
	}
	sum := sha256.Sum256(wav)
	ids, tps := map[string]bool{}, map[string]bool{}
	for _, r := range reqs {
		if r.ParseError != "" || r.FileSize != len(wav) || r.FileSHA256 != sum || r.FileName != "a.wav" {
			t.Fatalf("request %d: %q, %d bytes named %q; want a.wav intact", r.N, r.ParseError, r.FileSize, r.FileName)
		}
		ids[r.RequestID], tps[r.TraceParent] = true, true
	}
	if len(ids) != 2*n || len(tps) != 2*n {
		t.Errorf("%d distinct request ids and %d traceparents over %d requests", len(ids), len(tps), 2*n)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	field := func(p []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		h.Write(p)
	}
	field([]byte("asrprof-dataset-fingerprint-v2"))
	for i := range n {
		field(fmt.Appendf(nil, "b%03d", i))
		field([]byte(fakeasr.DefaultText))
		field(sum[:])
	}
	if got, want := b.Manifest.Fingerprint.DatasetSHA256, hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("dataset_sha256 %s, want %s", got, want)
	}
}
