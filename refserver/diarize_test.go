package refserver

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/score/diarize"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// The diarization mode (--diarize): the diarization model answers in the
// markup, timed within the audio, with the dataset's speakers; the plain
// model on the same server answers plain text.
func TestDiarizeMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the reference server")
	}
	requirePocketSphinx(t)
	ds := refservertest.Diarset(t)
	base := startServer(t, nil, "--diarize", ds, "--max-running-requests", "1", "--build-workers", "1")
	// dz-03: S01, S02, then S01 again, 11.7 s.
	audio, err := os.ReadFile(filepath.Join(filepath.Dir(ds), "audio", "dz-03.wav"))
	if err != nil {
		t.Fatal(err)
	}
	resp, body, err := transcribe(t.Context(), t, base, audio,
		map[string]string{"model": "pocketsphinx-en-us-diarize", "response_format": "verbose_json", "max_new_tokens": "65536"}, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("diarize request: %v %s", err, body)
	}
	var v struct {
		Text     string  `json:"text"`
		Duration float64 `json:"duration"`
		Segments []struct {
			Start, End    float64
			Speaker, Text string
		} `json:"segments"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	segs := diarize.Segments(v.Text)
	if len(segs) < 2 || len(segs) != len(v.Segments) {
		t.Fatalf("markup %q: %d segments, verbose_json %d", v.Text, len(segs), len(v.Segments))
	}
	speakers := map[string]bool{}
	for i, s := range segs {
		speakers[s.Speaker] = true
		if s.Start < 0 || s.End > v.Duration+0.05 || (i > 0 && s.Start < segs[i-1].End) {
			t.Errorf("segment %d [%.2f, %.2f] outside the %.2f s audio or out of order: %q", i, s.Start, s.End, v.Duration, v.Text)
		}
		if strings.ContainsAny(v.Segments[i].Text, "[]") || "["+strings.Replace(v.Segments[i].Speaker, "S0", "S", 1)+"]" != s.Speaker {
			t.Errorf("verbose_json segment %d: %+v for %v", i, v.Segments[i], s)
		}
	}
	if !speakers["[S1]"] || !speakers["[S2]"] {
		t.Errorf("speakers %v in %q, want S01 and S02", speakers, v.Text)
	}
	// Scored against its reference the way the capture scores it: DER is
	// defined, and the recognizer's times put it well below 100 %.
	ref := ""
	for _, line := range strings.Split(readFile(t, ds), "\n") {
		if strings.Contains(line, `"dz-03"`) {
			var e struct{ Text string }
			json.Unmarshal([]byte(line), &e)
			ref = e.Text
		}
	}
	if ref == "" {
		t.Fatalf("dz-03 not in %s", ds)
	}
	m := diarize.Compute([]diarize.Row{{ID: "dz-03", Ref: ref, Pred: v.Text}}).Metrics
	if m.DER == nil || *m.DER >= 0.6 {
		t.Errorf("DER %v of %q against %q", m.DER, v.Text, ref)
	}

	resp, body, err = transcribe(t.Context(), t, base, audio, map[string]string{"response_format": "json"}, nil)
	if err != nil || resp.StatusCode != 200 || strings.Contains(string(body), "[S") {
		t.Errorf("plain model on a --diarize server: %v %d %s", err, resp.StatusCode, body)
	}
	if code, models := get(t, base+"/v1/models"); code != 200 || !strings.Contains(models, "pocketsphinx-en-us-diarize") {
		t.Errorf("/v1/models: %d %s", code, models)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A bad --diarize manifest stops the server at start with the file and line.
func TestDiarizeBadManifest(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "m.jsonl")
	os.WriteFile(bad, []byte(`{"audio":"a.wav","text":"[0.0][S01]x[1.0]"}`+"\n"+`{"audio":"b.wav","text":"no markup"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.wav"), []byte("RIFF"), 0o644)
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	out, err := exec.Command(python, script, "--port", "0", "--diarize", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), bad+" line 2: text has no timed speaker turn") {
		t.Errorf("exit %v: %s", err, out)
	}
}
