package dataset_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/internal/audiotest"
)

// wav returns a 16 kHz mono 16-bit WAV of n frames whose samples start at
// seed, so files with different seeds differ.
func wav(seed int16, n int) []byte {
	s := make([]int16, n)
	for i := range s {
		s[i] = seed + int16(i)
	}
	return audiotest.WAV16(16000, 1, s...)
}

func flacFile(t *testing.T, n int) []byte {
	t.Helper()
	ch := make([]int32, n)
	for i := range ch {
		ch[i] = int32(i % 1000)
	}
	b, err := audiotest.FLAC(audiotest.FLACSpec{Rate: 8000, BitsPerSample: 16, Channels: [][]int32{ch}, Sealed: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tree writes files (slash-separated paths relative to root, string or
// []byte contents) under root and returns root.
func tree(t *testing.T, root string, files map[string]any) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var b []byte
		switch c := content.(type) {
		case string:
			b = []byte(c)
		case []byte:
			b = c
		default:
			t.Fatalf("bad fixture content %T", content)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type want struct{ id, audio, text, lang string }

func samplesOf(ds *dataset.Dataset) []want {
	var got []want
	for _, s := range ds.Samples {
		got = append(got, want{s.ID, s.Audio, s.Text, s.Lang})
	}
	return got
}

func TestLoad(t *testing.T) {
	abs := tree(t, t.TempDir(), map[string]any{"elsewhere/c.wav": wav(3, 800)})
	absC := filepath.Join(abs, "elsewhere", "c.wav")

	tests := []struct {
		name   string
		files  map[string]any
		arg    string // path passed to Load, relative to the fixture root
		format string
		want   []want // audio paths relative to the fixture root unless absolute
	}{
		{
			name: "jsonl",
			files: map[string]any{
				"audio/a.wav":  wav(1, 1600),
				"audio/b.flac": flacFile(t, 4000),
				"manifest.jsonl": `{"id":"a","audio":"audio/a.wav","text":" hello world ","lang":"de"}

{"id":"b","audio":"audio/b.flac","text":"second","duration":2.5}` + "\r\n" +
					`{"id":"c","audio":"` + filepath.ToSlash(absC) + `","text":"","lang":""}` + "\n  \n",
			},
			arg:    "manifest.jsonl",
			format: "jsonl",
			want: []want{
				{"a", "audio/a.wav", "hello world", "de"},
				{"b", "audio/b.flac", "second", "en"},
				{"c", absC, "", "en"},
			},
		},
		{
			name: "jsonl detected by content",
			files: map[string]any{
				"data/list": "\n" + `{"id":"x","audio":"../x.wav","text":"t"}` + "\n",
				"x.wav":     wav(1, 160),
			},
			arg:    "data/list",
			format: "jsonl",
			want:   []want{{"x", "x.wav", "t", "en"}},
		},
		{
			name: "kaldi directory",
			files: map[string]any{
				"data/wav.scp":       "utt2 wavs/two.wav\n\nutt1\twavs/one.flac\n",
				"data/text":          "utt1 the first one\nutt2\nother ignored line\n",
				"data/wavs/two.wav":  wav(2, 800),
				"data/wavs/one.flac": flacFile(t, 800),
			},
			arg:    "data",
			format: "kaldi",
			want: []want{
				{"utt2", "data/wavs/two.wav", "", "en"},
				{"utt1", "data/wavs/one.flac", "the first one", "en"},
			},
		},
		{
			name: "kaldi wav.scp file",
			files: map[string]any{
				"k/wav.scp": "u1 u1.wav\n",
				"k/text":    "u1 spoken words\n",
				"k/u1.wav":  wav(5, 800),
			},
			arg:    "k/wav.scp",
			format: "kaldi",
			want:   []want{{"u1", "k/u1.wav", "spoken words", "en"}},
		},
		{
			name: "folder",
			files: map[string]any{
				"corpus/b.wav":             wav(1, 800),
				"corpus/b.txt":             "bee\n",
				"corpus/a/z.FLAC":          flacFile(t, 800),
				"corpus/a/z.txt":           "  zed\n  on two lines \n",
				"corpus/a-1.wav":           wav(2, 800),
				"corpus/a-1.txt":           "dash",
				"corpus/notes.md":          "ignored",
				"corpus/.cache/hidden.wav": wav(9, 800),
			},
			arg:    "corpus",
			format: "folder",
			want: []want{
				{"a-1", "corpus/a-1.wav", "dash", "en"},
				{"a/z", "corpus/a/z.FLAC", "zed on two lines", "en"},
				{"b", "corpus/b.wav", "bee", "en"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, t.TempDir(), tt.files)
			arg := filepath.Join(root, filepath.FromSlash(tt.arg))
			ds, err := dataset.LoadWith(arg, dataset.Options{Lang: "en"})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if ds.Format != tt.format || ds.Path != arg {
				t.Errorf("Load = format %q path %q, want %q %q", ds.Format, ds.Path, tt.format, arg)
			}
			var wants []want
			for _, w := range tt.want {
				if !filepath.IsAbs(w.audio) {
					w.audio = filepath.Join(root, filepath.FromSlash(w.audio))
				}
				wants = append(wants, w)
			}
			if got := samplesOf(ds); !reflect.DeepEqual(got, wants) {
				t.Errorf("samples =\n %q\nwant\n %q", got, wants)
			}
		})
	}
}

func TestLoadRelativePath(t *testing.T) {
	// A relative manifest path still yields absolute audio paths.
	root := tree(t, t.TempDir(), map[string]any{
		"m.jsonl": `{"id":"a","audio":"a.wav","text":"x"}`,
		"a.wav":   wav(0, 10),
	})
	t.Chdir(root)
	ds, err := dataset.LoadWith("m.jsonl", dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Samples[0].Audio; got != filepath.Join(root, "a.wav") {
		t.Errorf("audio = %q, want %q", got, filepath.Join(root, "a.wav"))
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]any
		arg   string
		want  []string // substrings of the error
	}{
		{
			name:  "malformed jsonl line",
			files: map[string]any{"manifest.jsonl": `{"id":"a","audio":"a.wav","text":"x"}` + "\n\n" + `{"id":"b","audio":"b.wav",` + "\n"},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:3: ", "invalid JSON"},
		},
		{
			name:  "jsonl line is not an object",
			files: map[string]any{"manifest.jsonl": `["a","b"]`},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:1: ", "not an object"},
		},
		{
			name:  "jsonl field of wrong type",
			files: map[string]any{"manifest.jsonl": `{"id":7,"audio":"a.wav","text":"x"}`},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:1: ", `field "id"`, "number"},
		},
		{
			name:  "jsonl missing audio",
			files: map[string]any{"manifest.jsonl": "{\"id\":\"a\",\"audio\":\"a.wav\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\"y\"}\n"},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:2: ", `missing required field "audio"`},
		},
		{
			name:  "jsonl missing id",
			files: map[string]any{"manifest.jsonl": `{"audio":"a.wav","text":"x"}`},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:1: ", `missing required field "id"`},
		},
		{
			name:  "jsonl missing text",
			files: map[string]any{"manifest.jsonl": `{"id":"a","audio":"a.wav","text":null}`},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:1: ", `missing required field "text"`},
		},
		{
			name:  "jsonl empty id",
			files: map[string]any{"manifest.jsonl": `{"id":" ","audio":"a.wav","text":"x"}`},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:1: ", `field "id" is empty`},
		},
		{
			name:  "jsonl duplicate id",
			files: map[string]any{"manifest.jsonl": "{\"id\":\"a\",\"audio\":\"a.wav\",\"text\":\"x\"}\n{\"id\":\"b\",\"audio\":\"b.wav\",\"text\":\"x\"}\n{\"id\":\"a\",\"audio\":\"c.wav\",\"text\":\"x\"}\n"},
			arg:   "manifest.jsonl",
			want:  []string{"manifest.jsonl:3: ", `duplicate id "a" (first on line 1)`},
		},
		{
			name:  "jsonl without samples",
			files: map[string]any{"manifest.jsonl": "\n\n"},
			arg:   "manifest.jsonl",
			want:  []string{"no samples"},
		},
		{
			name:  "kaldi duplicate id in wav.scp",
			files: map[string]any{"d/wav.scp": "a a.wav\nb b.wav\na c.wav\n", "d/text": "a x\n"},
			arg:   "d",
			want:  []string{"wav.scp:3: ", `duplicate id "a" (first on line 1)`},
		},
		{
			name:  "kaldi duplicate id in text",
			files: map[string]any{"d/wav.scp": "a a.wav\n", "d/text": "a x\na y\n"},
			arg:   "d",
			want:  []string{"text:2: ", `duplicate id "a"`},
		},
		{
			name:  "kaldi entry without path",
			files: map[string]any{"d/wav.scp": "a a.wav\nb\n", "d/text": "a x\n"},
			arg:   "d/wav.scp",
			want:  []string{"wav.scp:2: ", `id "b" has no audio path`},
		},
		{
			name:  "kaldi wav.scp without text",
			files: map[string]any{"d/wav.scp": "a a.wav\n"},
			arg:   "d/wav.scp",
			want:  []string{"no text file"},
		},
		{
			name:  "kaldi segments",
			files: map[string]any{"d/wav.scp": "rec a.wav\n", "d/text": "u1 x\n", "d/segments": "u1 rec 0 1\n"},
			arg:   "d",
			want:  []string{"segments", "not supported"},
		},
		{
			name:  "folder duplicate id",
			files: map[string]any{"f/a.wav": wav(0, 10), "f/a.flac": []byte("x"), "f/a.txt": "t"},
			arg:   "f",
			want:  []string{`duplicate id "a"`},
		},
		{
			name:  "folder without audio",
			files: map[string]any{"f/readme.txt": "nothing here"},
			arg:   "f",
			want:  []string{"no .wav or .flac files"},
		},
		{
			name:  "not a manifest",
			files: map[string]any{"list.txt": "a.wav hello\n"},
			arg:   "list.txt",
			want:  []string{"not a dataset"},
		},
		{
			name: "missing path",
			arg:  "nope.jsonl",
			want: []string{"nope.jsonl", "no such file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, t.TempDir(), tt.files)
			ds, err := dataset.LoadWith(filepath.Join(root, tt.arg), dataset.Options{Lang: "en"})
			if err == nil {
				t.Fatalf("Load succeeded with %d samples, want error", len(ds.Samples))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLimit(t *testing.T) {
	mk := func() *dataset.Dataset {
		return &dataset.Dataset{Samples: []dataset.Sample{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	}
	for _, tt := range []struct {
		n    int
		want string
	}{{2, "ab"}, {1, "a"}, {3, "abc"}, {10, "abc"}, {0, "abc"}, {-1, "abc"}} {
		ds := mk()
		ds.Limit(tt.n)
		var got string
		for _, s := range ds.Samples {
			got += s.ID
		}
		if got != tt.want {
			t.Errorf("Limit(%d) kept %q, want %q", tt.n, got, tt.want)
		}
	}
}

// Sample stays comparable (callers may use it as a map key or compare
// samples); this fails to compile if a slice or map field sneaks in.
var _ = dataset.Sample{} == dataset.Sample{}

func TestPreflightFillsInfo(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]any{
		"m.jsonl": `{"id":"a","audio":"a.wav","text":"x"}` + "\n" + `{"id":"b","audio":"b.flac","text":"y"}`,
		"a.wav":   wav(0, 4000),
		"b.flac":  flacFile(t, 12000),
	})
	ds, err := dataset.LoadWith(filepath.Join(root, "m.jsonl"), dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := dataset.Preflight(context.Background(), ds, 2)
	if len(bad) != 0 || len(good) != 2 {
		t.Fatalf("good %d bad %v, want 2 good", len(good), bad)
	}
	wantInfo := []audio.Info{
		{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 4000, DurationS: 0.25},
		{Format: "flac", Encoding: "flac", SampleRate: 8000, Channels: 1, BitsPerSample: 16, Frames: 12000, DurationS: 1.5},
	}
	for i, w := range wantInfo {
		if good[i].Info != w {
			t.Errorf("good[%d].Info = %+v, want %+v", i, good[i].Info, w)
		}
		if ds.Samples[i].Info != w {
			t.Errorf("ds.Samples[%d].Info = %+v, want %+v", i, ds.Samples[i].Info, w)
		}
	}
}
