package option

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ParseHeader takes curl's -H form and refuses, without quoting a value,
// what would break the request or fight the client's own headers.
func TestParseHeader(t *testing.T) {
	h, err := ParseHeader([]string{"Authorization: Bearer k:1", "x-route:  a ", "X-Route: b"})
	if err != nil || h.Get("Authorization") != "Bearer k:1" || strings.Join(h.Values("X-Route"), ",") != "a,b" {
		t.Errorf("got %v, %v", h, err)
	}
	for _, tt := range []struct{ line, want string }{
		{"Authorization Bearer secret", `header 1: want "Name: value"`},
		{": secret", `header 1: want "Name: value"`},
		{"Bad Name: secret", `header 1: want "Name: value"`},
		{"X-A: secret\r\nX-B: 1", "header X-A: its value has a line break"},
		{"X-A: sec\x01ret", "header X-A: its value has a line break or a control character"},
		{"content-type: secret", "header content-type: the client writes it itself"},
		{"Host: secret", "header Host: the client writes it itself"},
		{"connection: secret", "header connection: the client writes it itself"},
	} {
		_, err := ParseHeader([]string{tt.line})
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: err %v, want %q and no value", tt.line, err, tt.want)
		}
	}
}

// "@FILE" reads a header a line; an error names the file and the line's
// place in it, not its value.
func TestParseHeaderFile(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("Authorization: Bearer k1\n\nX-Route: a\n"), 0o600)
	os.WriteFile(bad, []byte("X-Route: a\nAuthorization Bearer secret\n"), 0o600)
	h, err := ParseHeader([]string{"X-Route: b", "@" + good})
	if err != nil || h.Get("Authorization") != "Bearer k1" || strings.Join(h.Values("X-Route"), ",") != "b,a" {
		t.Errorf("got %v, %v", h, err)
	}
	if _, err := ParseHeader([]string{"@" + bad}); err == nil || !strings.Contains(err.Error(), bad+": header 2: want") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a bad line: %v", err)
	}
	if _, err := ParseHeader([]string{"X-A: 1", "@" + filepath.Join(dir, "none")}); err == nil || !strings.Contains(err.Error(), "header 2: open") {
		t.Errorf("a missing file: %v", err)
	}
}
