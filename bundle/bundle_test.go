package bundle

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestWriteReadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(RequestsFile, model.Request{SampleID: "s", Hyp: strings.Repeat("x", i*100)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := w.WriteJSON(ManifestFile, model.Manifest{Schema: model.Schema}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := readRequests(b.Path(RequestsFile))
	if err != nil || len(reqs) != 50 {
		t.Fatalf("got %d requests, err %v", len(reqs), err)
	}
	if _, err := Create(dir, false); !errors.Is(err, ErrExists) {
		t.Errorf("Create over a bundle: %v, want ErrExists", err)
	}
	if _, err := Create(dir, true); err != nil {
		t.Errorf("Create with overwrite: %v", err)
	}
}

func TestReadJSONLTruncatedAndBad(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		n          int
		truncated  bool
		errSub     string
	}{
		{"whole", "{\"a\":1}\n{\"a\":2}\n", 2, false, ""},
		{"truncated tail", "{\"a\":1}\n{\"a\":2}\n{\"a\":", 2, true, ""},
		{"tail without newline but whole", "{\"a\":1}\n{\"a\":2}", 2, false, ""},
		{"blank lines", "\n{\"a\":1}\n\n", 1, false, ""},
		{"bad middle line", "{\"a\":1}\nnot json\n{\"a\":3}\n", 0, false, ":2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".jsonl")
			os.WriteFile(p, []byte(tc.body), 0o644)
			n := 0
			tr, err := ReadJSONL(p, func(v map[string]any) error { n++; return nil })
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSub) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err = %v, want one naming %s%s", err, p, tc.errSub)
				}
				return
			}
			if err != nil || n != tc.n || tr != tc.truncated {
				t.Fatalf("n=%d truncated=%v err=%v", n, tr, err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a capture bundle") {
		t.Errorf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"schema":"other/v9"}`), 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("wrong schema: %v", err)
	}
}

func TestReplaceJSONL(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 3; i++ {
		w.Append(RequestsFile, model.Request{ID: fmt.Sprint(i), Level: "proxy"})
	}
	if err := w.ReplaceJSONL(RequestsFile, 2, func(i int) any { return model.Request{ID: fmt.Sprint(i), Level: "c4"} }); err != nil {
		t.Fatal(err)
	}
	w.Append(RequestsFile, model.Request{ID: "late", Level: "c4"})
	reqs, err := readRequests(filepath.Join(dir, RequestsFile))
	if err != nil || len(reqs) != 3 || reqs[0].Level != "c4" || reqs[2].ID != "late" {
		t.Errorf("after replace: %v %+v", err, reqs)
	}
}

// readRequests reads requests.jsonl with encoding/json (the tables'
// reader, columns.ReadRequestsJSONL, imports this package).
func readRequests(path string) ([]model.Request, error) {
	var out []model.Request
	_, err := ReadJSONL(path, func(r model.Request) error { out = append(out, r); return nil })
	return out, err
}

// A failed atomic write leaves the file as it was and no temporary file;
// a successful one replaces it.
func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := ReplaceFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFileAtomic(p, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("after a failed write: %q, want old", b)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	if err := WriteFileAtomic(p, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("after a write: %q, want new", b)
	}
}
