package capture

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAudioFilesShared: samples naming one file share one copy of its
// bytes; distinct files keep their own.
func TestAudioFilesShared(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.wav"), filepath.Join(dir, "b.wav")
	if err := os.WriteFile(a, []byte("aaaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := audioFiles{}
	x1, err1 := f.read(a)
	x2, err2 := f.read(a)
	y, err3 := f.read(b)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if &x1[0] != &x2[0] {
		t.Error("the same file read twice gave two copies")
	}
	if &x1[0] == &y[0] || string(y) != "bbbb" || string(x1) != "aaaa" {
		t.Errorf("distinct files mixed up: %q %q", x1, y)
	}
	if _, err := f.read(filepath.Join(dir, "gone.wav")); err == nil {
		t.Error("a missing file read without error")
	}
}
