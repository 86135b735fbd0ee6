package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// readParquet reads the Parquet file f: it picks want among its
// top-level columns (pickColumns), then emits each row's cells in the
// picked columns. name is the file in messages.
func readParquet(f *os.File, name string, want Columns, emit func(picked, tableRow) error) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("loading dataset: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("%s: not a readable Parquet file%s: %w", name, lfsHint(f), err)
	}
	schema := pf.Schema()
	var cols []tableCol
	for _, fld := range schema.Fields() {
		cols = append(cols, tableCol{name: fld.Name(), kind: parquetKind(fld), typ: parquetType(fld)})
	}
	p, err := pickColumns(name, cols, want)
	if err != nil {
		return err
	}
	// leaf is the index of a leaf column, -1 for none (no language column: "").
	leaf := func(path ...string) int {
		if c, ok := schema.Lookup(path...); ok {
			return c.ColumnIndex
		}
		return -1
	}
	idCol, textCol, langCol := leaf(p.ID), leaf(p.Text), leaf(p.Lang)
	bytesCol, pathCol := -1, -1
	switch p.audioKind {
	case colAudio:
		bytesCol, pathCol = leaf(p.Audio, "bytes"), leaf(p.Audio, "path")
	case colBytes:
		bytesCol = leaf(p.Audio)
	case colString:
		pathCol = leaf(p.Audio)
	}

	r := parquet.NewReader(pf)
	defer r.Close()
	buf := make([]parquet.Row, 32)
	for {
		n, err := r.ReadRows(buf)
		for _, row := range buf[:n] {
			var tr tableRow
			for _, v := range row {
				switch c := v.Column(); {
				case c == idCol:
					tr.id = parquetString(v)
				case c == textCol:
					tr.text = parquetString(v)
				case c == langCol:
					tr.lang = parquetString(v)
				case c == bytesCol:
					if !v.IsNull() {
						// The reader reuses its buffers: keep a copy.
						tr.audioBytes, tr.audioHasBytes = append([]byte{}, v.ByteArray()...), true
					}
				case c == pathCol:
					if !v.IsNull() {
						tr.audioPath = string(v.ByteArray())
					}
				}
			}
			if err := emit(p, tr); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: reading rows: %w", name, err)
		}
	}
}

// parquetString reads an id, text or language cell: a string, or an
// integer written in decimal.
func parquetString(v parquet.Value) nullString {
	if v.IsNull() {
		return nullString{}
	}
	switch v.Kind() {
	case parquet.Int32:
		return nullString{strconv.FormatInt(int64(v.Int32()), 10), true}
	case parquet.Int64:
		return nullString{strconv.FormatInt(v.Int64(), 10), true}
	default:
		return nullString{string(v.ByteArray()), true}
	}
}

// parquetKind says what a top-level field holds.
func parquetKind(n parquet.Node) colKind {
	if n.Repeated() {
		return colOther
	}
	if !n.Leaf() {
		for _, f := range n.Fields() {
			if f.Leaf() && !f.Repeated() && (f.Name() == "bytes" && parquetLeafKind(f) == colBytes ||
				f.Name() == "path" && parquetLeafKind(f) == colString) {
				return colAudio
			}
		}
		return colOther
	}
	return parquetLeafKind(n)
}

func parquetLeafKind(n parquet.Node) colKind {
	t := n.Type()
	switch t.Kind() {
	case parquet.Int32, parquet.Int64:
		return colInt
	case parquet.ByteArray:
		if lt := t.LogicalType(); lt != nil {
			if _, ok := lt.Value.(*format.StringType); ok {
				return colString
			}
		}
		if ct := t.ConvertedType(); ct != nil && *ct == deprecated.UTF8 {
			return colString
		}
		return colBytes
	}
	return colOther
}

func parquetType(n parquet.Node) string {
	if !n.Leaf() {
		return "group"
	}
	return n.Type().String()
}

// lfsHint says when a table file is a Git LFS pointer, the text a hub
// snapshot cloned without git-lfs holds in place of the data.
func lfsHint(f io.ReaderAt) string {
	var b [64]byte
	n, _ := f.ReadAt(b[:], 0)
	if bytes.HasPrefix(b[:n], []byte("version https://git-lfs")) {
		return " (it is a Git LFS pointer: fetch the data with git lfs pull, or download with huggingface-cli)"
	}
	return ""
}
