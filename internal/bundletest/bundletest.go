// Package bundletest gives tests the real capture bundles kept in the
// repository: testdata/h200/NAME.tgz, captured on an H200 through the CLI
// (docs/GPU.md).
package bundletest

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Root returns the repository root: the nearest folder with a go.mod at or
// above the working directory, which go test sets to the test's package
// folder. Not this file's path (runtime.Caller): `make test` builds with
// -trimpath, which makes that path module-relative.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			panic("no go.mod at or above the working directory")
		}
		dir = up
	}
}

// H200 extracts testdata/h200/NAME.tgz into a folder of t's and returns
// the bundle's path.
func H200(t testing.TB, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(Root(), "testdata", "h200", name+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s.tgz: %v", name, err)
	}
	dir := filepath.Join(t.TempDir(), name)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatalf("%s.tgz: %v", name, err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, 0o644)
				}
			}
		}
		if err != nil {
			t.Fatalf("%s.tgz: %v", name, err)
		}
	}
}
