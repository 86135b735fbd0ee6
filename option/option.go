// Package option is how asrprof declares a command's options: one table
// of Option values beside the settings struct they set, in the library
// package that uses them (capture.Options, runbook.Options,
// analysis.OptionTable, export.Options, doctor.Options, serve.Options).
// The table gives a flag per option (Define), its help group and help,
// its default (the struct's value when the flag is defined: the
// library's), and, through the field's json tag, the name a record of
// the settings keeps it under (Record). The model is google/pprof's
// internal/driver config: one declaration read by flags, the shell and
// the web UI.
package option

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/table"
)

// Option is one option of a command, written once.
type Option struct {
	Name  string // the flag, without its dashes: cpu-hz
	Group string // the group of --help it is shown in
	Usage string // its help; a `WORD` names its value
	// Field is the settings field the option sets, by name (a dotted
	// path into nested structs): its type picks the flag, its value when
	// the flag is defined is the default, its json tag the name a record
	// keeps it under. "" where Value gives the flag's value instead.
	Field string
	// Agent: the probes-only capture an agent runs for a remote one gets
	// the option, when its value is not the default (capture's agentArgs).
	Agent bool
	// Local: the option names what asrprof serve decides itself (where
	// a bundle goes) or starts (a server, a co-runner); its API refuses it.
	Local bool
	// Value, where set, is the flag's value given the binder passed to
	// Define: a pointer to a string, int, uint64, bool, float64 or
	// time.Duration, or a flag.Value.
	Value func(binder any) any
}

// Format is --format, every command's that prints tables: one
// vocabulary, table.Formats.
func Format(group string) Option {
	return Option{Name: "format", Group: group, Field: "Format", Usage: table.FormatUsage}
}

// Named is the option of opts called name; it panics where there is none
// (a table and its caller disagree: a programming error).
func Named(opts []Option, name string) Option {
	i := slices.IndexFunc(opts, func(o Option) bool { return o.Name == name })
	if i < 0 {
		panic("option: no option --" + name)
	}
	return opts[i]
}

// In is o in the help group group.
func (o Option) In(group string) Option { o.Group = group; return o }

// Groups are the help groups of opts, in order of first use.
func Groups(opts []Option) []string {
	var out []string
	for _, o := range opts {
		if !slices.Contains(out, o.Group) {
			out = append(out, o.Group)
		}
	}
	return out
}

// Field is the field of the struct settings points to that o sets.
func (o Option) field(settings any) reflect.Value {
	v := reflect.ValueOf(settings).Elem()
	for _, name := range strings.Split(o.Field, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			panic(fmt.Sprintf("option --%s: %T has no field %s", o.Name, settings, o.Field))
		}
	}
	return v
}

// Define defines o on fs, writing into the struct settings points to
// (or where o.Value, given binder, says).
func (o Option) Define(fs *flag.FlagSet, settings, binder any) {
	var p any
	if o.Value != nil {
		p = o.Value(binder)
	} else {
		p = o.field(settings).Addr().Interface()
	}
	switch p := p.(type) {
	case flag.Value:
		fs.Var(p, o.Name, o.Usage)
	case *string:
		fs.StringVar(p, o.Name, *p, o.Usage)
	case *int:
		fs.IntVar(p, o.Name, *p, o.Usage)
	case *uint64:
		fs.Uint64Var(p, o.Name, *p, o.Usage)
	case *bool:
		fs.BoolVar(p, o.Name, *p, o.Usage)
	case *float64:
		fs.Float64Var(p, o.Name, *p, o.Usage)
	case *time.Duration:
		fs.DurationVar(p, o.Name, *p, o.Usage)
	case *[]int:
		fs.Var((*IntList)(p), o.Name, o.Usage)
	case *[]float64:
		fs.Var((*FloatList)(p), o.Name, o.Usage)
	case *[]string:
		fs.Var((*stringList)(p), o.Name, o.Usage)
	default:
		panic(fmt.Sprintf("option --%s: no flag for a %T", o.Name, p))
	}
}

// DefineAll defines every option of opts on fs (Define).
func DefineAll(fs *flag.FlagSet, opts []Option, settings, binder any) {
	for _, o := range opts {
		o.Define(fs, settings, binder)
	}
}

// JSONName is the name a field marshals under ("-": none).
func JSONName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return cmp.Or(name, f.Name)
}

// Fields is the struct v as a record keeps it: every field under its
// json name, fields tagged "-" left out, durations in seconds (their
// names end in _s). Settings structs marshal themselves with it.
func Fields(v any) map[string]any {
	m := map[string]any{}
	rv := reflect.ValueOf(v)
	for _, f := range reflect.VisibleFields(rv.Type()) {
		if name := JSONName(f); name != "-" && f.IsExported() {
			x := rv.FieldByIndex(f.Index).Interface()
			if d, ok := x.(time.Duration); ok {
				x = d.Seconds()
			}
			m[name] = x
		}
	}
	return m
}

// Record is v (a settings struct) as a JSON object, as Fields gives it;
// numbers keep their digits (json.Number).
func Record(v any) (map[string]any, error) {
	b, err := json.Marshal(Fields(v))
	if err != nil {
		return nil, fmt.Errorf("recording the configuration: %w", err)
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("recording the configuration: %w", err)
	}
	return m, nil
}

// SplitList splits the value of a comma-separated list flag into its
// elements, spaces around them trimmed. An empty element (1,,4 or a
// trailing comma) is an error naming it; an empty value is no elements.
// Every list flag parses its value with it.
func SplitList(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	elems := strings.Split(v, ",")
	for i, e := range elems {
		if elems[i] = strings.TrimSpace(e); elems[i] == "" {
			return nil, fmt.Errorf("element %d is empty", i+1)
		}
	}
	return elems, nil
}

// NumberList is a comma-separated list of integers (IntList) or numbers
// (FloatList), as a flag.Value.
type NumberList[T int | float64] []T

// IntList is a comma-separated list of integers, as a flag.Value.
type IntList = NumberList[int]

// FloatList is a comma-separated list of numbers, as a flag.Value.
type FloatList = NumberList[float64]

func (l NumberList[T]) String() string {
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = fmt.Sprint(v) // an int as strconv.Itoa, a float64 as FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *NumberList[T]) Set(v string) error {
	*l = nil
	elems, err := SplitList(v)
	if err != nil {
		return err
	}
	for i, f := range elems {
		var x T
		want := "a number"
		switch p := any(&x).(type) {
		case *int:
			*p, err = strconv.Atoi(f)
			want = "an integer"
		case *float64:
			*p, err = strconv.ParseFloat(f, 64)
		}
		if err != nil {
			return fmt.Errorf("element %d, %q, is not %s", i+1, f, want)
		}
		*l = append(*l, x)
	}
	return nil
}

// stringList is a comma-separated list of strings.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) (err error) {
	*l, err = SplitList(v)
	return err
}

// Repeated is a string flag given once per value (--agent A --agent B),
// as a flag.Value.
type Repeated []string

func (l *Repeated) String() string     { return strings.Join(*l, ",") }
func (l *Repeated) Set(v string) error { *l = append(*l, v); return nil }

// Pick is the options of opts called names, in the order of names; it
// panics where one is missing (Named).
func Pick(opts []Option, names ...string) []Option {
	out := make([]Option, len(names))
	for i, n := range names {
		out[i] = Named(opts, n)
	}
	return out
}

// Quiet is --quiet, every command's that reports progress.
func Quiet(group string) Option {
	return Option{Name: "quiet", Group: group, Field: "Quiet", Usage: "no progress output"}
}
