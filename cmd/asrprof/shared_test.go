package main

import (
	"os"
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
//
// A test that asks again for a capture it has read already is a new
// iteration (-count N): the capture is made anew for it, so that every
// iteration measures a server of its own.
type sharedCaptures struct {
	mu      sync.Mutex
	root    string
	entries map[string]*sharedCapture
}

type sharedCapture struct {
	folder   string          // what build was given
	dir      string          // the bundle ("" while unmade)
	failedIn string          // the test whose build failed
	readers  map[string]bool // the tests that got it
}

var shared = &sharedCaptures{entries: map[string]*sharedCapture{}}

// get returns the bundle for key, calling build (with a folder of its own
// under the shared root) the first time. A build that failed fails every
// later caller too, naming the test where it failed, rather than being
// tried again or read half-made.
func (s *sharedCaptures) get(t *testing.T, key string, build func(t *testing.T, dir string) string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e != nil && e.readers[t.Name()] {
		// this test read it before: a new iteration makes its own
		os.RemoveAll(e.folder)
		e = nil
	}
	if e != nil {
		if e.failedIn != "" {
			t.Fatalf("the shared capture %q failed in %s", key, e.failedIn)
		}
		e.readers[t.Name()] = true
		t.Logf("the capture %q was made by an earlier test; this one reads it", key)
		return e.dir
	}
	e = &sharedCapture{failedIn: t.Name(), readers: map[string]bool{t.Name(): true}}
	s.entries[key] = e
	if s.root == "" {
		d, err := os.MkdirTemp("", "asrprof-shared-")
		if err != nil {
			t.Fatal(err)
		}
		s.root = d
	}
	dir, err := os.MkdirTemp(s.root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	e.folder = dir
	b := build(t, dir) // a t.Fatal here leaves failedIn set
	e.dir, e.failedIn = b, ""
	return b
}

// removeAll deletes the shared bundles (TestMain, after the tests).
func (s *sharedCaptures) removeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != "" {
		os.RemoveAll(s.root)
	}
}
