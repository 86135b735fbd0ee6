package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
)

// compare says when its two captures do not measure the same thing: one
// is incomplete, or they sent different audio. Two copies of one bundle
// get neither note.
func TestCompareWorkloadNotes(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cur := writeGolden(t, tmp, "sglang")
	base := filepath.Join(tmp, "base")
	if err := os.CopyFS(base, os.DirFS(cur)); err != nil {
		t.Fatal(err)
	}
	setManifest := func(dir string, f func(m map[string]any)) {
		p := filepath.Join(dir, bundle.ManifestFile)
		var m map[string]any
		readJSONInto(t, p, &m)
		f(m)
		b, _ := json.Marshal(m)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{cur, base} {
		setManifest(dir, func(m map[string]any) {
			m["fingerprint"] = map[string]any{"dataset_sha256": "aaaaaaaaaaaaaaaa", "dataset_count": 12}
		})
	}
	const incomplete, audio = "the baseline capture (base) is incomplete (interrupted before the last pass finished)", "the captures sent different audio (current: 12 samples, sha256 aaaaaaaaaaaa…; baseline: 205, bbbbbbbbbbbb…)"
	code, stdout, stderr := runCLI("compare", cur, base)
	if code != exitOK || strings.Contains(stdout, "incomplete") || strings.Contains(stdout, "different audio") {
		t.Fatalf("two copies of one bundle: exit %d\n%s%s", code, stdout, stderr)
	}
	setManifest(base, func(m map[string]any) {
		m["complete"] = false
		m["incomplete"] = []string{"interrupted before the last pass finished"}
		m["fingerprint"] = map[string]any{"dataset_sha256": "bbbbbbbbbbbbbbbb", "dataset_count": 205}
	})
	code, stdout, stderr = runCLI("compare", cur, base)
	if code != exitOK || !strings.Contains(stdout, incomplete) || !strings.Contains(stdout, audio) {
		t.Fatalf("exit %d; want the notes %q and %q\n%s%s", code, incomplete, audio, stdout, stderr)
	}
}
