package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// loadFolder reads a directory tree of .wav and .flac files (extension case
// ignored; hidden files and directories skipped). Each file's id is its path
// relative to root without the extension, with forward slashes, and its
// transcript is the sibling file with the same base name and a .txt
// extension. Samples are sorted by id. A missing transcript loads but is
// reported by Preflight.
func loadFolder(root, defaultLang string) (*Dataset, error) {
	abs, err := absDir(root)
	if err != nil {
		return nil, err
	}
	files := map[string]string{} // id -> absolute audio path
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != abs && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(p)
		if d.IsDir() || !(strings.EqualFold(ext, ".wav") || strings.EqualFold(ext, ".flac")) {
			return nil
		}
		rel, err := filepath.Rel(abs, p)
		if err != nil {
			return err
		}
		id := filepath.ToSlash(strings.TrimSuffix(rel, ext))
		if other, dup := files[id]; dup {
			return fmt.Errorf("duplicate id %q: both %s and %s", id, other, p)
		}
		files[id] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: reading audio folder: %w", root, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .wav or .flac files found (and no wav.scp and text for a Kaldi directory)", root)
	}

	ds := &Dataset{Path: root, Format: "folder"}
	for _, id := range slices.Sorted(maps.Keys(files)) {
		p := files[id]
		s := Sample{ID: id, Audio: p, Lang: defaultLang}
		txt := strings.TrimSuffix(p, filepath.Ext(p)) + ".txt"
		b, err := os.ReadFile(txt)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			s.addProblem(fmt.Sprintf("missing transcript: no %s", filepath.Base(txt)))
		case err != nil:
			return nil, fmt.Errorf("reading transcript: %w", err)
		default:
			// A transcript may span lines; runs of whitespace become one space.
			s.Text = strings.Join(strings.Fields(string(b)), " ")
		}
		ds.Samples = append(ds.Samples, s)
	}
	return ds, nil
}
