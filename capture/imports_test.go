package capture_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/asrprof/asrprof/"

// importRules is docs/ARCHITECTURE.md's import table, by package prefix:
// a package whose path starts with the key may import, of asrprof's own
// packages, only those whose path starts with one of the listed prefixes
// (a prefix "x" matches x and x/...). The longest matching key applies.
// There are no exceptions: a new import that breaks a rule is either a
// package in the wrong place or a rule to change here and in the doc.
var importRules = map[string][]string{
	// The data model and the statistics: nothing above them.
	"stats":   {},
	"table":   {},
	"model":   {"model", "stats"},
	"scripts": {},
	// The options tables' machinery: a flag, a default, a record per option.
	"option": {"table"},
	// The bundle: every record written to a bundle file, beside its file
	// name, its writer and reader, the events import. Below everything but
	// the model.
	"bundle": {"model", "stats", "bundle"},
	// The bundle's Parquet tables: derived from every file, spans.otlp
	// (read and joined by trace) included.
	"bundle/columns": {"model", "stats", "bundle", "trace/spans", "trace/join"},
	// Traces (OpenTelemetry): the model, the bundle and each other.
	"trace": {"model", "stats", "bundle", "trace", "option"},
	// Helpers that are not an API: nothing of ours above them.
	"internal": {"model", "stats", "table", "bundle", "trace", "internal"},
	// The three sides never import each other.
	"bench":    {"model", "stats", "table", "bundle", "trace", "internal", "bench"},
	"probe":    {"model", "stats", "table", "bundle", "trace", "internal", "probe", "option"},
	"analysis": {"model", "stats", "table", "bundle", "trace", "internal", "analysis", "scripts", "option"},
	// The reference server's Go side starts it for tests.
	"refserver": {"internal", "refserver"},
	// The report draws analysis tables; it touches no live system.
	"report": {"model", "stats", "table", "bundle", "trace", "internal", "analysis", "report", "option"},
	// capture is where bench and probe meet; it records, never interprets.
	"capture": {"model", "stats", "table", "bundle", "trace", "internal", "bench", "probe", "capture", "option"},
	// Runs of fresh servers and the daemon: around capture, no analysis.
	"runbook": {"model", "stats", "table", "bundle", "trace", "internal", "bench", "probe", "capture", "runbook", "option"},
	"serve":   {"model", "stats", "table", "bundle", "trace", "internal", "bench", "probe", "capture", "serve", "option"},
	// The CLI and the tools: everything.
	"cmd":   {""},
	"tools": {""},
}

func ruleFor(pkg string) (string, []string, bool) {
	best := ""
	for k := range importRules {
		if (pkg == k || strings.HasPrefix(pkg, k+"/")) && len(k) > len(best) {
			best = k
		}
	}
	allowed, ok := importRules[best]
	return best, allowed, ok && best != ""
}

func allowedImport(dep string, allowed []string) bool {
	for _, a := range allowed {
		if a == "" || dep == a || strings.HasPrefix(dep, a+"/") {
			return true
		}
	}
	return false
}

// goList lists every package of the module with its imports (non-test,
// then test): go list failing is a failure, never a skip.
func goList(t *testing.T) map[string][2][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}",
		module+"...").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list: %v %s", err, msg)
	}
	pkgs := map[string][2][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		own := func(s string) []string {
			var r []string
			for _, d := range strings.Fields(s) {
				if strings.HasPrefix(d, module) {
					r = append(r, strings.TrimPrefix(d, module))
				}
			}
			return r
		}
		pkgs[strings.TrimPrefix(f[0], module)] = [2][]string{own(f[1]), own(f[2])}
	}
	if len(pkgs) < 40 {
		t.Fatalf("go list found %d packages; the module has more than 40", len(pkgs))
	}
	return pkgs
}

// TestImportRules enforces the import table of docs/ARCHITECTURE.md on
// every package's own code. A test may import any package but a command
// (an integration test of capture may run the analyses over what it
// wrote); the architecture is what the product's code imports.
func TestImportRules(t *testing.T) {
	pkgs := goList(t)
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		key, allowed, ok := ruleFor(p)
		if !ok {
			t.Errorf("%s: no rule for this package in importRules (docs/ARCHITECTURE.md)", p)
			continue
		}
		deps := pkgs[p]
		for _, d := range deps[0] {
			if !allowedImport(d, allowed) {
				t.Errorf("%s imports %s: a %s package may import only %v", p, d, key, allowed)
			}
		}
		for _, d := range deps[1] {
			if d == "cmd" || strings.HasPrefix(d, "cmd/") || strings.HasPrefix(d, "tools/") {
				t.Errorf("%s's tests import %s: tests may import any package but commands", p, d)
			}
		}
	}
}

// The rules themselves, checked on made-up edges: each must refuse the
// import the doc forbids (a rule table that allows everything passes
// TestImportRules trivially).
func TestImportRulesRefuse(t *testing.T) {
	for _, c := range []struct {
		pkg, dep string
		ok       bool
	}{
		{"capture", "analysis", false},
		{"capture", "report", false},
		{"capture", "bench/driver", true},
		{"analysis", "bench/protocol", false},
		{"analysis", "model/summary", true},
		{"bench/driver", "probe", false},
		{"probe/sched", "bench/audio", false},
		{"probe/sched", "analysis", false},
		{"internal/cpulimit", "probe", false},
		{"internal/fixture", "bundle", true},
		{"bundle/columns", "analysis/engine", false},
		{"bundle", "trace/spans", false},
		{"bundle/events", "trace/join", false},
		{"bundle/columns", "trace/export", false},
		{"trace/spans", "bundle", true},
		{"probe/gpu", "bundle", true},
		{"model", "bundle", false},
		{"model/summary", "stats", true},
		{"stats", "model", false},
		{"table", "stats", false},
		{"report", "capture", false},
		{"report", "probe/gpu", false},
		{"runbook", "analysis", false},
		{"serve", "analysis", false},
		{"serve", "runbook", false},
		{"cmd/asrprof", "analysis", true},
	} {
		_, allowed, ok := ruleFor(c.pkg)
		if !ok {
			t.Fatalf("no rule for %s", c.pkg)
		}
		if got := allowedImport(c.dep, allowed); got != c.ok {
			t.Errorf("%s -> %s allowed = %v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}

// docs/ARCHITECTURE.md: the proxy and the record builder are bench
// packages that never touch the bundle.
func TestProxyImportRules(t *testing.T) {
	pkgs := goList(t)
	for _, pkg := range []string{"bench/proxy", "bench/record"} {
		for _, d := range pkgs[pkg][0] {
			for _, bad := range []string{"bundle", "bench/driver"} {
				if d == bad || strings.HasPrefix(d, bad+"/") {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}
