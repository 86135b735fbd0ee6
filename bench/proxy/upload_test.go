package proxy

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/textproto"
	"testing"
)

func TestParseUpload(t *testing.T) {
	audio := []byte("RIFF....not really audio\r\n--almost a boundary\r\n")
	form := func(parts ...[3]string) (string, []byte) { // name, filename, content
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for _, p := range parts {
			h := textproto.MIMEHeader{}
			cd := `form-data; name="` + p[0] + `"`
			if p[1] != "" {
				cd += `; filename="` + p[1] + `"`
			}
			h.Set("Content-Disposition", cd)
			w, _ := mw.CreatePart(h)
			w.Write([]byte(p[2]))
		}
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
	ct, body := form([3]string{"model", "", "m"}, [3]string{"language", "", " zh "}, [3]string{"file", "u1.wav", string(audio)}, [3]string{"stream", "", "true"})
	u, err := parseUpload(ct, body, true)
	if err != nil || !bytes.Equal(u.audio, audio) || u.fileName != "u1.wav" || u.lang != "zh" {
		t.Errorf("parsed %q %q %q, %v", u.audio, u.fileName, u.lang, err)
	}
	// A file part under another name still counts; the first one wins.
	ct, body = form([3]string{"audio", "x.flac", "A"}, [3]string{"file", "y.wav", "B"})
	if u, err := parseUpload(ct, body, true); err != nil || string(u.audio) != "A" || u.fileName != "x.flac" {
		t.Errorf("first file part: %q %q %v", u.audio, u.fileName, err)
	}
	// Raw audio bodies.
	if u, err := parseUpload("audio/wav", audio, true); err != nil || !bytes.Equal(u.audio, audio) {
		t.Errorf("raw audio: %v", err)
	}
	noFileCT, noFile := form([3]string{"model", "", "m"})
	for name, tc := range map[string]struct {
		ct       string
		body     []byte
		complete bool
	}{
		"no file part": {noFileCT, noFile, true},
		"truncated":    {ct, body[:len(body)/2], true},
		"not kept":     {ct, body, false},
		"no boundary":  {"multipart/form-data", body, true},
		"bad type":     {"multipart/form-data; boundary=", body, true},
	} {
		if _, err := parseUpload(tc.ct, tc.body, tc.complete); !errors.Is(err, errNoAudio) {
			t.Errorf("%s: %v, want errNoAudio", name, err)
		}
	}
}
