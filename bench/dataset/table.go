package dataset

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Columns name the columns of a table dataset (Parquet, Arrow) that hold a
// sample's id, audio, reference text and language. An empty name means the
// first of the known names the table has (knownColumns).
type Columns struct {
	ID    string `json:"id,omitempty"`
	Audio string `json:"audio,omitempty"`
	Text  string `json:"text,omitempty"`
	Lang  string `json:"lang,omitempty"`
}

// roles lists the four roles with c's name for each, the names looked for,
// in order, when it gives none (SGLang-Omni's SeedTTS set: sample_id,
// ref_audio, ref_text first, then the common names of Hugging Face speech
// sets) and the column kinds each may have.
func (c *Columns) roles() []role {
	return []role{
		{"id", &c.ID, []string{"sample_id", "id"}, true, []colKind{colString, colInt}},
		{"audio", &c.Audio, []string{"ref_audio", "audio"}, true, []colKind{colAudio, colBytes, colString}},
		{"text", &c.Text, []string{"ref_text", "text", "transcription", "sentence"}, true, []colKind{colString}},
		{"lang", &c.Lang, []string{"lang", "language"}, false, []colKind{colString}},
	}
}

type role struct {
	key      string
	name     *string // the Columns field
	known    []string
	required bool
	kinds    []colKind
}

// ParseColumns reads "id=NAME,audio=NAME,text=NAME,lang=NAME" (any subset,
// any order).
func ParseColumns(s string) (Columns, error) {
	var c Columns
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	roles := c.roles()
	for item := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return c, fmt.Errorf("columns %q: want KEY=NAME, got %q", s, item)
		}
		i := slices.IndexFunc(roles, func(r role) bool { return r.key == k })
		if i < 0 {
			return c, fmt.Errorf("columns %q: unknown key %q (want id, audio, text or lang)", s, k)
		}
		dst := roles[i].name
		if *dst != "" {
			return c, fmt.Errorf("columns %q: %s given twice", s, k)
		}
		*dst = v
	}
	return c, nil
}

// String writes c back in ParseColumns' syntax.
func (c Columns) String() string {
	var parts []string
	for _, r := range c.roles() {
		if *r.name != "" {
			parts = append(parts, r.key+"="+*r.name)
		}
	}
	return strings.Join(parts, ",")
}

// colKind is what a table column holds, as far as a dataset cares.
type colKind int

const (
	colOther  colKind = iota
	colString         // UTF-8 text
	colBytes          // binary
	colInt            // an integer (ids)
	colAudio          // a struct with a binary "bytes" and/or a string "path" field (the HF Audio feature)
)

func (k colKind) String() string {
	return [...]string{"another type", "a string", "binary", "an integer", "an audio struct"}[k]
}

// tableCol is one top-level column of a table.
type tableCol struct {
	name string
	kind colKind
	typ  string // the type as the file names it, for messages
}

// picked are the columns a table is read with ("" Lang: none).
type picked struct {
	Columns
	audioKind colKind
}

// nullString is a cell that may be null.
type nullString struct {
	s  string
	ok bool
}

// tableRow is one row's cells in the picked columns.
type tableRow struct {
	id, text, lang nullString
	// audio: bytes (hasBytes: the cell or its bytes field is not null),
	// or a path, or neither (null).
	audioBytes    []byte
	audioHasBytes bool
	audioPath     string
}

// pickColumns resolves want against a table's columns; file names the
// table in errors.
func pickColumns(file string, cols []tableCol, want Columns) (picked, error) {
	byName := map[string]tableCol{}
	names := make([]string, len(cols))
	for i, c := range cols {
		byName[c.name] = c
		names[i] = c.name
	}
	have := strings.Join(names, ", ")
	var p picked
	into := p.roles()
	for i, r := range want.roles() {
		given := *r.name
		name := given
		if k := slices.IndexFunc(r.known, func(k string) bool { _, ok := byName[k]; return ok }); name == "" && k >= 0 {
			name = r.known[k]
		}
		col, ok := byName[name]
		switch {
		case given != "" && !ok:
			return p, fmt.Errorf("%s: no column %q for the %s (columns: %s)", file, given, r.key, have)
		case !ok && r.required:
			return p, fmt.Errorf("%s: no %s column: none of %s (columns: %s); name it with --columns %s=NAME", file, r.key, strings.Join(r.known, ", "), have, r.key)
		case !ok:
			continue
		}
		if !slices.Contains(r.kinds, col.kind) {
			return p, fmt.Errorf("%s: column %q (the %s) is %s (%s), want %s", file, name, r.key, col.kind, col.typ, kindList(r.kinds))
		}
		*into[i].name = name
		if r.key == "audio" {
			p.audioKind = col.kind
		}
	}
	return p, nil
}

func kindList(ks []colKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, " or ")
}

// tableFile is one file of a table dataset, its reader (readParquet or
// readArrow, given the file open) and the split it belongs to.
type tableFile struct {
	path  string
	read  func(f *os.File, name string, want Columns, emit func(picked, tableRow) error) error
	split string // "" when the layout names none
}

// shardName matches the Hugging Face shard suffix -NNNNN-of-NNNNN.
var shardName = regexp.MustCompile(`-\d+-of-\d+$`)

// splitOfName is the split a file's name gives: the part before the shard
// suffix of "<split>-00000-of-00001.parquet", and for Arrow files of a
// datasets cache, "<builder>-<split>[-NNNNN-of-NNNNN].arrow", the part
// after the last '-' (split names have no '-'). withStem: a name without a
// shard suffix that is a split's name is that split (hub snapshots:
// data/test.parquet).
func splitOfName(base string, arrow, withStem bool) string {
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	trimmed := shardName.ReplaceAllString(stem, "")
	if arrow {
		if i := strings.LastIndexByte(trimmed, '-'); i >= 0 {
			return trimmed[i+1:]
		}
		return ""
	}
	if trimmed != stem || withStem && slices.Contains(stemSplits, strings.ToLower(stem)) {
		return trimmed
	}
	return ""
}

// stemSplits are the names a hub snapshot's file may have to belong to a
// split without a shard suffix (data/test.parquet).
var stemSplits = []string{"train", "test", "validation", "valid", "dev", "eval"}

// hasTable reports whether dir holds a *.parquet file (or, withArrow, an
// *.arrow one), in it or below.
func hasTable(dir string, withArrow bool) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() && p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if ext := strings.ToLower(filepath.Ext(p)); !d.IsDir() && (ext == ".parquet" || withArrow && ext == ".arrow") {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// isParquetFile reports whether path is named *.parquet or starts with the
// Parquet magic.
func isParquetFile(path string) bool {
	if strings.EqualFold(filepath.Ext(path), ".parquet") {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	n, _ := f.Read(magic[:])
	return n == 4 && string(magic[:]) == "PAR1"
}

// loadParquetDir reads the *.parquet files under dir (subdirectories
// included, hidden ones skipped; for a hub snapshot, *.arrow files too),
// sorted by path. Their split is the
// directory below dir joined with the split of the name (splitOfName), so
// data/train-00000-of-00002.parquet is "train" and en/test.parquet in a
// hub snapshot "en/test".
func loadParquetDir(root, dir, format string, opts Options) (*Dataset, error) {
	var files []tableFile
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		read := readParquet
		switch ext := strings.ToLower(filepath.Ext(p)); {
		case d.IsDir():
			return nil
		case ext == ".arrow" && format == "hf-hub":
			read = readArrow // the hub's arrow builder: data/<split>-00000-of-00001.arrow
		case ext != ".parquet":
			return nil
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(p))
		split := splitOfName(d.Name(), false, format == "hf-hub")
		if rel != "." {
			split = strings.Trim(filepath.ToSlash(rel)+"/"+split, "/")
		}
		files = append(files, tableFile{path: p, read: read, split: split})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading dataset %s: %w", root, err)
	}
	return loadTables(root, root, format, files, opts)
}

// loadTables selects the split and reads its files into samples. base is
// the directory file names are shown relative to, and relative audio paths
// resolved against (beside the table that names them).
func loadTables(path, base, format string, files []tableFile, opts Options) (*Dataset, error) {
	var splits []string
	for _, f := range files {
		splits = append(splits, f.split)
	}
	slices.Sort(splits)
	splits = slices.Compact(splits)
	show := func() string {
		s := make([]string, len(splits))
		for i, x := range splits {
			s[i] = cmp.Or(x, `"" (files named without a split)`)
		}
		return strings.Join(s, ", ")
	}
	var split string
	switch {
	case opts.Split != "" && !slices.Contains(splits, opts.Split):
		return nil, fmt.Errorf("%s: no split %q; the splits are: %s", path, opts.Split, show())
	case opts.Split != "":
		split = opts.Split
	case len(splits) > 1 && opts.Lang != "" && slices.Contains(splits, opts.Lang):
		// SeedTTS names its splits by language (en, zh); SGLang-Omni's
		// benchmark reads the split named as --lang.
		split = opts.Lang
	case len(splits) > 1:
		return nil, fmt.Errorf("%s: the dataset has several splits (%s); choose one with --split", path, show())
	case len(splits) == 1:
		split = splits[0]
	}
	ds := &Dataset{Path: path, Format: format}
	seen := map[string]string{} // id -> "FILE row N"
	for _, f := range files {
		if f.split != split {
			continue
		}
		name := f.path
		if rel, err := filepath.Rel(base, f.path); err == nil && !strings.HasPrefix(rel, "..") {
			name = rel
		}
		dir, err := absDir(filepath.Dir(f.path))
		if err != nil {
			return nil, err
		}
		row := 0
		emit := func(p picked, r tableRow) error {
			row++
			return addRow(ds, seen, name, dir, row-1, p, r, opts.Lang)
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return nil, fmt.Errorf("loading dataset: %w", err)
		}
		err = f.read(fh, name, opts.Columns, emit)
		fh.Close()
		if err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// addRow turns one row into a sample. A null or empty id, and an id seen
// before, stop the load; a null transcript, null audio and empty audio
// bytes are the sample's problems, for Preflight. Audio bytes that are not
// null are the audio, as Hugging Face's Audio feature reads them; the path
// is read only where the bytes are null.
func addRow(ds *Dataset, seen map[string]string, file, dir string, row int, p picked, r tableRow, defaultLang string) error {
	where := fmt.Sprintf("%s row %d", file, row)
	if !r.id.ok || strings.TrimSpace(r.id.s) == "" {
		return fmt.Errorf("%s: column %q (the id) is empty", where, p.ID)
	}
	id := r.id.s
	if first, dup := seen[id]; dup {
		return fmt.Errorf("%s: duplicate id %q (first in %s)", where, id, first)
	}
	seen[id] = where
	s := Sample{ID: id, Text: strings.TrimSpace(r.text.s),
		Lang: cmp.Or(strings.TrimSpace(r.lang.s), defaultLang)}
	if !r.text.ok {
		s.addProblem(fmt.Sprintf("missing transcript: column %q is null", p.Text))
	}
	cell := fmt.Sprintf("%s, column %s", where, p.Audio)
	switch {
	case r.audioHasBytes: // empty bytes too: a bad entry, not a reason to read the path
		name := id
		if r.audioPath != "" {
			name = filepath.Base(filepath.FromSlash(r.audioPath))
		}
		s.Inline = &Inline{Bytes: r.audioBytes, Where: cell, Name: name}
	case r.audioPath != "":
		s.Audio = resolve(dir, filepath.FromSlash(r.audioPath))
	default:
		s.Inline = &Inline{Where: cell, Name: id, null: true}
	}
	ds.Samples = append(ds.Samples, s)
	return nil
}
