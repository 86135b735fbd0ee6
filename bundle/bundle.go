// Package bundle reads and writes capture bundles: the directory that
// `asrprof capture` leaves behind (see docs/BUNDLE.md).
//
// Writers append one record per write(2) call to files opened with O_APPEND,
// so whatever a killed capture had recorded is on disk; readers tolerate a
// truncated last line for the same reason.
package bundle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/asrprof/asrprof/model"
)

// File names inside a bundle. The records of the other files are each
// beside its file's name, in this package.
const (
	ManifestFile = "manifest.json"  // one Manifest
	RequestsFile = "requests.jsonl" // one Request a line
	ResultsFile  = "results.json"   // one Results
	// SpansFile holds OTLP ExportTraceServiceRequest protobufs, each
	// prefixed by its uvarint length (trace/spans reads and writes them).
	SpansFile = "spans.otlp"
	// CPUDir holds the cpu probe's pprof profiles.
	CPUDir = "cpu"
	// RealtimeLagsFile holds realtime sessions' update lags over session
	// time, one LagSeries a line.
	RealtimeLagsFile = "realtime_lags.jsonl"
	// ReportFile is the HTML report (report/), derived.
	ReportFile = "report.html"
)

// The records of the data model's files, declared in package model (the
// summaries in model/summary, below the bundle, compute from them; the
// request's schema, model.RequestFields, derives from its tags), named
// here beside their files.
type (
	Manifest  = model.Manifest
	Request   = model.Request
	Results   = model.Results
	LagSeries = model.LagSeries
)

// PIDUnknown begins the manifest's extra "target_pid_how" where the
// capture did not know the server's process (target_pid 0 for another
// reason: the agents found it on their hosts).
const PIDUnknown = "target pid unknown"

// ErrExists is returned by Create when the directory already holds a capture.
var ErrExists = errors.New("directory already holds a capture")

// Writer appends records to a bundle directory. It is safe for concurrent use.
type Writer struct {
	dir   string
	mu    sync.Mutex
	files map[string]*os.File
	buf   bytes.Buffer
}

// Create makes dir (and its parents) ready for a new capture. When dir already
// holds a manifest.json it fails with ErrExists unless overwrite is set, in
// which case the previous bundle's files are removed first.
func Create(dir string, overwrite bool) (*Writer, error) {
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		if !overwrite {
			return nil, fmt.Errorf("%s: %w (use --overwrite to replace it)", dir, ErrExists)
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("removing old bundle %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating bundle dir: %w", err)
	}
	return &Writer{dir: dir, files: map[string]*os.File{}}, nil
}

// Dir returns the bundle directory.
func (w *Writer) Dir() string { return w.dir }

// Path returns the path of a file inside the bundle.
func (w *Writer) Path(name string) string { return filepath.Join(w.dir, name) }

func (w *Writer) file(name string) (*os.File, error) {
	if f, ok := w.files[name]; ok {
		return f, nil
	}
	p := w.Path(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	w.files[name] = f
	return f, nil
}

// Append writes rec as one JSON line to the named JSONL file, in one write.
func (w *Writer) Append(name string, rec any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return fmt.Errorf("encoding %s record: %w", name, err)
	}
	return w.writeLocked(name, w.buf.Bytes())
}

// AppendRaw appends b to the named file in one write.
func (w *Writer) AppendRaw(name string, b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(name, b)
}

func (w *Writer) writeLocked(name string, b []byte) error {
	f, err := w.file(name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", name, err)
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// WriteJSON replaces the named file with v, atomically (WriteJSON).
func (w *Writer) WriteJSON(name string, v any) error { return WriteJSON(w.Path(name), v) }

// WriteJSON replaces the file at path with v as indented JSON, atomically
// (ReplaceFile).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if err := ReplaceFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ReplaceFile replaces the file at path with b, atomically (temp file +
// rename), so that a reader never sees half of it.
func ReplaceFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteFileAtomic writes the file at path through a temporary file and a
// rename, so that a reader never sees half of it: write writes its
// content. It returns write's error and the file's as they are.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := errors.Join(write(f), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// Close closes every open file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, f := range w.files {
		errs = append(errs, f.Close())
	}
	w.files = map[string]*os.File{}
	return errors.Join(errs...)
}

// Bundle is a capture opened for reading.
type Bundle struct {
	Dir      string
	Manifest model.Manifest
}

// Open reads dir's manifest. A bundle whose capture was killed loads too
// (Manifest.Complete is then false).
func Open(dir string) (*Bundle, error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: not a capture bundle (no %s)", dir, ManifestFile)
		}
		return nil, err
	}
	bd := &Bundle{Dir: dir}
	if err := json.Unmarshal(b, &bd.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if bd.Manifest.Schema != model.Schema {
		return nil, fmt.Errorf("%s: schema %q, this asrprof reads %q", p, bd.Manifest.Schema, model.Schema)
	}
	return bd, nil
}

// Path returns the path of a file inside the bundle.
func (b *Bundle) Path(name string) string { return filepath.Join(b.Dir, name) }

// Has reports whether the bundle has the named file.
func (b *Bundle) Has(name string) bool {
	_, err := os.Stat(b.Path(name))
	return err == nil
}

// Results reads results.json; it is absent from a capture that was killed.
func (b *Bundle) Results() (*model.Results, error) {
	data, err := ReadFile(b.Path(ResultsFile))
	if err != nil {
		return nil, err
	}
	var r model.Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", b.Path(ResultsFile), err)
	}
	return &r, nil
}

// Files lists the bundle's files, relative to its directory, sorted.
func (b *Bundle) Files() ([]string, error) {
	var out []string
	err := filepath.WalkDir(b.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(b.Dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// OpenFile opens a bundle file for reading. Anything but a regular file is
// refused before it is opened: opening a named pipe waits for a writer,
// and requests.jsonl is read twice.
func OpenFile(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	return os.Open(path)
}

// ReadFile reads a whole bundle file, refusing what OpenFile refuses.
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// ReadJSONL calls fn for every JSON line of path. A last line without its
// newline that does not parse (a capture killed mid-write) is dropped and
// reported through truncated; a bad line anywhere else is an error that
// names the file and line. Blank lines are skipped.
func ReadJSONL[T any](path string, fn func(T) error) (truncated bool, err error) {
	f, err := OpenFile(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = Lines(f, path, func(_ int, b []byte, cut bool) error {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			if cut {
				truncated = true
				return nil
			}
			return err
		}
		return fn(v)
	})
	return truncated, err
}

// Lines calls fn for every line of r that is not blank, trimmed, with its
// number (from 1) and whether it is a last line without its newline (cut
// short where its writer was killed mid-write). An error of fn is
// returned naming name and the line, "name:12: err"; a read error naming
// name.
func Lines(r io.Reader, name string, fn func(line int, b []byte, cut bool) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for line := 1; ; line++ {
		b, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			if err := fn(line, t, rerr == io.EOF); err != nil {
				return fmt.Errorf("%s:%d: %w", name, line, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("%s: %w", name, rerr)
		}
	}
}

// ReadAll reads every record of the JSONL file at path, as ReadJSONL
// does; an absent file has none.
func ReadAll[T any](path string) ([]T, error) {
	var out []T
	_, err := ReadJSONL(path, func(r T) error {
		out = append(out, r)
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return out, err
}

// ReplaceJSONL replaces the named JSONL file with n records, rec(i) each
// one line, atomically (temp file + rename); appends that follow go to the
// new file. A capture whose records gain fields only at its end (the
// proxy's levels) rewrites requests.jsonl with it.
func (w *Writer) ReplaceJSONL(name string, n int, rec func(i int) any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i := 0; i < n; i++ {
		if err := enc.Encode(rec(i)); err != nil {
			return fmt.Errorf("encoding %s record %d: %w", name, i+1, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if f, ok := w.files[name]; ok {
		f.Close()
		delete(w.files, name)
	}
	if err := ReplaceFile(w.Path(name), b.Bytes()); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
