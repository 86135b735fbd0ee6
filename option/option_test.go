package option

import (
	"flag"
	"reflect"
	"slices"
	"testing"
	"time"
)

type inner struct {
	Grace time.Duration `json:"grace_s"`
}

type settings struct {
	Name   string        `json:"name"`
	N      int           `json:"n"`
	On     bool          `json:"on"`
	Levels []int         `json:"levels"`
	Wait   time.Duration `json:"wait_s"`
	Knobs  Repeated      `json:"knobs"`
	Format string        `json:"-"`
	Inner  inner         `json:"inner"`
	hidden string
}

func testTable() []Option {
	return []Option{
		{Name: "name", Group: "A", Field: "Name", Usage: "a `NAME`"},
		{Name: "n", Group: "A", Field: "N", Usage: "`N`"},
		{Name: "on", Group: "B", Field: "On", Usage: "switch"},
		{Name: "levels", Group: "A", Field: "Levels", Usage: "`LIST`"},
		{Name: "wait", Group: "B", Field: "Wait", Usage: "`DURATION`"},
		{Name: "knob", Group: "B", Field: "Knobs", Usage: "repeatable"},
		Format("C"),
		{Name: "grace", Group: "C", Field: "Inner.Grace", Usage: "nested"},
		{Name: "hidden", Group: "C", Value: func(b any) any { return &b.(*settings).hidden }, Usage: "through Value"},
	}
}

// Each option sets its field, its default is the field's value when it is
// defined, and a Value reaches its binder.
func TestDefine(t *testing.T) {
	s := settings{Name: "x", N: 3, Wait: time.Second, Format: "text"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	DefineAll(fs, testTable(), &s, &s)
	if d := fs.Lookup("n").DefValue; d != "3" || fs.Lookup("format").DefValue != "text" || fs.Lookup("wait").DefValue != "1s" {
		t.Errorf("defaults: n %q, format %q, wait %q", d, fs.Lookup("format").DefValue, fs.Lookup("wait").DefValue)
	}
	err := fs.Parse([]string{"--name", "y", "--n", "4", "--on", "--levels", "1, 8", "--wait", "2s", "--knob", "a", "--knob", "b",
		"--format", "csv", "--grace", "3s", "--hidden", "h"})
	if err != nil {
		t.Fatal(err)
	}
	want := settings{Name: "y", N: 4, On: true, Levels: []int{1, 8}, Wait: 2 * time.Second, Knobs: Repeated{"a", "b"}, Format: "csv",
		Inner: inner{3 * time.Second}, hidden: "h"}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("parsed %+v, want %+v", s, want)
	}
	if g := Groups(testTable()); !slices.Equal(g, []string{"A", "B", "C"}) {
		t.Errorf("groups %q", g)
	}
	if p := Pick(testTable(), "wait", "name"); p[0].Name != "wait" || p[1].Name != "name" {
		t.Errorf("Pick: %v", p)
	}
}

// A record keeps every field under its json name, durations in seconds,
// and leaves out fields tagged "-".
func TestRecord(t *testing.T) {
	rec, err := Record(settings{Name: "x", Wait: 1500 * time.Millisecond, Format: "csv", Inner: inner{time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if rec["wait_s"].(interface{ String() string }).String() != "1.5" || rec["name"] != "x" {
		t.Errorf("record %v", rec)
	}
	if _, ok := rec["Format"]; ok {
		t.Errorf("a field tagged - is recorded: %v", rec)
	}
	if _, ok := rec["-"]; ok {
		t.Errorf("a field tagged - is recorded: %v", rec)
	}
	if f, ok := reflect.TypeFor[settings]().FieldByName("Wait"); !ok || JSONName(f) != "wait_s" {
		t.Errorf("JSONName of Wait: %q", JSONName(f))
	}
}

// An option that names no field is a programming error, caught at once.
func TestDefineUnknownField(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a field the settings lack")
		}
	}()
	Option{Name: "x", Field: "Nope"}.Define(flag.NewFlagSet("t", flag.ContinueOnError), &settings{}, nil)
}
