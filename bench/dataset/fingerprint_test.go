package dataset_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/dataset"
)

func TestFingerprint(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]any{
		"a.wav":      wav(1, 800),
		"b.wav":      wav(2, 800),
		"copy/a.wav": wav(1, 800),
		"copy/b.wav": wav(2, 800),
		"flipped/b.wav": func() []byte {
			b := wav(2, 800)
			b[len(b)-1] ^= 1 // one bit of the last sample
			return b
		}(),
	})
	p := func(name string) string { return filepath.Join(root, filepath.FromSlash(name)) }
	base := []dataset.Sample{
		{ID: "a", Audio: p("a.wav"), Text: "hello", Lang: "en"},
		{ID: "b", Audio: p("b.wav"), Text: "world", Lang: "en"},
	}
	fp := func(t *testing.T, s []dataset.Sample) string {
		t.Helper()
		got, err := dataset.Fingerprint(s)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ref := fp(t, base)
	if len(ref) != 64 || strings.Trim(ref, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not lower-case hex SHA-256", ref)
	}

	edit := func(f func(s []dataset.Sample) []dataset.Sample) []dataset.Sample {
		return f(append([]dataset.Sample(nil), base...))
	}
	tests := []struct {
		name    string
		samples []dataset.Sample
		same    bool
	}{
		{"unchanged", edit(func(s []dataset.Sample) []dataset.Sample { return s }), true},
		{"moved files", edit(func(s []dataset.Sample) []dataset.Sample {
			s[0].Audio, s[1].Audio = p("copy/a.wav"), p("copy/b.wav")
			return s
		}), true},
		{"language ignored", edit(func(s []dataset.Sample) []dataset.Sample { s[0].Lang = "fr"; return s }), true},
		{"text changed", edit(func(s []dataset.Sample) []dataset.Sample { s[1].Text = "world!"; return s }), false},
		{"audio byte changed", edit(func(s []dataset.Sample) []dataset.Sample { s[1].Audio = p("flipped/b.wav"); return s }), false},
		{"id changed", edit(func(s []dataset.Sample) []dataset.Sample { s[0].ID = "a2"; return s }), false},
		{"order changed", []dataset.Sample{base[1], base[0]}, false},
		{"sample dropped", base[:1], false},
		// Without separators these would hash the same bytes.
		{"text moved into id", edit(func(s []dataset.Sample) []dataset.Sample { s[0].ID, s[0].Text = "ah", "ello"; return s }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fp(t, tt.samples); (got == ref) != tt.same {
				t.Errorf("fingerprint %s, reference %s: want same=%v", got, ref, tt.same)
			}
		})
	}
}

// TestFingerprintScheme pins the documented hash input (docs/DATASETS.md),
// so a change to the scheme is a deliberate one.
func TestFingerprintScheme(t *testing.T) {
	audioBytes := wav(7, 100)
	root := tree(t, t.TempDir(), map[string]any{"x.wav": audioBytes})
	got, err := dataset.Fingerprint([]dataset.Sample{{ID: "utt", Audio: filepath.Join(root, "x.wav"), Text: "some words"}})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	audioSum := sha256.Sum256(audioBytes)
	for _, field := range [][]byte{[]byte("asrprof-dataset-fingerprint-v2"), []byte("utt"), []byte("some words"), audioSum[:]} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(field))))
		h.Write(field)
	}
	if want := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("Fingerprint = %s, want %s", got, want)
	}
}

// TestFingerprintSharedFile: samples that name one file hash its digest
// each time (the file itself is read once), as the scheme says.
func TestFingerprintSharedFile(t *testing.T) {
	audioBytes := wav(3, 100)
	root := tree(t, t.TempDir(), map[string]any{"x.wav": audioBytes})
	x := filepath.Join(root, "x.wav")
	got, err := dataset.Fingerprint([]dataset.Sample{{ID: "u1", Audio: x, Text: "a"}, {ID: "u2", Audio: x, Text: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	sum := sha256.Sum256(audioBytes)
	for _, field := range [][]byte{[]byte("asrprof-dataset-fingerprint-v2"), []byte("u1"), []byte("a"), sum[:], []byte("u2"), []byte("b"), sum[:]} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(field))))
		h.Write(field)
	}
	if want := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("Fingerprint = %s, want %s", got, want)
	}
}

func TestFingerprintMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.wav")
	_, err := dataset.Fingerprint([]dataset.Sample{{ID: "g", Audio: missing}})
	if err == nil || !strings.Contains(err.Error(), `sample "g"`) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fingerprint error = %v, want a not-exist error naming the sample", err)
	}
}
