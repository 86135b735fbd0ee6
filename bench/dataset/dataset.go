package dataset

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/asrprof/asrprof/bench/audio"
)

// Sample is one utterance: an audio file and its reference transcript.
type Sample struct {
	// ID is unique within the dataset.
	ID string
	// Audio is the absolute path of the audio file (manifest-relative paths
	// are resolved at load time).
	Audio string
	// Text is the reference transcript, trimmed of surrounding whitespace.
	Text string
	// Lang is the language code from the manifest, or LoadWith's Options.Lang.
	Lang string
	// Info is filled by Preflight.
	Info audio.Info
	// Inline is the audio of a sample stored in a table's column (Parquet,
	// Arrow), held in memory; Audio is then empty. A pointer keeps Sample
	// comparable.
	Inline *Inline

	// problem holds defects found by LoadWith that make the sample unusable but
	// leave the manifest well-formed (a missing transcript, a piped wav.scp
	// entry), joined by "; "; Preflight reports it. A string, not a slice,
	// keeps Sample comparable.
	problem string
	// noProbe marks an Audio that is not a file path (a piped command).
	noProbe bool
}

// Inline is audio held in a table's cell.
type Inline struct {
	// Bytes are the audio file's bytes, never copied after load. Empty
	// bytes are a bad entry (Preflight).
	Bytes []byte
	// Where names the cell: "FILE row N, column C", N counted from 0 in
	// each file.
	Where string
	// Name is the file name sent with the upload: the base of the cell's
	// path field when it has one, else the id; Preflight gives it the
	// extension of the format it holds (.wav, .flac).
	Name string
	// null marks a null cell (no bytes and no path).
	null bool
}

// Where names the sample's audio for messages: its path, or its table cell.
func (s *Sample) Where() string {
	if s.Inline != nil {
		return s.Inline.Where
	}
	return s.Audio
}

// ReadAudio returns the sample's audio bytes: the inline bytes themselves
// (not a copy), or the file read whole.
func (s *Sample) ReadAudio() ([]byte, error) {
	if s.Inline != nil {
		return s.Inline.Bytes, nil
	}
	return os.ReadFile(s.Audio)
}

// FileName is the file name an upload of the sample carries.
func (s *Sample) FileName() string {
	if s.Inline != nil {
		return s.Inline.Name
	}
	return filepath.Base(s.Audio)
}

// Dataset is a loaded manifest.
type Dataset struct {
	// Path is the manifest file or directory as given to LoadWith.
	Path string
	// Format is "jsonl", "kaldi", "folder", "seedtts" (meta.lst),
	// "parquet", "hf-arrow" (a Hugging Face datasets cache or
	// save_to_disk directory) or "hf-hub" (a hub snapshot's data/*.parquet).
	Format string
	// Samples are in manifest order: file order for JSONL and Kaldi, sorted
	// relative path for folders.
	Samples []Sample
}

// Limit keeps the first n samples. n <= 0 keeps all of them, so a zero
// --max-samples means "no limit".
func (d *Dataset) Limit(n int) {
	if n > 0 && n < len(d.Samples) {
		d.Samples = d.Samples[:n:n]
	}
}

// Options say how to read a dataset beyond its path.
type Options struct {
	// Lang is the language of samples that name none.
	Lang string
	// Split selects the split of a table dataset with several ("" takes
	// the only one, or the one named as Lang: SeedTTS's en and zh).
	Split string
	// Columns name a table's id, audio, text and language columns where
	// they are not the known names.
	Columns Columns
}

// LoadWith reads the dataset at path, detecting its layout:
//
//   - a file named wav.scp, or a directory holding wav.scp and text: Kaldi;
//   - a file named *.lst: a SeedTTS meta.lst (id|ref_text|ref_audio|target_text);
//   - a file named *.parquet (or starting with PAR1), or *.arrow: one table;
//   - a directory holding dataset_info.json or dataset_dict.json: a Hugging
//     Face datasets directory of Arrow files (cache or save_to_disk);
//   - a directory with data/*.parquet (or data/*.arrow): a Hugging Face hub
//     snapshot;
//   - a directory holding *.parquet files: those tables;
//   - any other file: JSONL, if its name ends in .jsonl or its first
//     non-blank line is a JSON object;
//   - any other directory: a folder of .wav/.flac files with .txt
//     transcripts.
//
// LoadWith checks the manifest (syntax, required fields and columns, duplicate
// ids) but does not probe any audio; problems with individual samples that
// leave the manifest well-formed, such as a missing transcript or empty
// inline audio, are reported by Preflight. Samples without a language get
// opts.Lang. A dataset with no samples is an error.
func LoadWith(path string, opts Options) (*Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("loading dataset: %w", err)
	}
	var ds *Dataset
	switch {
	case st.IsDir() && isFile(filepath.Join(path, "wav.scp")) && isFile(filepath.Join(path, "text")):
		ds, err = loadKaldi(path, path, opts.Lang)
	case st.IsDir() && (isFile(filepath.Join(path, "dataset_info.json")) || isFile(filepath.Join(path, "dataset_dict.json"))):
		ds, err = loadHFArrow(path, opts)
	case st.IsDir() && hasTable(filepath.Join(path, "data"), true):
		ds, err = loadParquetDir(path, filepath.Join(path, "data"), "hf-hub", opts)
	case st.IsDir() && hasTable(path, false):
		ds, err = loadParquetDir(path, path, "parquet", opts)
	case st.IsDir():
		ds, err = loadFolder(path, opts.Lang)
	case filepath.Base(path) == "wav.scp":
		ds, err = loadKaldi(path, filepath.Dir(path), opts.Lang)
	case strings.EqualFold(filepath.Ext(path), ".lst"):
		ds, err = loadSeedTTS(path, opts.Lang)
	case strings.EqualFold(filepath.Ext(path), ".arrow"):
		ds, err = loadTables(path, filepath.Dir(path), "hf-arrow", []tableFile{{path: path, read: readArrow}}, opts)
	case isParquetFile(path):
		ds, err = loadTables(path, filepath.Dir(path), "parquet", []tableFile{{path: path, read: readParquet}}, opts)
	default:
		var isJSONL bool
		if isJSONL, err = looksLikeJSONL(path); err == nil {
			if !isJSONL {
				return nil, fmt.Errorf("%s: not a dataset: expected a .jsonl manifest, a wav.scp file, a SeedTTS meta.lst, a .parquet or .arrow file, or a directory", path)
			}
			ds, err = loadJSONL(path, opts.Lang)
		}
	}
	if err != nil {
		return nil, err
	}
	if len(ds.Samples) == 0 {
		return nil, fmt.Errorf("%s: dataset has no samples", path)
	}
	return ds, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// looksLikeJSONL reports whether path is named *.jsonl or its first non-blank
// line starts with '{'.
func looksLikeJSONL(path string) (bool, error) {
	if strings.EqualFold(filepath.Ext(path), ".jsonl") {
		return true, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("loading dataset: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			return t[0] == '{', nil
		}
		if err != nil {
			return false, nil
		}
	}
}

// absDir returns the absolute form of dir, against which manifest-relative
// audio paths are resolved.
func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dir, err)
	}
	return abs, nil
}

// resolve returns p if absolute, else p joined to the absolute dir.
func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// idLines is the line of each id of a line-based manifest, to refuse a
// duplicate.
type idLines map[string]int

// add notes id on line n of path, or says where it was first.
func (s idLines) add(path string, n int, id string) error {
	if first, dup := s[id]; dup {
		return fmt.Errorf("%s:%d: duplicate id %q (first on line %d)", path, n, id, first)
	}
	s[id] = n
	return nil
}

// lines calls fn for each line of the file at path with its 1-based number,
// without the line terminator (\n or \r\n). Lines may be of any length.
func lines(path string, fn func(n int, line string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if line != "" {
			if ferr := fn(n, strings.TrimRight(line, "\r\n")); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: reading: %w", path, n, err)
		}
	}
}

// loadLines reads the line-based manifest at path, of format format: add
// turns each line into samples of ds, with dir the absolute directory of
// path (against which audio paths resolve) and seen the ids so far.
func loadLines(path, format string, add func(ds *Dataset, dir string, seen idLines, n int, line string) error) (*Dataset, error) {
	dir, err := absDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	ds := &Dataset{Path: path, Format: format}
	seen := idLines{}
	if err := lines(path, func(n int, line string) error { return add(ds, dir, seen, n, line) }); err != nil {
		return nil, err
	}
	return ds, nil
}

// addProblem records a load-time defect of s.
func (s *Sample) addProblem(p string) {
	if s.problem != "" {
		s.problem += "; "
	}
	s.problem += p
}
