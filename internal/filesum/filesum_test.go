package filesum

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	data := []byte("#!/usr/bin/env python3\nprint(1)\n")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, st, head, err := SHA256(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); string(sum) != string(want[:]) {
		t.Errorf("sum %x, want %x", sum, want)
	}
	if st.Size() != int64(len(data)) || string(head) != "#!/usr/b" {
		t.Errorf("size %d head %q, want %d %q", st.Size(), head, len(data), "#!/usr/b")
	}
	if _, _, head, err := SHA256(p, 1000); err != nil || string(head) != string(data) {
		t.Errorf("head past the end: %q, %v", head, err)
	}
	if _, _, _, err := SHA256(filepath.Join(t.TempDir(), "none"), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
