package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"
	"mime/multipart"
	"strings"

	"github.com/asrprof/asrprof/bench/audio"
)

// uploaded is what parseUpload found in a transcription upload.
type uploaded struct {
	fileName string
	audio    []byte
	lang     string // the form's language field
}

// parseUpload finds the audio of an upload: the multipart form's "file"
// part (or its first part with a file name), or the whole body when it is
// raw audio/*. complete is false when the proxy did not keep the whole body.
func parseUpload(ctype string, body []byte, complete bool) (uploaded, error) {
	if !complete {
		return uploaded{}, fmt.Errorf("%w: the upload was not kept whole (larger than the limit, or not read to its end)", errNoAudio)
	}
	mt, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		return uploaded{}, fmt.Errorf("%w: content type %q: %v", errNoAudio, ctype, err)
	}
	if strings.HasPrefix(mt, "audio/") {
		return uploaded{fileName: "upload", audio: body}, nil
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var u uploaded
	found := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u, fmt.Errorf("%w: reading the multipart form: %v", errNoAudio, err)
		}
		name := part.FormName()
		switch {
		case !found && (name == "file" || part.FileName() != ""):
			b, err := io.ReadAll(part)
			if err != nil {
				return u, fmt.Errorf("%w: reading the form's %q part: %v", errNoAudio, name, err)
			}
			u.audio, u.fileName, found = b, part.FileName(), true
		case name == "language":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			u.lang = strings.TrimSpace(string(b))
		}
	}
	if !found {
		return u, fmt.Errorf("%w: the multipart form has no file part", errNoAudio)
	}
	if u.fileName == "" {
		u.fileName = "upload"
	}
	return u, nil
}

// probeAudio measures the upload's audio (bench/audio).
func probeAudio(u uploaded) (float64, error) {
	info, err := audio.ProbeBytes(u.fileName, u.audio)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errNoAudio, err)
	}
	return info.DurationS, nil
}

// Ref is the reference of one dataset sample.
type Ref struct {
	SampleID string
	Text     string
	Lang     string
	AudioS   float64
}

// Index finds a sample by the content of its audio: a 64-bit hash
// (hash/maphash, seeded per index) of the file's bytes. Two samples with
// the same bytes are one entry (the first added).
type Index struct {
	seed maphash.Seed
	m    map[uint64]Ref
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{seed: maphash.MakeSeed(), m: map[uint64]Ref{}} }

// Add indexes audio (a file's bytes) as ref; it reports false when the
// same audio was already added.
func (x *Index) Add(audio []byte, ref Ref) bool {
	k := maphash.Bytes(x.seed, audio)
	if _, dup := x.m[k]; dup {
		return false
	}
	x.m[k] = ref
	return true
}

// Len is the number of distinct audio files indexed.
func (x *Index) Len() int { return len(x.m) }

func (x *Index) lookup(audio []byte) (Ref, bool) {
	if x == nil {
		return Ref{}, false
	}
	r, ok := x.m[maphash.Bytes(x.seed, audio)]
	return r, ok
}
