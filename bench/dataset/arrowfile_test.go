package dataset_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/asrprof/asrprof/bench/dataset"
)

// TestLoadArrowFileFormat reads an Arrow IPC file (ARROW1 magic, the
// random-access format) of two record batches, where the other tests
// write the stream format Hugging Face datasets uses.
func TestLoadArrowFileFormat(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "audio", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	path := filepath.Join(t.TempDir(), "t.arrow")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]inline{
		{{id: "a", text: "one", audio: []byte("AAA")}, {id: "b", text: "two", audio: []byte("BB")}},
		{{id: "c", text: "three", audio: []byte("C")}},
	} {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for _, r := range batch {
			b.Field(0).(*array.StringBuilder).Append(r.id)
			b.Field(1).(*array.BinaryBuilder).Append(r.audio)
			b.Field(2).(*array.StringBuilder).Append(r.text)
		}
		rec := b.NewRecordBatch()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.LoadWith(path, dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	want := []inline{
		{id: "a", text: "one", lang: "en", name: "a", audio: []byte("AAA")},
		{id: "b", text: "two", lang: "en", name: "b", audio: []byte("BB")},
		{id: "c", text: "three", lang: "en", name: "c", audio: []byte("C")},
	}
	if got := inlineOf(t, ds); ds.Format != "hf-arrow" || !reflect.DeepEqual(got, want) {
		t.Errorf("format %q, samples\n %+v\nwant\n %+v", ds.Format, got, want)
	}
}
