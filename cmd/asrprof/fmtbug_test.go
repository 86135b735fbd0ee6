package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoFmtErrorsInGoldens scans every table and message golden of the
// module (the CLI's .stdout/.stderr, the analyses' .txt and .md) for
// "%!", which is how Go's fmt prints a verb given the wrong kind of value
// (an H200 busy-thread line once read "GPU util %!f(int64=) %").
func TestNoFmtErrorsInGoldens(t *testing.T) {
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "runs", "data", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.Contains(filepath.ToSlash(p), "/testdata/") {
			return nil
		}
		switch filepath.Ext(p) {
		case ".stdout", ".stderr", ".txt", ".md", ".golden":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if i := bytes.Index(b, []byte("%!")); i >= 0 {
			line := 1 + bytes.Count(b[:i], []byte("\n"))
			t.Errorf("%s:%d: a fmt error (%%!) in a golden: %q", p, line, firstLine(b[i:]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 { // the walk must have found the goldens it is about
		t.Fatalf("scanned %d golden files, want the module's (over 50)", n)
	}
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
