package bundle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// jsonNames are the json names of a struct type's fields, and the
// names of the types it embeds.
func jsonNames(st *ast.StructType) (out, embeds []string) {
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			x := f.Type
			if s, ok := x.(*ast.StarExpr); ok {
				x = s.X
			}
			if id, ok := x.(*ast.Ident); ok {
				embeds = append(embeds, id.Name)
			}
		}
		if f.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(f.Tag.Value)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out, embeds
}

// structs calls fn for every struct type declared in the non-test Go
// files under root whose path matches keep.
func structs(t *testing.T, root string, keep func(path string) bool, fn func(path, name string, names, embeds []string)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || !keep(p) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					names, embeds := jsonNames(st)
					fn(p, ts.Name.Name, names, embeds)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// No package but this one declares a struct whose json fields are a
// record's (docs/BUNDLE.md: one record type per file): a struct outside
// bundle with four or more json fields, all of them fields of one record
// here (with the parts it embeds) and at least six or half of them, is a
// reader's or writer's copy of that record. (A pass's level, repeat,
// warmup and bounds, probe.Period, are no record's copy.)
func TestNoRecordCopies(t *testing.T) {
	mine, _ := filepath.Abs(".")
	here := func(p string) bool { abs, _ := filepath.Abs(p); return filepath.Dir(abs) == mine }
	own := map[string][]string{}
	embeds := map[string][]string{}
	structs(t, ".", here, func(_, name string, names, emb []string) { own[name], embeds[name] = names, emb })
	var fieldsOf func(name string, into map[string]bool)
	fieldsOf = func(name string, into map[string]bool) {
		for _, n := range own[name] {
			into[n] = true
		}
		for _, e := range embeds[name] {
			fieldsOf(e, into)
		}
	}
	records := map[string]map[string]bool{}
	for name := range own {
		records[name] = map[string]bool{}
		fieldsOf(name, records[name])
	}
	if len(records) < 20 || len(records["GPUUtil"]) != 1 || !records["GPURecord"]["util_pct"] || !records["SchedRecord"]["runq_count"] {
		t.Fatalf("found %d record types here, GPUUtil %v, SchedRecord %v: the parse is broken", len(records), records["GPUUtil"], records["SchedRecord"])
	}
	seen := 0
	structs(t, "..", func(p string) bool { return !here(p) }, func(path, name string, names, _ []string) {
		seen++
		if len(names) < 4 {
			return
		}
	next:
		for rec, fields := range records {
			for _, n := range names {
				if !fields[n] {
					continue next
				}
			}
			if len(names) >= min(6, (len(fields)+1)/2) {
				t.Errorf("%s: %s has only fields of bundle.%s (%s): use the record", path, name, rec, strings.Join(names, ", "))
			}
		}
	})
	if seen < 200 {
		t.Fatalf("saw %d structs in the module; it has many more", seen)
	}
}
