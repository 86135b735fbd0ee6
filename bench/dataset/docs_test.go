package dataset_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/dataset"
)

// docBlocks returns the fenced code blocks of docs/DATASETS.md by their
// info string ("jsonl", "text wav.scp", ...).
func docBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "DATASETS.md"))
	if err != nil {
		t.Fatalf("reading the user docs: %v", err)
	}
	blocks := map[string]string{}
	var info string
	var body strings.Builder
	in := false
	for line := range strings.Lines(string(b)) {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case !in && strings.HasPrefix(trimmed, "```"):
			in, info = true, strings.TrimPrefix(trimmed, "```")
			body.Reset()
		case in && trimmed == "```":
			in = false
			if _, dup := blocks[info]; !dup {
				blocks[info] = body.String()
			}
		case in:
			body.WriteString(line)
		}
	}
	return blocks
}

// TestDocExamples loads the manifest examples of docs/DATASETS.md, so the
// user docs cannot drift from what Load accepts.
func TestDocExamples(t *testing.T) {
	blocks := docBlocks(t)
	for _, key := range []string{"jsonl", "text wav.scp", "text text", "text meta.lst"} {
		if blocks[key] == "" {
			t.Fatalf("docs/DATASETS.md has no ```%s block", key)
		}
	}

	t.Run("jsonl", func(t *testing.T) {
		root := tree(t, t.TempDir(), map[string]any{"manifest.jsonl": blocks["jsonl"]})
		ds, err := dataset.LoadWith(filepath.Join(root, "manifest.jsonl"), dataset.Options{Lang: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want := []want{
			{"utt-001", filepath.Join(root, "wavs", "utt-001.wav"), "turn the lights off", "en"},
			{"utt-002", filepath.Join(root, "wavs", "utt-002.flac"), "what time is it", "en"},
			{"utt-003", filepath.FromSlash("/data/zh/0003.wav"), "今天天气很好", "zh"},
		}
		if got := samplesOf(ds); !reflect.DeepEqual(got, want) {
			t.Errorf("samples =\n %q\nwant\n %q", got, want)
		}
	})

	t.Run("kaldi", func(t *testing.T) {
		root := tree(t, t.TempDir(), map[string]any{"d/wav.scp": blocks["text wav.scp"], "d/text": blocks["text text"]})
		ds, err := dataset.LoadWith(filepath.Join(root, "d"), dataset.Options{Lang: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want := []want{
			{"utt-001", filepath.Join(root, "d", "wavs", "utt-001.wav"), "turn the lights off", "en"},
			{"utt-002", filepath.Join(root, "d", "wavs", "utt-002.flac"), "what time is it", "en"},
		}
		if got := samplesOf(ds); !reflect.DeepEqual(got, want) {
			t.Errorf("samples =\n %q\nwant\n %q", got, want)
		}
	})

	t.Run("seedtts", func(t *testing.T) {
		root := tree(t, t.TempDir(), map[string]any{"en/meta.lst": blocks["text meta.lst"]})
		ds, err := dataset.LoadWith(filepath.Join(root, "en", "meta.lst"), dataset.Options{Lang: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want := []want{
			{"common_voice_en_1", filepath.Join(root, "en", "prompt-wavs", "common_voice_en_1.wav"), "He was a great man.", "en"},
			{"common_voice_en_2", filepath.Join(root, "en", "prompt-wavs", "common_voice_en_2.wav"), "It rained all day.", "en"},
		}
		if got := samplesOf(ds); !reflect.DeepEqual(got, want) {
			t.Errorf("samples =\n %q\nwant\n %q", got, want)
		}
	})
}
