package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// sharedCaptures are the bundles that several tests read and none
// writes to beyond what `asrprof analyze` caches in them: a capture of
// the reference server in one state, made once by the first test that
// asks for it (each caller passes the same recipe, so whichever runs first,
// or alone under -run, makes it). They live under a folder of the test
// binary's, removed by TestMain, not under one test's TempDir.
type sharedCaptures struct {
	mu    sync.Mutex
	root  string
	dirs  map[string]string // key → the bundle
	tried map[string]string // key → the test that began making it
}

var shared = &sharedCaptures{dirs: map[string]string{}, tried: map[string]string{}}

// dir returns the folder the shared bundles live in (made on first use).
func (s *sharedCaptures) dir(t *testing.T) string {
	t.Helper()
	if s.root == "" {
		d, err := os.MkdirTemp("", "asrprof-shared-")
		if err != nil {
			t.Fatal(err)
		}
		s.root = d
	}
	return s.root
}

// get returns the bundle for key, calling build (with a folder of its own
// under the shared root) the first time. A build that failed fails every
// later caller too, naming the test where it failed, rather than being
// tried again or read half-made.
func (s *sharedCaptures) get(t *testing.T, key string, build func(t *testing.T, dir string) string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.dirs[key]; ok {
		t.Logf("the capture %q was made by an earlier test; this one reads it", key)
		return d
	}
	if who, ok := s.tried[key]; ok {
		t.Fatalf("the shared capture %q failed in %s", key, who)
	}
	s.tried[key] = t.Name()
	dir, err := os.MkdirTemp(s.dir(t), strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	b := build(t, dir) // a t.Fatal here leaves key in tried, not in dirs
	s.dirs[key] = b
	return b
}

// removeAll deletes the shared bundles (TestMain, after the tests).
func (s *sharedCaptures) removeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != "" {
		os.RemoveAll(filepath.Clean(s.root))
	}
}
