package dataset

import (
	"fmt"
	"path/filepath"
	"strings"
)

// pipedReason is the BadEntry reason for a wav.scp entry that is a shell
// command ("sox x.sph -t wav - |") rather than a file.
const pipedReason = "unsupported: piped wav.scp entry"

// loadKaldi reads a Kaldi data directory: scp is its wav.scp ("<id> <path>"
// lines, paths relative to dir), and dir/text holds "<id> <transcript...>"
// lines. Samples follow wav.scp order; text lines for ids not in wav.scp are
// ignored. A wav.scp id without a text line, or a piped entry, loads but is
// reported by Preflight.
func loadKaldi(path, dir, defaultLang string) (*Dataset, error) {
	scp := filepath.Join(dir, "wav.scp")
	textPath := filepath.Join(dir, "text")
	if isFile(filepath.Join(dir, "segments")) {
		return nil, fmt.Errorf("%s: Kaldi segments file is not supported: wav.scp must list one file per utterance", filepath.Join(dir, "segments"))
	}
	if !isFile(textPath) {
		return nil, fmt.Errorf("%s: Kaldi data directory has no text file next to wav.scp", textPath)
	}
	texts := map[string]string{}
	textLine := idLines{}
	err := lines(textPath, func(n int, line string) error {
		id, rest, ok := splitKaldi(line)
		if !ok {
			return nil
		}
		if err := textLine.add(textPath, n, id); err != nil {
			return err
		}
		texts[id] = rest
		return nil
	})
	if err != nil {
		return nil, err
	}

	ds, err := loadLines(scp, "kaldi", func(ds *Dataset, abs string, seen idLines, n int, line string) error {
		id, rest, ok := splitKaldi(line)
		if !ok {
			return nil
		}
		if rest == "" {
			return fmt.Errorf("%s:%d: id %q has no audio path", scp, n, id)
		}
		if err := seen.add(scp, n, id); err != nil {
			return err
		}
		s := Sample{ID: id, Lang: defaultLang}
		if strings.HasSuffix(rest, "|") {
			s.Audio = rest
			s.noProbe = true
			s.addProblem(pipedReason)
		} else {
			s.Audio = resolve(abs, rest)
		}
		if text, ok := texts[id]; ok {
			s.Text = text
		} else {
			s.addProblem(fmt.Sprintf("missing transcript: id not found in %s", textPath))
		}
		ds.Samples = append(ds.Samples, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	ds.Path = path
	return ds, nil
}

// splitKaldi splits a Kaldi table line into its key and the trimmed rest;
// ok is false for a blank line.
func splitKaldi(line string) (id, rest string, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" {
		return "", "", false
	}
	i := strings.IndexAny(line, " \t")
	if i < 0 {
		return line, "", true
	}
	return line[:i], strings.TrimSpace(line[i+1:]), true
}
