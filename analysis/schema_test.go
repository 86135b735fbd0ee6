package analysis

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"go.starlark.net/starlark"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
)

// fillRequest gives every field of a request a value that is not its
// zero, by reflection, so that a field added to model.Request is covered
// without editing this test.
func fillRequest(t *testing.T, v reflect.Value, seed int) {
	for i := range v.NumField() {
		f, k := v.Field(i), seed+i+1
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("v%d \"é\"\n", k))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(k))
		case reflect.Float64:
			f.SetFloat(float64(k) + 0.25)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]float64{float64(k) + 0.125, 0.5})) // not integral: JSON keeps them floats
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
			if f.Elem().Kind() == reflect.Struct {
				fillRequest(t, f.Elem(), k*10)
			} else {
				f.Elem().SetFloat(float64(2*k+1) / 16)
			}
		default:
			t.Fatalf("fillRequest: field %s of kind %v", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// The request schema is declared once, model.Request and its tags; every
// field of the struct is in model.RequestFields, in the JSONL reader, in
// requests.parquet (columns and reader) and among a request's Starlark
// attributes, each with the field's value.
func TestRequestSchema(t *testing.T) {
	var full model.Request
	fillRequest(t, reflect.ValueOf(&full).Elem(), 0)
	sparse := model.Request{ID: "8", Level: "c1", Status: "failed"} // omitempty fields absent, pointers nil
	want := []model.Request{full, sparse}

	st := reflect.TypeFor[model.Request]()
	if len(model.RequestFields) != st.NumField() {
		t.Fatalf("model.RequestFields has %d fields, model.Request %d", len(model.RequestFields), st.NumField())
	}
	for i, f := range model.RequestFields {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if f.Index != i || f.Name != name {
			t.Errorf("model.RequestFields[%d] = %s (field %d), want %s", i, f.Name, f.Index, name)
		}
	}

	// requests.jsonl → the one reader.
	dir := t.TempDir()
	var b strings.Builder
	for _, r := range want {
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(j, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.RequestsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := columns.ReadRequestsJSONL(filepath.Join(dir, bundle.RequestsFile))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadRequestsJSONL: %v\n got %+v\nwant %+v", err, got, want)
	}

	// requests.parquet: a column per field (a struct's fields flattened),
	// and back.
	s, err := columns.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	pq, err := os.Open(s.Path(columns.RequestsTable))
	if err != nil {
		t.Fatal(err)
	}
	defer pq.Close()
	info, _ := pq.Stat()
	pf, err := parquet.OpenFile(pq, info.Size())
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]bool{}
	for _, c := range pf.Schema().Fields() {
		cols[c.Name()] = true
	}
	for _, f := range model.RequestFields {
		names := []string{f.Name}
		if f.Kind == model.KindStruct {
			names = nil
			for _, sub := range f.Sub {
				names = append(names, f.Name+"_"+sub.Name)
			}
		}
		for _, n := range names {
			if !cols[n] {
				t.Errorf("requests.parquet has no column %s", n)
			}
		}
	}
	back, err := columns.ReadRequests(s.Path(columns.RequestsTable))
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("ReadRequests: %v\n got %+v\nwant %+v", err, back, want)
	}

	// Starlark: r.<json name> is the field's value as JSON has it.
	c := &Capture{reqs: once[[]model.Request]{v: want}}
	j, _ := json.Marshal(full)
	v, err := decodeJSON(j)
	if err != nil {
		t.Fatal(err)
	}
	js := v.(map[string]any)
	r := &requestValue{c: c}
	for _, f := range model.RequestFields {
		if !slices.Contains(r.AttrNames(), f.Name) {
			t.Errorf("no Starlark attribute %s", f.Name)
			continue
		}
		x, err := r.Attr(f.Name)
		if err != nil || x == nil {
			t.Errorf("r.%s = %v, %v", f.Name, x, err)
			continue
		}
		if f.Kind == model.KindStruct {
			for _, sub := range f.Sub {
				y, err := x.(starlark.HasAttrs).Attr(sub.Name)
				if w := toValue(js[f.Name].(map[string]any)[sub.Name]); err != nil || y == nil || y.String() != w.String() {
					t.Errorf("r.%s.%s = %v, want %v", f.Name, sub.Name, y, w)
				}
			}
			continue
		}
		if w := toValue(js[f.Name]); x.String() != w.String() {
			t.Errorf("r.%s = %v, want %v", f.Name, x, w)
		}
	}
	for _, f := range model.RequestFields {
		if f.Kind == model.KindOptFloat || f.Kind == model.KindStruct {
			if x, _ := (&requestValue{c: c, i: 1}).Attr(f.Name); x != starlark.None {
				t.Errorf("r.%s of a file request = %v, want None", f.Name, x)
			}
		}
	}
}
