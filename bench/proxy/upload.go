package proxy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"mime"
	"strings"
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
	u, err := formFile(body, params["boundary"])
	if err != nil {
		return u, fmt.Errorf("%w: %v", errNoAudio, err)
	}
	u.fileName = cmp.Or(u.fileName, "upload")
	return u, nil
}

// formFile finds the file part (named "file", or the first with a file
// name) and the language field of a multipart/form-data body (RFC 7578).
// The audio it returns is a slice of body, not a copy: mime/multipart
// would copy the 100 KB part through its buffers (most of the proxy's
// CPU per request, measured).
func formFile(body []byte, boundary string) (uploaded, error) {
	var u uploaded
	if boundary == "" {
		return u, errors.New("multipart content type without a boundary")
	}
	delim := []byte("--" + boundary)
	_, rest, ok := bytes.Cut(body, delim)
	if !ok {
		return u, errors.New("multipart body without its boundary")
	}
	found := false
	for !bytes.HasPrefix(rest, []byte("--")) { // until the closing delimiter
		var hdr, content []byte
		// Transport padding, then CRLF, ends the delimiter line.
		if _, rest, ok = bytes.Cut(rest, []byte("\n")); !ok {
			return u, errors.New("multipart body ends inside a delimiter line")
		}
		if hdr, content, ok = bytes.Cut(rest, []byte("\r\n\r\n")); !ok {
			return u, errors.New("multipart part without the blank line after its headers")
		}
		if content, rest, ok = bytes.Cut(content, append([]byte("\r\n"), delim...)); !ok {
			return u, errors.New("multipart part without a closing boundary")
		}
		name, file := partNames(hdr)
		switch {
		case !found && (name == "file" || file != ""):
			u.audio, u.fileName, found = content, file, true
		case name == "language" && len(content) <= 64:
			u.lang = strings.TrimSpace(string(content))
		}
	}
	if !found {
		return u, errors.New("the multipart form has no file part")
	}
	return u, nil
}

// partNames reads the form name and file name from a part's headers.
func partNames(hdr []byte) (name, file string) {
	for _, line := range bytes.Split(hdr, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || !strings.EqualFold(string(bytes.TrimSpace(k)), "Content-Disposition") {
			continue
		}
		_, params, err := mime.ParseMediaType(string(bytes.TrimSpace(v)))
		if err != nil {
			return "", ""
		}
		return params["name"], params["filename"]
	}
	return "", ""
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

func (x *Index) lookup(audio []byte) (Ref, bool) {
	if x == nil {
		return Ref{}, false
	}
	r, ok := x.m[maphash.Bytes(x.seed, audio)]
	return r, ok
}
