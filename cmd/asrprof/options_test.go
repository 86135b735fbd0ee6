package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/probe/doctor"
	"github.com/asrprof/asrprof/report"
	"github.com/asrprof/asrprof/runbook"
	"github.com/asrprof/asrprof/serve"
	"github.com/asrprof/asrprof/trace/export"
)

// flagDeclarations are the flag package's methods that declare a flag.
var flagDeclarations = map[string]bool{}

func init() {
	for _, m := range []string{"String", "Int", "Int64", "Uint", "Uint64", "Bool", "Float64", "Duration", "TextVar", "Func", "BoolFunc", "Var"} {
		flagDeclarations[m], flagDeclarations[m+"Var"] = true, true
	}
}

// flagDecls lists the calls in the Go source src that declare a flag:
// a declaring function of the flag package called on flag or on a flag
// set named fs, given a flag name as a literal.
func flagDecls(name string, src any) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !flagDeclarations[sel.Sel.Name] {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "flag" || x.Name == "fs") {
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out = append(out, x.Name+"."+sel.Sel.Name+"("+lit.Value+")")
					break
				}
			}
		}
		return true
	})
	return out, nil
}

// No flag of asrprof is declared outside an options table: no Go file of
// the program (the module but option/, whose Define is the one place,
// and tools/ and internal/, which are no asrprof command) declares one.
func TestNoFlagOutsideAnOptionsTable(t *testing.T) {
	// The check finds what it looks for.
	got, err := flagDecls("x.go", "package x\nfunc f() { fs.Duration(\"timeout\", 30*time.Second, \"u\"); fs.Var(&v, \"knob\", \"u\"); flag.StringVar(&s, \"a\", \"\", \"u\") }")
	if err != nil || len(got) != 3 {
		t.Fatalf("the check found %q, %v in a file declaring 3 flags", got, err)
	}
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "option", "tools", "internal", "refserver", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		decls, err := flagDecls(path, nil)
		for _, d := range decls {
			t.Errorf("%s: %s declares a flag outside an options table", rel, d)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every flag a command's --help shows is an option of a table, with the
// table's help.
func TestEveryFlagIsAnOption(t *testing.T) {
	tables := [][]option.Option{capture.Options(), analysis.OptionTable(), report.OptionTable(), export.Options(),
		doctor.OptionTable(), serve.Options()}
	for _, c := range []string{"capture", "ab", "sensitivity", "what-if"} {
		tables = append(tables, runbook.Options(c))
	}
	known := map[string]bool{}
	for _, opts := range tables {
		for _, o := range opts {
			known[o.Name] = true
		}
	}
	for _, c := range commands() {
		for _, e := range helpEntries(t, helpOf(t, c.name)) {
			if !known[e.name] {
				t.Errorf("%s --%s is no option of a table", c.name, e.name)
			}
		}
	}
}
