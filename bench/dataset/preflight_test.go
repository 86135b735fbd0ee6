package dataset_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/internal/audiotest"
)

func TestPreflight(t *testing.T) {
	flac := flacFile(t, 3000)
	corruptFLAC := append([]byte(nil), flac...)
	corruptFLAC[len(corruptFLAC)-40] ^= 0x10
	random := make([]byte, 300)
	for i := range random {
		random[i] = byte(i*73 + 19)
	}
	mp3 := append([]byte("ID3\x03\x00\x00\x00\x00\x00\x0a"), make([]byte, 200)...)
	pcm8 := audiotest.RIFF(audiotest.Chunk("fmt ", audiotest.Fmt(audiotest.TagPCM, 1, 8000, 8)), audiotest.Chunk("data", make([]byte, 800)))
	zeroLen := audiotest.WAV16(16000, 1)

	// Each case is one JSONL line; the audio file (if any) is named after the id.
	cases := []struct {
		id, ext string
		content []byte // nil: not written
		reason  string // "" for good samples; else a substring of the reason
	}{
		{"good1", ".wav", wav(1, 1600), ""},
		{"missing", ".wav", nil, "missing audio file"},
		{"truncated-header", ".wav", wav(1, 1600)[:30], "wav: fmt chunk truncated"},
		{"good2", ".flac", flac, ""},
		{"corrupt-flac", ".flac", corruptFLAC, "flac: frame at sample 0"},
		{"mp3", ".wav", mp3, "MP3"},
		{"pcm8", ".wav", pcm8, "8-bit PCM"},
		{"random", ".wav", random, "unsupported audio format"},
		{"empty", ".wav", []byte{}, "empty file"},
		{"zero-length", ".wav", zeroLen, "zero-length audio"},
		{"good3", ".wav", wav(3, 16), ""},
	}
	files := map[string]any{}
	var manifest strings.Builder
	for _, c := range cases {
		if c.content != nil {
			files["audio/"+c.id+c.ext] = c.content
		}
		fmt.Fprintf(&manifest, `{"id":%q,"audio":%q,"text":"words"}`+"\n", c.id, "audio/"+c.id+c.ext)
	}
	files["m.jsonl"] = manifest.String()
	root := tree(t, t.TempDir(), files)

	var first []dataset.BadEntry
	for _, workers := range []int{1, 3, 16, 0} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			ds, err := dataset.LoadWith(filepath.Join(root, "m.jsonl"), dataset.Options{Lang: "en"})
			if err != nil {
				t.Fatalf("Load must not fail on bad audio: %v", err)
			}
			good, bad := dataset.Preflight(context.Background(), ds, workers)
			var goodIDs, wantGood []string
			for _, s := range good {
				goodIDs = append(goodIDs, s.ID)
				if s.Info.Frames == 0 {
					t.Errorf("good sample %s has no Info", s.ID)
				}
			}
			var wantBad []string
			for _, c := range cases {
				if c.reason == "" {
					wantGood = append(wantGood, c.id)
				} else {
					wantBad = append(wantBad, c.id)
				}
			}
			if !reflect.DeepEqual(goodIDs, wantGood) {
				t.Errorf("good = %v, want %v", goodIDs, wantGood)
			}
			if len(bad) != len(wantBad) {
				t.Fatalf("bad = %+v, want ids %v", bad, wantBad)
			}
			i := 0
			for _, c := range cases {
				if c.reason == "" {
					continue
				}
				b := bad[i]
				i++
				if b.ID != c.id {
					t.Errorf("bad[%d].ID = %q, want %q (dataset order)", i-1, b.ID, c.id)
				}
				if want := filepath.Join(root, "audio", c.id+c.ext); b.Path != want {
					t.Errorf("%s: Path = %q, want %q", c.id, b.Path, want)
				}
				if !strings.Contains(b.Reason, c.reason) {
					t.Errorf("%s: Reason = %q, want it to contain %q", c.id, b.Reason, c.reason)
				}
				if strings.Contains(b.Reason, root) {
					t.Errorf("%s: Reason %q repeats the path", c.id, b.Reason)
				}
			}
			if first == nil {
				first = bad
			} else if !reflect.DeepEqual(bad, first) {
				t.Errorf("results differ with worker count:\n%+v\n%+v", bad, first)
			}
		})
	}
}

func TestPreflightMissingTranscripts(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]any
		arg   string
		want  []dataset.BadEntry // Path relative to the fixture root
		good  []string
	}{
		{
			name: "folder without txt",
			files: map[string]any{
				"f/a.wav": wav(1, 100), "f/a.txt": "hello",
				"f/b.wav": wav(2, 100),
				"f/c.wav": []byte("garbage!"),
			},
			arg:  "f",
			good: []string{"a"},
			want: []dataset.BadEntry{
				{ID: "b", Path: "f/b.wav", Reason: "missing transcript: no b.txt"},
				{ID: "c", Path: "f/c.wav", Reason: "missing transcript: no c.txt; unrecognised file signature 67 61 72 62: unsupported audio format"},
			},
		},
		{
			name: "kaldi id without text line",
			files: map[string]any{
				"d/wav.scp": "a a.wav\nb b.wav\n", "d/text": "a hello\n",
				"d/a.wav": wav(1, 100), "d/b.wav": wav(2, 100),
			},
			arg:  "d",
			good: []string{"a"},
			want: []dataset.BadEntry{{ID: "b", Path: "d/b.wav", Reason: "missing transcript: id not found in "}},
		},
		{
			name: "kaldi piped entry",
			files: map[string]any{
				"d/wav.scp": "a a.wav\np sox p.sph -t wav - |\n", "d/text": "a hello\np piped\n",
				"d/a.wav": wav(1, 100),
			},
			arg:  "d/wav.scp",
			good: []string{"a"},
			want: []dataset.BadEntry{{ID: "p", Path: "sox p.sph -t wav - |", Reason: "unsupported: piped wav.scp entry"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, t.TempDir(), tt.files)
			ds, err := dataset.LoadWith(filepath.Join(root, tt.arg), dataset.Options{Lang: "en"})
			if err != nil {
				t.Fatal(err)
			}
			good, bad := dataset.Preflight(context.Background(), ds, 2)
			var ids []string
			for _, s := range good {
				ids = append(ids, s.ID)
			}
			if !reflect.DeepEqual(ids, tt.good) {
				t.Errorf("good = %v, want %v", ids, tt.good)
			}
			if len(bad) != len(tt.want) {
				t.Fatalf("bad = %+v, want %+v", bad, tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(w.Path, "|") {
					w.Path = filepath.Join(root, filepath.FromSlash(w.Path))
				}
				b := bad[i]
				if b.ID != w.ID || b.Path != w.Path || !strings.HasPrefix(b.Reason, w.Reason) {
					t.Errorf("bad[%d] = %+v, want %+v (reason as prefix)", i, b, w)
				}
			}
		})
	}
}

func TestPreflightCancelled(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]any{"f/a.wav": wav(1, 100), "f/a.txt": "x", "f/b.wav": wav(1, 100), "f/b.txt": "y"})
	ds, err := dataset.LoadWith(filepath.Join(root, "f"), dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	good, bad := dataset.Preflight(ctx, ds, 1)
	// The first sample may race the cancellation; whatever was not probed
	// must be reported, never passed as good.
	if len(good)+len(bad) != 2 || len(bad) == 0 {
		t.Fatalf("good %d, bad %+v: want every unprobed sample bad", len(good), bad)
	}
	if last := bad[len(bad)-1]; last.ID != "b" || !strings.Contains(last.Reason, "not checked: context canceled") {
		t.Errorf("last bad entry = %+v, want b not checked", last)
	}
}
