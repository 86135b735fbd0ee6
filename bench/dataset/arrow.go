package dataset

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// loadHFArrow reads a Hugging Face datasets directory of Arrow files: a
// save_to_disk directory (dataset_dict.json naming the splits, one
// subdirectory each; or one split with state.json listing its files), or a
// load_dataset cache directory (dataset_info.json beside
// <builder>-<split>[-NNNNN-of-NNNNN].arrow).
func loadHFArrow(root string, opts Options) (*Dataset, error) {
	// Without dataset_dict.json, root is the one directory, of no split.
	dd := struct {
		Splits []string `json:"splits"`
	}{Splits: []string{""}}
	if b, err := os.ReadFile(filepath.Join(root, "dataset_dict.json")); err == nil {
		dd.Splits = nil
		if err := json.Unmarshal(b, &dd); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(root, "dataset_dict.json"), err)
		}
	}
	var files []tableFile
	for _, split := range dd.Splits {
		fs, err := hfSplitFiles(filepath.Join(root, split), split)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .arrow files beside dataset_info.json", root)
	}
	return loadTables(root, root, "hf-arrow", files, opts)
}

// hfSplitFiles lists the Arrow files of one datasets directory: those
// state.json names (its split from "_split", else split), or every *.arrow
// but the cache-*.arrow that map() leaves, with the split its name gives.
func hfSplitFiles(dir, split string) ([]tableFile, error) {
	var files []tableFile
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		var st struct {
			DataFiles []struct {
				Filename string `json:"filename"`
			} `json:"_data_files"`
			Split *string `json:"_split"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
		}
		if split == "" && st.Split != nil {
			split = *st.Split
		}
		for _, f := range st.DataFiles {
			files = append(files, tableFile{path: filepath.Join(dir, f.Filename), read: readArrow, split: split})
		}
		return files, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil {
		return nil, err
	}
	slices.Sort(matches)
	for _, m := range matches {
		if strings.HasPrefix(filepath.Base(m), "cache-") {
			// map() and filter() results written beside the splits: tables
			// of their own, not the dataset's rows.
			continue
		}
		files = append(files, tableFile{path: m, read: readArrow, split: cmp.Or(split, splitOfName(filepath.Base(m), true, false))})
	}
	return files, nil
}

// readArrow reads an Arrow IPC file: the stream format Hugging Face
// datasets writes, or the file format (ARROW1 magic), as readParquet does.
func readArrow(f *os.File, name string, want Columns, emit func(picked, tableRow) error) error {
	var magic [6]byte
	n, _ := f.ReadAt(magic[:], 0)
	// Both readers' Read gives the next batch, and io.EOF after the last.
	var rd interface {
		Schema() *arrow.Schema
		Read() (arrow.RecordBatch, error)
	}
	if n == 6 && string(magic[:]) == "ARROW1" {
		fr, err := ipc.NewFileReader(f)
		if err != nil {
			return fmt.Errorf("%s: not a readable Arrow file%s: %w", name, lfsHint(f), err)
		}
		defer fr.Close()
		rd = fr
	} else {
		if err := checkStreamStart(f, magic[:n]); err != nil {
			return fmt.Errorf("%s: not a readable Arrow IPC stream%s: %w", name, lfsHint(f), err)
		}
		sr, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return fmt.Errorf("%s: not a readable Arrow IPC stream%s: %w", name, lfsHint(f), err)
		}
		defer sr.Release()
		rd = sr
	}
	schema := rd.Schema()
	var cols []tableCol
	for _, fld := range schema.Fields() {
		cols = append(cols, tableCol{name: fld.Name, kind: arrowKind(fld.Type), typ: fld.Type.String()})
	}
	p, err := pickColumns(name, cols, want)
	if err != nil {
		return err
	}
	index := func(name string) int {
		if is := schema.FieldIndices(name); len(is) > 0 {
			return is[0]
		}
		return -1
	}
	for {
		rec, err := rd.Read()
		if rec == nil && (err == nil || errors.Is(err, io.EOF)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: reading record batches: %w", name, err)
		}
		id, text := rec.Column(index(p.ID)), rec.Column(index(p.Text))
		var lang arrow.Array
		if p.Lang != "" {
			lang = rec.Column(index(p.Lang))
		}
		audio := rec.Column(index(p.Audio))
		var bytesArr, pathArr arrow.Array
		switch p.audioKind {
		case colAudio:
			st := audio.(*array.Struct)
			typ := st.DataType().(*arrow.StructType)
			if i, ok := typ.FieldIdx("bytes"); ok {
				bytesArr = st.Field(i)
			}
			if i, ok := typ.FieldIdx("path"); ok {
				pathArr = st.Field(i)
			}
		case colBytes:
			bytesArr = audio
		case colString:
			pathArr = audio
		}
		for i := range int(rec.NumRows()) {
			tr := tableRow{id: arrowString(id, i), text: arrowString(text, i)}
			if lang != nil {
				tr.lang = arrowString(lang, i)
			}
			structNull := p.audioKind == colAudio && audio.IsNull(i)
			if bytesArr != nil && !structNull {
				tr.audioBytes, tr.audioHasBytes = arrowBytes(bytesArr, i)
			}
			if pathArr != nil && !structNull {
				tr.audioPath = arrowString(pathArr, i).s
			}
			if err := emit(p, tr); err != nil {
				return err
			}
		}
	}
}

// arrowKind says what a column of type t holds.
func arrowKind(t arrow.DataType) colKind {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return colString
	case arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
		return colBytes
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return colInt
	case arrow.STRUCT:
		st := t.(*arrow.StructType)
		if i, found := st.FieldIdx("bytes"); found && arrowKind(st.Field(i).Type) == colBytes {
			return colAudio
		}
		if i, found := st.FieldIdx("path"); found && arrowKind(st.Field(i).Type) == colString {
			return colAudio
		}
	}
	return colOther
}

// arrowString reads a string or integer cell.
func arrowString(a arrow.Array, i int) nullString {
	if a.IsNull(i) {
		return nullString{}
	}
	if s, ok := a.(interface{ Value(int) string }); ok { // String, LargeString, StringView
		return nullString{strings.Clone(s.Value(i)), true}
	}
	return nullString{a.ValueStr(i), true} // integers: decimal
}

// arrowBytes reads a binary cell (a copy: the batch's buffers are not
// kept).
func arrowBytes(a arrow.Array, i int) ([]byte, bool) {
	if a.IsNull(i) {
		return nil, false
	}
	var b []byte
	if v, ok := a.(interface{ Value(int) []byte }); ok { // Binary, LargeBinary, BinaryView
		b = v.Value(i)
	}
	return append([]byte{}, b...), true
}

// checkStreamStart refuses a file whose first message cannot be an Arrow
// IPC stream's: it starts with the continuation marker 0xFFFFFFFF, or (the
// format before Arrow 0.15) with a message length that fits in the file.
// Without it the reader would allocate whatever length junk spells.
func checkStreamStart(f *os.File, start []byte) error {
	if len(start) < 4 {
		return errors.New("shorter than a message header")
	}
	if binary.LittleEndian.Uint32(start) == 0xFFFFFFFF {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if n := int64(int32(binary.LittleEndian.Uint32(start))); n <= 0 || n > st.Size() {
		return fmt.Errorf("no Arrow message at its start (bytes % x)", start[:4])
	}
	return nil
}
