package columns

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"golang.org/x/sync/errgroup"

	"github.com/asrprof/asrprof/bundle"
)

// rowsPerGroup bounds a row group; readers (DuckDB, pandas) parallelize
// over row groups.
const rowsPerGroup = 256 << 10

// writeRows writes n rows, made by row(i), to a Parquet file at path
// (through a temporary file and a rename, so that a reader never sees half
// a table), with meta as the file's key-value metadata. Snappy pages:
// every reader has it. A large table is encoded on every core: each part
// of its rows becomes a row group in a file of its own beside the table,
// and the row groups are then copied into the table as they are (parquet-go copies encoded column
// chunks verbatim when the writers' settings match).
func writeRows[R any](path string, meta map[string]string, n int, row func(i int) R) error {
	return writeTable(path, meta, n, nil, func(w *parquet.GenericWriter[R], lo, hi int) error {
		return writeBatches(w, lo, hi, row)
	})
}

// writeBatches writes rows [lo, hi), made by row(i) in order, to w.
func writeBatches[R any](w *parquet.GenericWriter[R], lo, hi int, row func(i int) R) error {
	buf := make([]R, 0, 4096)
	for i := lo; i < hi; i++ {
		buf = append(buf, row(i))
		if len(buf) == cap(buf) || i == hi-1 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			clear(buf)
			buf = buf[:0]
		}
	}
	return nil
}

// writeTable is writeRows for any writer: schema (nil: R's) and encode,
// which writes rows [lo, hi) to w.
func writeTable[R any](path string, meta map[string]string, n int, schema *parquet.Schema, encode func(w *parquet.GenericWriter[R], lo, hi int) error) error {
	opts := []parquet.WriterOption{parquet.Compression(fastSnappy{}), parquet.MaxRowsPerRowGroup(rowsPerGroup),
		parquet.CreatedBy("asrprof", fmt.Sprint(Version), "")}
	if schema == nil {
		schema = parquet.SchemaOf(new(R))
	}
	// The encoded pages of a row group wait for it in files beside the
	// table (the page cache holds them, not the heap).
	opts = append(opts, schema, parquet.DataPageStatistics(false), parquet.PageBufferSize(64<<10),
		parquet.ColumnPageBuffers(filePages{filepath.Dir(path), filepath.Base(path) + ".pages-*.tmp"}))
	// A string column's page bounds (the least and greatest id of each
	// page) help no reader here and cost a comparison per value.
	for _, leaf := range schema.Columns() {
		if n, _ := schema.Lookup(leaf...); n.Node.Type().Kind() == parquet.ByteArray {
			opts = append(opts, parquet.SkipPageBounds(leaf...))
		}
	}
	for k, v := range meta {
		opts = append(opts, parquet.KeyValueMetadata(k, v))
	}
	// encodeTo writes rows [lo, hi) to out. The writer is closed even when
	// encode fails, which removes its page files.
	encodeTo := func(out io.Writer, lo, hi int) error {
		w := parquet.NewGenericWriter[R](out, opts...)
		var err error
		if hi > lo {
			err = encode(w, lo, hi)
		}
		return wrap(path, errors.Join(err, w.Close()))
	}
	parts := 1
	if n >= 2*parallelRows {
		parts = min(runtime.GOMAXPROCS(0), n/parallelRows)
	}
	if parts = max(parts, (n+rowsPerGroup-1)/rowsPerGroup); parts == 1 {
		return bundle.WriteFileAtomic(path, func(f io.Writer) error { return encodeTo(f, 0, n) })
	}
	// Each part is encoded into a file of its own beside the table, whose
	// row groups are then copied into the table.
	files := make([]*os.File, parts)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
	}()
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for p := range parts {
		f, err := os.Create(fmt.Sprintf("%s.part%d.tmp", path, p))
		if err != nil {
			return err
		}
		files[p] = f
		g.Go(func() error { return encodeTo(f, p*n/parts, (p+1)*n/parts) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return bundle.WriteFileAtomic(path, func(out io.Writer) error {
		w := parquet.NewGenericWriter[R](out, opts...)
		for _, f := range files {
			st, err := f.Stat()
			if err != nil {
				return err
			}
			pf, err := parquet.OpenFile(f, st.Size())
			if err != nil {
				return wrap(path, err)
			}
			for _, rg := range pf.RowGroups() {
				if _, err := w.WriteRowGroup(rg); err != nil {
					return wrap(path, err)
				}
			}
		}
		return wrap(path, w.Close())
	})
}

// filePages is parquet.NewFileBufferPool, each file written through a
// buffer: the writer writes a page's header, levels and values apart,
// many of them empty.
type filePages struct{ dir, pattern string }

func (p filePages) GetBuffer() io.ReadWriteSeeker {
	f, err := os.CreateTemp(p.dir, p.pattern)
	return &pageFile{f, bufio.NewWriterSize(f, 64<<10), err}
}

func (p filePages) PutBuffer(b io.ReadWriteSeeker) {
	if b := b.(*pageFile); b.err == nil {
		b.f.Close()
		os.Remove(b.f.Name())
	}
}

// pageFile is a page buffer: a temporary file written through w, or the
// error that kept it from being made.
type pageFile struct {
	f   *os.File
	w   *bufio.Writer
	err error
}

func (b *pageFile) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	return b.w.Write(p)
}

func (b *pageFile) Read(p []byte) (int, error) {
	if err := b.flush(); err != nil {
		return 0, err
	}
	return b.f.Read(p)
}

func (b *pageFile) Seek(off int64, whence int) (int64, error) {
	if err := b.flush(); err != nil {
		return 0, err
	}
	return b.f.Seek(off, whence)
}

func (b *pageFile) flush() error { return cmp.Or(b.err, b.w.Flush()) }

// wrap names path in err (nil stays nil).
func wrap(path string, err error) error {
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// parallelRows is the least a part of a table encoded on its own core holds.
const parallelRows = 100_000

// column is one column read whole: the values of its kind, and which rows
// are null (valid is nil for a required column).
type column struct {
	name  string
	kind  parquet.Kind
	valid []bool // nil for a required column
	i32   []int32
	i64   []int64
	f64   []float64
	b     []bool
	str   Strings
	plain bool        // strings not interned: one Dict entry per row
	lists [][]float64 // a list column (of doubles), one per row
	n     int
}

// addListPage reads a repeated column's levels into lists (a list column of
// doubles: repetition level 0 starts a row; a row whose definition level
// is below the maximum is an empty list).
func (c *column) addListPage(p parquet.Page, maxDef int) {
	data := p.Data()
	vals := data.Double()
	k := 0
	reps, defs := p.RepetitionLevels(), p.DefinitionLevels()
	for i := range defs {
		if reps[i] == 0 {
			c.lists = append(c.lists, nil)
			c.n++
		}
		if int(defs[i]) == maxDef {
			last := len(c.lists) - 1
			c.lists[last] = append(c.lists[last], vals[k])
			k++
		}
	}
}

// present reports which rows are not null.
func (c *column) present() []bool {
	if c.valid != nil {
		return c.valid
	}
	return slices.Repeat([]bool{true}, c.n)
}

// appendRows appends a page's values at their rows: vals are the values
// of the rows that are not null (valid; nil: every row), null rows zero.
// Numeric and boolean columns are held a value a row, so that readers
// take them as they are.
func appendRows[T any](dst, vals []T, valid []bool) []T {
	if valid == nil {
		return append(dst, vals...)
	}
	k := 0
	for _, v := range valid {
		var x T
		if v {
			x = vals[k]
			k++
		}
		dst = append(dst, x)
	}
	return dst
}

// lookup maps dictionary indexes to their values.
func lookup[T any](ks []int32, dict []parquet.Value, of func(parquet.Value) T) []T {
	out := make([]T, len(ks))
	for i, k := range ks {
		out[i] = of(dict[k])
	}
	return out
}

// presize makes room for n rows, so that pages append without copying.
func (c *column) presize(n int, optional bool) {
	if optional {
		c.valid = make([]bool, 0, n)
	}
	switch c.kind {
	case parquet.Int32:
		c.i32 = make([]int32, 0, n)
	case parquet.Int64:
		c.i64 = make([]int64, 0, n)
	case parquet.Double:
		c.f64 = make([]float64, 0, n)
	case parquet.Boolean:
		c.b = make([]bool, 0, n)
	case parquet.ByteArray:
		c.str.Codes = make([]int32, 0, n)
		if c.plain {
			c.str.Dict = make([]string, 0, n+1)
		}
	}
}

// int32s returns the column as int32s, null as def.
func (c *column) int32s(def int32) []int32 {
	if c.kind == parquet.Int32 && c.valid == nil {
		return c.i32
	}
	out := make([]int32, c.n)
	for i := range out {
		switch {
		case c.valid != nil && !c.valid[i]:
			out[i] = def
		case c.kind == parquet.Int32:
			out[i] = c.i32[i]
		case c.kind == parquet.Int64:
			out[i] = int32(c.i64[i])
		}
	}
	return out
}

func (c *column) int64s() []int64 {
	if c.kind == parquet.Int32 {
		out := make([]int64, len(c.i32))
		for i, v := range c.i32 {
			out[i] = int64(v)
		}
		return out
	}
	return c.i64
}

// readColumns reads the named columns of a Parquet file whole, straight
// from its pages (dictionary pages stay dictionaries): the columns of
// int32, int64, double and string (byte array) kind that asrprof's own
// tables hold, required or optional. Strings of an optional column are
// "" where null; those of the columns named in plain are read without
// interning (columns of mostly distinct values: ids, texts).
func readColumns(file string, names []string, plain map[string]bool) ([]*column, error) {
	f, err := bundle.OpenFile(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// The columns are read at once, one a core: their pages are apart.
	out := make([]*column, len(names))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, name := range names {
		path := strings.Split(name, ".") // a list's leaf: "x.list.element"
		name = path[0]
		leaf, ok := pf.Schema().Lookup(path...)
		if !ok {
			g.Wait() // the columns started, before the file closes
			return nil, fmt.Errorf("%s: no column %q (rebuild the tables: remove the tables folder)", file, name)
		}
		c := &column{name: name, kind: leaf.Node.Type().Kind(), plain: plain[name]}
		optional := leaf.MaxDefinitionLevel > 0
		repeated := leaf.MaxRepetitionLevel > 0
		c.presize(int(pf.NumRows()), optional)
		dict := map[string]int32{}
		read := func(pages parquet.Pages) error {
			defer pages.Close()
			for {
				p, err := pages.ReadPage()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if !repeated {
					err = c.addPage(p, optional, leaf.MaxDefinitionLevel, dict)
				} else if c.kind != parquet.Double {
					err = fmt.Errorf("lists of %v are not read here", c.kind)
				} else {
					c.addListPage(p, leaf.MaxDefinitionLevel)
				}
				if err != nil {
					return err
				}
				parquet.Release(p)
			}
		}
		out[i] = c
		g.Go(func() error {
			for _, rg := range pf.RowGroups() {
				if err := read(rg.ColumnChunks()[leaf.ColumnIndex].Pages()); err != nil {
					return fmt.Errorf("%s: column %s: %w", file, name, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *column) addPage(p parquet.Page, optional bool, maxDef int, dict map[string]int32) error {
	n := int(p.NumValues())
	if optional {
		for _, d := range p.DefinitionLevels() {
			c.valid = append(c.valid, int(d) == maxDef)
		}
	}
	nonNull := n
	var valid []bool // the page's rows, for an optional column
	if optional && p.NumNulls() > 0 {
		nonNull = n - int(p.NumNulls())
		valid = c.valid[len(c.valid)-n:]
	}
	data := p.Data()
	code := func(b []byte) int32 {
		if c.plain {
			c.str.Dict = append(c.str.Dict, string(b))
			return int32(len(c.str.Dict) - 1)
		}
		k, ok := dict[string(b)]
		if !ok {
			k = int32(len(c.str.Dict))
			s := string(b)
			c.str.Dict = append(c.str.Dict, s)
			dict[s] = k
		}
		return k
	}
	switch {
	case p.Dictionary() != nil:
		// An indexed page: its values are indexes into the dictionary.
		d := p.Dictionary()
		if c.kind != parquet.ByteArray {
			vals := make([]parquet.Value, d.Len())
			idx := make([]int32, d.Len())
			for i := range idx {
				idx[i] = int32(i)
			}
			d.Lookup(idx, vals)
			ks := data.Int32()[:nonNull]
			switch c.kind {
			case parquet.Int32:
				c.i32 = appendRows(c.i32, lookup(ks, vals, parquet.Value.Int32), valid)
			case parquet.Int64:
				c.i64 = appendRows(c.i64, lookup(ks, vals, parquet.Value.Int64), valid)
			case parquet.Double:
				c.f64 = appendRows(c.f64, lookup(ks, vals, parquet.Value.Double), valid)
			}
			break
		}
		dv := d.Page().Data()
		bs, offs := dv.ByteArray()
		remap := make([]int32, d.Len())
		for i := range remap {
			remap[i] = code(bs[offs[i]:offs[i+1]])
		}
		ks := data.Int32()[:nonNull]
		c.appendStrings(valid != nil, n, code, func(yield func(int32)) {
			for _, k := range ks {
				yield(remap[k])
			}
		})
	case c.kind == parquet.ByteArray:
		bs, offs := data.ByteArray()
		c.appendStrings(valid != nil, n, code, func(yield func(int32)) {
			for i := 0; i < nonNull; i++ {
				yield(code(bs[offs[i]:offs[i+1]]))
			}
		})
	case c.kind == parquet.Boolean:
		bits := data.Boolean()
		bs := make([]bool, nonNull)
		for i := range bs {
			bs[i] = bits[i>>3]&(1<<(i&7)) != 0
		}
		c.b = appendRows(c.b, bs, valid)
	case c.kind == parquet.Int32:
		c.i32 = appendRows(c.i32, data.Int32()[:nonNull], valid)
	case c.kind == parquet.Int64:
		c.i64 = appendRows(c.i64, data.Int64()[:nonNull], valid)
	case c.kind == parquet.Double:
		c.f64 = appendRows(c.f64, data.Double()[:nonNull], valid)
	default:
		return fmt.Errorf("column kind %v is not read here", c.kind)
	}
	c.n += n
	return nil
}

// appendStrings appends a page's string codes; for an optional column,
// null rows get the code of "".
func (c *column) appendStrings(optional bool, n int, code func([]byte) int32, codes func(yield func(int32))) {
	if !optional {
		codes(func(k int32) { c.str.Codes = append(c.str.Codes, k) })
		return
	}
	empty := code(nil)
	valid := c.valid[len(c.valid)-n:]
	var ks []int32
	codes(func(k int32) { ks = append(ks, k) })
	j := 0
	for _, v := range valid {
		if v {
			c.str.Codes = append(c.str.Codes, ks[j])
			j++
		} else {
			c.str.Codes = append(c.str.Codes, empty)
		}
	}
}

// fastSnappy is Parquet's SNAPPY codec with klauspost's faster block
// encoder (s2.EncodeSnappy: standard Snappy blocks, which every reader
// decodes) instead of the "better" one parquet-go picks, which spent a
// fifth of a large bundle's build compressing.
type fastSnappy struct{}

func (fastSnappy) String() string                            { return "SNAPPY" }
func (fastSnappy) CompressionCodec() format.CompressionCodec { return format.Snappy }
func (fastSnappy) Encode(dst, src []byte) ([]byte, error) {
	return s2.EncodeSnappy(dst[:cap(dst)], src), nil
}
func (fastSnappy) Decode(dst, src []byte) ([]byte, error) { return snappy.Decode(dst, src) }
