package refserver

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The Python modules of this folder import one another in one direction
// only (docs/REFSERVER.md): rscommon.py holds what refserver.py, router.py
// and whisper_engine.py share, and imports none of them; refserver.py
// imports whisper_engine, router and refserver_diarize; nothing imports
// refserver. TestNoPythonImportCircle reads every *.py here (no Python
// needed, so it never skips), builds the graph of imports among these
// modules (top-level and nested `import X` / `from X import ...`), and
// fails on a cycle, on a module that imports refserver, or on any mention
// of sys.modules (the old circle was held together by registering
// refserver.py there under a second name).
func TestNoPythonImportCircle(t *testing.T) {
	files, err := filepath.Glob("*.py")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no *.py files in the refserver folder")
	}
	local := map[string]bool{}
	for _, f := range files {
		local[strings.TrimSuffix(filepath.Base(f), ".py")] = true
	}
	graph := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if strings.Contains(src, "sys.modules") {
			for i, line := range strings.Split(src, "\n") {
				if strings.Contains(line, "sys.modules") {
					t.Errorf("%s:%d mentions sys.modules: %s", f, i+1, strings.TrimSpace(line))
				}
			}
		}
		mod := strings.TrimSuffix(filepath.Base(f), ".py")
		graph[mod] = nil
		for _, imp := range pythonImports(src) {
			if local[imp] && imp != mod {
				graph[mod] = appendUnique(graph[mod], imp)
			}
		}
	}

	// The parser must see the imports that are known to be there, or a
	// broken regexp would make every check below pass on an empty graph.
	for _, want := range [][2]string{
		{"refserver", "rscommon"}, {"refserver", "whisper_engine"}, {"refserver", "router"},
		{"refserver", "refserver_diarize"}, {"router", "rscommon"}, {"whisper_engine", "rscommon"},
	} {
		if local[want[0]] && local[want[1]] && !contains(graph[want[0]], want[1]) {
			t.Errorf("%s.py: no import of %s found (imports seen: %v)", want[0], want[1], graph[want[0]])
		}
	}
	for _, m := range sortedKeys(graph) {
		if contains(graph[m], "refserver") {
			t.Errorf("%s.py imports refserver: shared code belongs in rscommon.py", m)
		}
	}
	if c := findCycle(graph); c != nil {
		t.Errorf("import cycle among refserver/*.py: %s", strings.Join(c, " -> "))
	}
	for _, m := range sortedKeys(graph) {
		t.Logf("%s -> %v", m, graph[m])
	}
}

// The cycle finder and the import parser on made-up input.
func TestNoPythonImportCircleChecker(t *testing.T) {
	if c := findCycle(map[string][]string{"a": {"b"}, "b": {"c"}, "c": nil, "d": {"a", "c"}}); c != nil {
		t.Errorf("DAG reported as cyclic: %v", c)
	}
	if c := findCycle(map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}); len(c) != 4 || c[0] != c[3] {
		t.Errorf("cycle a->b->c->a: got %v", c)
	}
	src := `"""Docstring: import nothing here, from fake import x."""
import os, sys as system
import alpha.beta
from gamma import delta  # a comment: import epsilon
from . import relative


def f():
    import zeta
    if True:
        from eta.theta import (iota,
                               kappa)
x = "import lambda_"
`
	got := pythonImports(src)
	want := []string{"os", "sys", "alpha", "gamma", "zeta", "eta"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("pythonImports = %v, want %v", got, want)
	}
}

var (
	pyTripleQuoted = regexp.MustCompile(`(?s)""".*?"""|'''.*?'''`)
	pyImportRE     = regexp.MustCompile(`^\s*import\s+(.+)$`)
	pyFromRE       = regexp.MustCompile(`^\s*from\s+([A-Za-z_][\w.]*)\s+import\b`)
	pyModuleRE     = regexp.MustCompile(`^([A-Za-z_]\w*)(?:\.\w+)*(?:\s+as\s+\w+)?$`)
)

// pythonImports returns the top-level package names that src imports, in
// order of appearance, at any nesting depth (imports inside functions
// count). Triple-quoted strings and comments are ignored; relative imports
// (from . import x) name no package and are skipped.
func pythonImports(src string) []string {
	src = pyTripleQuoted.ReplaceAllString(src, "")
	var out []string
	for _, line := range strings.Split(src, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimRight(line, " \t\r\\")
		if m := pyFromRE.FindStringSubmatch(line); m != nil {
			out = appendUnique(out, strings.SplitN(m[1], ".", 2)[0])
			continue
		}
		if m := pyImportRE.FindStringSubmatch(line); m != nil {
			for _, item := range strings.Split(m[1], ",") {
				if mm := pyModuleRE.FindStringSubmatch(strings.TrimSpace(item)); mm != nil {
					out = appendUnique(out, mm[1])
				}
			}
		}
	}
	return out
}

// findCycle returns a cycle of graph as a path whose first and last
// elements are the same node, or nil when graph is a DAG.
func findCycle(graph map[string][]string) []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(n string) []string
	visit = func(n string) []string {
		color[n] = grey
		stack = append(stack, n)
		for _, m := range graph[n] {
			switch color[m] {
			case grey:
				for i, s := range stack {
					if s == m {
						return append(append([]string{}, stack[i:]...), m)
					}
				}
			case white:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return nil
	}
	for _, n := range sortedKeys(graph) {
		if color[n] == white {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendUnique(list []string, s string) []string {
	if contains(list, s) {
		return list
	}
	return append(list, s)
}
