package dataset

import (
	"fmt"
	"strings"
)

// loadSeedTTS reads a SeedTTS meta.lst, the layout of seed-tts-eval that
// SGLang-Omni's benchmarks read (benchmarks/dataset/seedtts.py): one sample
// a line, id|ref_text|ref_audio|target_text, the audio relative to the
// file's directory. For speech recognition the reference is ref_text, the
// transcript of ref_audio; target_text (the sentence a TTS model is asked
// to say) is not used. Lines are trimmed and blank ones skipped; a line of
// fewer than four fields is an error (theirs skips it silently).
func loadSeedTTS(path, defaultLang string) (*Dataset, error) {
	return loadLines(path, "seedtts", func(ds *Dataset, dir string, seen idLines, n int, line string) error {
		line = strings.TrimSpace(line)
		if line == "" {
			return nil
		}
		parts := strings.Split(line, "|")
		if len(parts) < 4 {
			return fmt.Errorf("%s:%d: %d fields, want 4 (id|ref_text|ref_audio|target_text)", path, n, len(parts))
		}
		id, text, wav := parts[0], parts[1], parts[2]
		switch {
		case strings.TrimSpace(id) == "":
			return fmt.Errorf("%s:%d: field 1 (id) is empty", path, n)
		case strings.TrimSpace(wav) == "":
			return fmt.Errorf("%s:%d: field 3 (ref_audio) is empty", path, n)
		}
		if err := seen.add(path, n, id); err != nil {
			return err
		}
		ds.Samples = append(ds.Samples, Sample{
			ID:    id,
			Audio: resolve(dir, wav),
			Text:  strings.TrimSpace(text),
			Lang:  defaultLang,
		})
		return nil
	})
}
