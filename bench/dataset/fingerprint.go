package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// fingerprintVersion starts every fingerprint's input, so a change to the
// scheme can never collide with an old fingerprint.
const fingerprintVersion = "asrprof-dataset-fingerprint-v1"

// Fingerprint returns the lower-case hex SHA-256 of the samples, in order.
// The hash input is the version string, then for each sample its id, its
// transcript and the bytes of its audio file (or of its inline audio cell),
// each preceded by its length as
// a big-endian uint64, so no two different datasets hash the same input.
// Audio files are streamed, not loaded whole. Language and audio path do not
// count: moving a dataset keeps its fingerprint.
func Fingerprint(samples []Sample) (string, error) {
	h := sha256.New()
	writeField(h, []byte(fingerprintVersion))
	for _, s := range samples {
		writeField(h, []byte(s.ID))
		writeField(h, []byte(s.Text))
		if s.Inline != nil {
			// Inline audio counts as a file of the same bytes would.
			writeField(h, s.Inline.Bytes)
			continue
		}
		if err := writeFile(h, s.Audio); err != nil {
			return "", fmt.Errorf("fingerprint: sample %q: %w", s.ID, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// writeFile adds the length and content of the file at path to h, failing if
// the file changes size while being read.
func writeFile(h hash.Hash, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(st.Size()))
	h.Write(n[:])
	copied, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if copied != st.Size() {
		return fmt.Errorf("%s: size changed while hashing (%d bytes, then %d)", path, st.Size(), copied)
	}
	return nil
}
