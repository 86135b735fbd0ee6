package cpu

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A stripped library's static functions are named from its separate
// debug file, found by build-id under the debug directory; without one
// its frames stay file+0xoffset and the symbolizer says why.
func TestDebugFileByBuildID(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "hot.c")
	os.WriteFile(src, []byte("static int hot_inner(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * x; return s; }\nint hot_outer(int x) { return hot_inner(x) + 1; }\n"), 0o644)
	lib := filepath.Join(dir, "libhot.so")
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("gcc", "-O0", "-shared", "-fPIC", "-Wl,--build-id", "-o", lib, src)
	dbg := filepath.Join(dir, "libhot.debug")
	run("objcopy", "--only-keep-debug", lib, dbg)
	run("strip", "--strip-all", lib)

	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f)
	f.Close()
	if len(id) < 8 {
		t.Fatalf("build-id %q", id)
	}
	inner := func(t *symtab) bool {
		for _, s := range t.syms {
			if s.Name == "hot_inner" {
				return true
			}
		}
		return false
	}
	// No debug file: only the exported function, and why.
	none := t.TempDir()
	st, err := readELFSymtab(lib, none)
	if err != nil {
		t.Fatal(err)
	}
	if inner(st) || !strings.Contains(st.why, "stripped (no .symtab)") || !strings.Contains(st.why, "build-id "+id) || !strings.Contains(st.why, filepath.Join(none, lib)+".debug") {
		t.Errorf("without a debug file: hot_inner named %v, why %q", inner(st), st.why)
	}
	// Installed under .build-id/xx/rest.debug: the static function too.
	debugDir := t.TempDir()
	p := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	os.MkdirAll(filepath.Dir(p), 0o755)
	b, _ := os.ReadFile(dbg)
	os.WriteFile(p, b, 0o644)
	st, err = readELFSymtab(lib, debugDir)
	if err != nil {
		t.Fatal(err)
	}
	if !inner(st) || st.why != "" {
		t.Errorf("with its debug file: hot_inner named %v, why %q", inner(st), st.why)
	}
	// The symbolizer counts unnamed frames per file and says why.
	s := newSymbolizer()
	s.noteUnnamed(lib, "stripped (no .symtab) and no debug file (build-id "+id+")")
	s.noteUnnamed(lib, "stripped (no .symtab) and no debug file (build-id "+id+")")
	if got := s.Unnamed(); !strings.HasPrefix(got, "libhot.so (2 stack frames): stripped") {
		t.Errorf("Unnamed: %q", got)
	}
}
