package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/asrprof/asrprof/internal/filesum"
)

// fingerprintVersion starts every fingerprint's input, so a change to the
// scheme can never collide with an old fingerprint. v1 hashed every
// sample's audio bytes in line; v2 hashes each distinct file once and puts
// its SHA-256 in line.
const fingerprintVersion = "asrprof-dataset-fingerprint-v2"

// Fingerprint returns the lower-case hex SHA-256 of the samples, in order.
// The hash input is the version string, then for each sample its id, its
// transcript and the SHA-256 of its audio's bytes (an audio file's, or an
// inline audio cell's: the same bytes give the same fingerprint in every
// layout), each preceded by its length as a big-endian uint64, so no two
// different datasets hash the same input. Each distinct audio path is read
// once, as a stream, however many samples name it (a manifest may list one
// file many times). Language and audio path do not count: moving a dataset
// keeps its fingerprint.
func Fingerprint(samples []Sample) (string, error) {
	h := sha256.New()
	writeField(h, []byte(fingerprintVersion))
	files := map[string][]byte{} // path -> SHA-256 of its bytes
	for _, s := range samples {
		writeField(h, []byte(s.ID))
		writeField(h, []byte(s.Text))
		if s.Inline != nil {
			sum := sha256.Sum256(s.Inline.Bytes)
			writeField(h, sum[:])
			continue
		}
		sum, ok := files[s.Audio]
		if !ok {
			var err error
			if sum, _, _, err = filesum.SHA256(s.Audio, 0); err != nil {
				return "", fmt.Errorf("fingerprint: sample %q: %w", s.ID, err)
			}
			files[s.Audio] = sum
		}
		writeField(h, sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeField(h hash.Hash, b []byte) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
	h.Write(b)
}
