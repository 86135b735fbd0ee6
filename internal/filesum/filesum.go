// Package filesum is the one SHA-256 of a file that asrprof records: a
// dataset's audio in its fingerprint (bench/dataset) and a run's
// executable in its provenance (runbook).
package filesum

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
)

// SHA256 returns the SHA-256 of the file at path, its FileInfo when opened
// and a copy of up to its first head bytes, failing if the file changes
// size while being read.
func SHA256(path string, head int) (sum []byte, st fs.FileInfo, first []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, nil, nil, err
	}
	r := bufio.NewReader(f)
	first, _ = r.Peek(head)
	first = append([]byte(nil), first...)
	h := sha256.New()
	copied, err := r.WriteTo(h)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if copied != st.Size() {
		return nil, nil, nil, fmt.Errorf("%s: size changed while hashing (%d bytes, then %d)", path, st.Size(), copied)
	}
	return h.Sum(nil), st, first, nil
}
