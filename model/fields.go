package model

import (
	"fmt"
	"reflect"
	"strings"
)

// FieldKind is the type of a record's field, as every format of it holds
// it.
type FieldKind uint8

const (
	KindString   FieldKind = iota // string
	KindInt                       // int (a count or a code: int32 in Parquet)
	KindInt64                     // int64 (unix ns)
	KindFloat                     // float64
	KindBool                      // bool
	KindOptFloat                  // *float64: nil (null) when not measured
	KindFloats                    // []float64 (a Parquet list)
	KindStruct                    // a pointer to a struct of int fields (Errors): nil, or all of them
	KindObject                    // map[string]any: a JSON object (its JSON text in Parquet)
)

// Field is one field of a record: its JSON name, which is also its
// Parquet column and its Starlark attribute.
type Field struct {
	Name      string
	GoName    string // the struct field's name
	Kind      FieldKind
	Dict      bool         // a string of few distinct values (tag parquet:",dict"): dictionary-encoded in Parquet
	OmitEmpty bool         // JSON leaves the field out when it is empty (tag json:",omitempty")
	Index     int          // the field's index in the struct
	Offset    uintptr      // and its offset
	Type      reflect.Type // and its Go type
	Sub       []Field      // KindStruct: the fields of the struct, each KindInt
	// Span is the attribute of the client's request span that holds the
	// field (tag span:"asrprof.level"; "" for none: trace/clientspan).
	Span string
}

// RequestFields are the fields of Request, in its order (read-only).
var RequestFields = FieldsOf(reflect.TypeFor[Request]())

// FieldsOf derives the fields of struct type t from its tags; it panics on
// a field type that no format of the bundle knows, so that a new field
// cannot be half declared.
func FieldsOf(t reflect.Type) []Field {
	kinds := map[reflect.Type]FieldKind{
		reflect.TypeFor[string](): KindString, reflect.TypeFor[int](): KindInt, reflect.TypeFor[int64](): KindInt64,
		reflect.TypeFor[float64](): KindFloat, reflect.TypeFor[bool](): KindBool,
		reflect.TypeFor[*float64](): KindOptFloat, reflect.TypeFor[[]float64](): KindFloats,
		reflect.TypeFor[map[string]any](): KindObject,
	}
	out := make([]Field, t.NumField())
	for i := range out {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		f := Field{Name: name, GoName: sf.Name, Index: i, Offset: sf.Offset, Type: sf.Type, Dict: sf.Tag.Get("parquet") == ",dict",
			OmitEmpty: opts == "omitempty", Span: sf.Tag.Get("span")}
		k, ok := kinds[sf.Type]
		switch {
		case ok:
			f.Kind = k
		case sf.Type.Kind() == reflect.Pointer && sf.Type.Elem().Kind() == reflect.Struct:
			f.Kind, f.Sub, ok = KindStruct, FieldsOf(sf.Type.Elem()), true
			for _, s := range f.Sub {
				ok = ok && s.Kind == KindInt
			}
		}
		if !ok || name == "" || name == "-" || f.Dict && f.Kind != KindString {
			panic(fmt.Sprintf("model: %s.%s: %s with tag %q is not a kind of field the bundle's formats know", t.Name(), sf.Name, sf.Type, sf.Tag))
		}
		out[i] = f
	}
	return out
}
