package dataset_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/internal/datasettest"
)

type seedRow = datasettest.SeedRow

func str(s string) *string { return &s }

func seed(id, text string, audio []byte) seedRow {
	return datasettest.Seed(datasettest.Row{ID: id, Text: text, Audio: audio})
}

func writeParquet[T any](t *testing.T, path string, rows []T) {
	t.Helper()
	if err := datasettest.WriteParquet(path, rows); err != nil {
		t.Fatal(err)
	}
}

type arrowRow struct {
	id, text, path string
	audio          []byte
}

func writeArrowStream(t *testing.T, path string, rows []arrowRow) {
	t.Helper()
	ar := make([]datasettest.ArrowRow, len(rows))
	for i, r := range rows {
		ar[i] = datasettest.ArrowRow{ID: r.id, Text: r.text, Path: r.path, Audio: r.audio}
	}
	if err := datasettest.WriteArrowStream(path, ar); err != nil {
		t.Fatal(err)
	}
}

// inline is a sample as a test compares it.
type inline struct {
	id, text, lang, name string
	audio                []byte
	file                 string // a path, when the audio is not inline
}

func inlineOf(t *testing.T, ds *dataset.Dataset) []inline {
	t.Helper()
	var out []inline
	for _, s := range ds.Samples {
		x := inline{id: s.ID, text: s.Text, lang: s.Lang, name: s.FileName(), file: s.Audio}
		if s.Inline != nil {
			x.audio = s.Inline.Bytes
		}
		out = append(out, x)
	}
	return out
}

func TestLoadTables(t *testing.T) {
	a, b, c := wav(1, 800), wav(2, 1600), flacFile(t, 4000)

	t.Run("seedtts parquet file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "en.parquet")
		writeParquet(t, p, []seedRow{seed("s1", " hello there ", a), seed("s2", "good morning", c)})
		ds, err := dataset.LoadWith(p, dataset.Options{Lang: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want := []inline{{"s1", "hello there", "en", "s1.wav", a, ""}, {"s2", "good morning", "en", "s2.wav", c, ""}}
		if got := inlineOf(t, ds); !reflect.DeepEqual(got, want) || ds.Format != "parquet" {
			t.Errorf("%s samples\n%v\nwant\n%v", ds.Format, got, want)
		}
	})

	t.Run("hub snapshot with splits", func(t *testing.T) {
		root := t.TempDir()
		writeParquet(t, filepath.Join(root, "data", "train-00000-of-00001.parquet"), []seedRow{seed("t1", "train one", a)})
		writeParquet(t, filepath.Join(root, "data", "test-00000-of-00002.parquet"), []seedRow{seed("e1", "test one", a)})
		writeParquet(t, filepath.Join(root, "data", "test-00001-of-00002.parquet"), []seedRow{seed("e2", "test two", b)})
		tree(t, root, map[string]any{"README.md": "---\nlicense: cc\n---\n"})
		writeParquet(t, filepath.Join(root, "data", "validation.parquet"), []seedRow{seed("v1", "valid one", a)})
		ds, err := dataset.LoadWith(root, dataset.Options{Lang: "zh", Split: "test"})
		if err != nil {
			t.Fatal(err)
		}
		want := []inline{{"e1", "test one", "zh", "e1.wav", a, ""}, {"e2", "test two", "zh", "e2.wav", b, ""}}
		if got := inlineOf(t, ds); !reflect.DeepEqual(got, want) || ds.Format != "hf-hub" {
			t.Errorf("%s samples\n%v\nwant\n%v", ds.Format, got, want)
		}
		for split, msg := range map[string]string{"": "several splits (test, train, validation); choose one with --split", "dev": `no split "dev"; the splits are: test, train, validation`} {
			_, err := dataset.LoadWith(root, dataset.Options{Lang: "en", Split: split})
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("split %q: error %v, want %q", split, err, msg)
			}
		}
	})

	t.Run("seedtts snapshot: the split named as the language", func(t *testing.T) {
		root := t.TempDir()
		writeParquet(t, filepath.Join(root, "data", "en-00000-of-00001.parquet"), []seedRow{seed("e", "hello", a)})
		writeParquet(t, filepath.Join(root, "data", "zh-00000-of-00001.parquet"), []seedRow{seed("z", "你好", b)})
		for lang, id := range map[string]string{"en": "e", "zh": "z"} {
			ds, err := dataset.LoadWith(root, dataset.Options{Lang: lang})
			if err != nil || len(ds.Samples) != 1 || ds.Samples[0].ID != id || ds.Samples[0].Lang != lang {
				t.Errorf("--lang %s: %+v %v", lang, ds, err)
			}
		}
	})

	t.Run("parquet dir, other names, audio as bytes and paths", func(t *testing.T) {
		type row struct {
			Utt   int64   `parquet:"utt"`
			Wav   []byte  `parquet:"wav,optional"`
			Words string  `parquet:"words"`
			Lang  *string `parquet:"language,optional"`
		}
		type pathRow struct {
			ID    string `parquet:"id"`
			Audio string `parquet:"audio"`
			Text  string `parquet:"sentence"`
		}
		root := t.TempDir()
		writeParquet(t, filepath.Join(root, "part-0.parquet"), []row{{7, a, "seven", str("zh")}, {8, b, "eight", nil}})
		ds, err := dataset.LoadWith(root, dataset.Options{Lang: "en", Columns: dataset.Columns{ID: "utt", Audio: "wav", Text: "words"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []inline{{"7", "seven", "zh", "7", a, ""}, {"8", "eight", "en", "8", b, ""}}
		if got := inlineOf(t, ds); !reflect.DeepEqual(got, want) {
			t.Errorf("samples\n%v\nwant\n%v", got, want)
		}
		// Audio named by path, relative to the table's directory.
		other := tree(t, t.TempDir(), map[string]any{"clips/x.wav": a})
		writeParquet(t, filepath.Join(other, "t.parquet"), []pathRow{{"x", "clips/x.wav", "the x"}})
		ds, err = dataset.LoadWith(filepath.Join(other, "t.parquet"), dataset.Options{Lang: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want = []inline{{"x", "the x", "en", "x.wav", nil, filepath.Join(other, "clips", "x.wav")}}
		if got := inlineOf(t, ds); !reflect.DeepEqual(got, want) {
			t.Errorf("samples\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("hf datasets cache", func(t *testing.T) {
		root := tree(t, t.TempDir(), map[string]any{"dataset_info.json": `{"builder_name":"seed-tts-eval","splits":{"test":{},"train":{}}}`})
		writeArrowStream(t, filepath.Join(root, "seed-tts-eval-test.arrow"), []arrowRow{{"a", "alpha", "a.wav", a}, {"b", "beta", "", b}})
		writeArrowStream(t, filepath.Join(root, "seed-tts-eval-train.arrow"), []arrowRow{{"z", "zeta", "z.wav", c}})
		// What map() leaves beside the splits is not a split.
		writeArrowStream(t, filepath.Join(root, "cache-0123456789abcdef.arrow"), []arrowRow{{"m", "mapped", "m.wav", c}})
		ds, err := dataset.LoadWith(root, dataset.Options{Lang: "en", Split: "test"})
		if err != nil {
			t.Fatal(err)
		}
		want := []inline{{"a", "alpha", "en", "a.wav", a, ""}, {"b", "beta", "en", "b", b, ""}}
		if got := inlineOf(t, ds); !reflect.DeepEqual(got, want) || ds.Format != "hf-arrow" {
			t.Errorf("%s samples\n%v\nwant\n%v", ds.Format, got, want)
		}
		if _, err := dataset.LoadWith(root, dataset.Options{Lang: "en"}); err == nil || !strings.Contains(err.Error(), "several splits (test, train);") {
			t.Errorf("no --split: %v", err)
		}
	})

	t.Run("hub snapshot of arrow files", func(t *testing.T) {
		root := t.TempDir()
		writeArrowStream(t, filepath.Join(root, "data", "en-00000-of-00001.arrow"), []arrowRow{{"a", "alpha", "a.wav", a}})
		writeArrowStream(t, filepath.Join(root, "data", "zh-00000-of-00001.arrow"), []arrowRow{{"z", "阿尔法", "z.wav", b}})
		ds, err := dataset.LoadWith(root, dataset.Options{Lang: "zh"})
		if err != nil || ds.Format != "hf-hub" || len(ds.Samples) != 1 || ds.Samples[0].ID != "z" {
			t.Errorf("%+v %v", ds, err)
		}
	})

	t.Run("hf save_to_disk dict", func(t *testing.T) {
		root := tree(t, t.TempDir(), map[string]any{
			"dataset_dict.json":    `{"splits": ["en", "zh"]}`,
			"en/dataset_info.json": `{}`, "zh/dataset_info.json": `{}`,
			"en/state.json": `{"_data_files": [{"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}], "_split": null}`,
			"zh/state.json": `{"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": null}`,
		})
		writeArrowStream(t, filepath.Join(root, "en", "data-00000-of-00002.arrow"), []arrowRow{{"e1", "one", "", a}})
		writeArrowStream(t, filepath.Join(root, "en", "data-00001-of-00002.arrow"), []arrowRow{{"e2", "two", "", b}})
		writeArrowStream(t, filepath.Join(root, "zh", "data-00000-of-00001.arrow"), []arrowRow{{"z1", "一", "", c}})
		ds, err := dataset.LoadWith(root, dataset.Options{Lang: "en", Split: "en"})
		if err != nil {
			t.Fatal(err)
		}
		if got := inlineOf(t, ds); len(got) != 2 || got[0].id != "e1" || got[1].id != "e2" || !bytes.Equal(got[1].audio, b) {
			t.Errorf("samples %v", got)
		}
		// One split of it, passed by itself.
		ds, err = dataset.LoadWith(filepath.Join(root, "zh"), dataset.Options{Lang: "zh"})
		if err != nil || len(ds.Samples) != 1 || ds.Samples[0].Text != "一" {
			t.Errorf("zh: %v %v", ds, err)
		}
	})
}

func TestLoadTableErrors(t *testing.T) {
	a := wav(1, 800)
	type noAudio struct {
		SampleID string `parquet:"sample_id"`
		RefText  string `parquet:"ref_text"`
	}
	type emptyID struct {
		ID    *string `parquet:"id,optional"`
		Audio []byte  `parquet:"audio"`
		Text  string  `parquet:"text"`
	}
	type badType struct {
		ID    string  `parquet:"id"`
		Audio []byte  `parquet:"audio"`
		Text  float64 `parquet:"text"`
	}
	dir := t.TempDir()
	files := map[string]func(p string){
		"noaudio.parquet": func(p string) { writeParquet(t, p, []noAudio{{"a", "x"}}) },
		"dup.parquet":     func(p string) { writeParquet(t, p, []seedRow{seed("a", "x", a), seed("b", "y", a), seed("a", "z", a)}) },
		"emptyid.parquet": func(p string) { writeParquet(t, p, []emptyID{{str("a"), a, "x"}, {nil, a, "y"}}) },
		"badtype.parquet": func(p string) { writeParquet(t, p, []badType{{"a", a, 1}}) },
		"seed.parquet":    func(p string) { writeParquet(t, p, []seedRow{seed("a", "x", a)}) },
	}
	files["lfs.parquet"] = func(p string) {
		os.WriteFile(p, []byte("version https://git-lfs.github.com/spec/v1\noid sha256:3d68\nsize 19234808\n"), 0o644)
	}
	files["lfs.arrow"] = files["lfs.parquet"]
	for name, write := range files {
		write(filepath.Join(dir, name))
	}
	for _, tc := range []struct {
		file string
		cols dataset.Columns
		want string
	}{
		{"noaudio.parquet", dataset.Columns{}, "noaudio.parquet: no audio column: none of ref_audio, audio (columns: sample_id, ref_text); name it with --columns audio=NAME"},
		{"seed.parquet", dataset.Columns{Text: "transcript"}, `seed.parquet: no column "transcript" for the text (columns: sample_id, ref_audio, ref_text, ref_audio_path, target_text)`},
		{"dup.parquet", dataset.Columns{}, `dup.parquet row 2: duplicate id "a" (first in dup.parquet row 0)`},
		{"emptyid.parquet", dataset.Columns{}, `emptyid.parquet row 1: column "id" (the id) is empty`},
		{"badtype.parquet", dataset.Columns{}, `badtype.parquet: column "text" (the text) is another type (DOUBLE), want a string`},
		{"lfs.parquet", dataset.Columns{}, "lfs.parquet: not a readable Parquet file (it is a Git LFS pointer: fetch the data with git lfs pull"},
		{"lfs.arrow", dataset.Columns{}, "lfs.arrow: not a readable Arrow IPC stream (it is a Git LFS pointer"},
	} {
		_, err := dataset.LoadWith(filepath.Join(dir, tc.file), dataset.Options{Lang: "en", Columns: tc.cols})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error\n %v\nwant it to contain\n %s", tc.file, err, tc.want)
		}
	}
}

// Preflight checks table rows as it checks files: each bad row is named by
// file, row and column, and no row is written to a file.
func TestPreflightTableRows(t *testing.T) {
	good, good2 := wav(1, 800), flacFile(t, 4000)
	garbage := bytes.Repeat([]byte{0x13, 0x37}, 100)
	root := t.TempDir()
	p := filepath.Join(root, "test.parquet")
	writeParquet(t, p, []seedRow{
		seed("ok", "fine", good),
		seed("empty", "x", []byte{}),
		seed("garbage", "x", garbage),
		{SampleID: "nulls", RefAudio: nil, RefText: nil},
		seed("flac", "fine too", good2),
	})
	ds, err := dataset.LoadWith(p, dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := dataset.Preflight(context.Background(), ds, 2)
	if len(ok) != 2 || ok[0].ID != "ok" || ok[1].ID != "flac" || ok[0].Info.Frames != 800 || ok[1].Info.Format != "flac" {
		t.Errorf("good %+v", ok)
	}
	if ok[0].FileName() != "ok.wav" || ok[1].FileName() != "flac.flac" {
		t.Errorf("file names %q, %q: the cell's path names them, with the extension of what they hold", ok[0].FileName(), ok[1].FileName())
	}
	want := []dataset.BadEntry{
		{ID: "empty", Path: "test.parquet row 1, column ref_audio", Reason: "empty audio bytes"},
		{ID: "garbage", Path: "test.parquet row 2, column ref_audio", Reason: "unrecognised file signature 13 37 13 37: unsupported audio format"},
		{ID: "nulls", Path: "test.parquet row 3, column ref_audio", Reason: `missing transcript: column "ref_text" is null; no audio: the cell is null`},
	}
	if len(bad) != len(want) {
		t.Fatalf("bad %+v", bad)
	}
	for i := range want {
		if bad[i].ID != want[i].ID || bad[i].Path != want[i].Path || bad[i].Reason != want[i].Reason {
			t.Errorf("bad[%d] = %+v\nwant %+v", i, bad[i], want[i])
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("preflight left files beside the table: %v", entries)
	}
}

// The fingerprint covers the rows read: the same ids, texts and audio give
// the fingerprint a manifest of files gives, and one changed byte changes
// it.
func TestFingerprintTableRows(t *testing.T) {
	a, b := wav(1, 800), wav(2, 800)
	root := tree(t, t.TempDir(), map[string]any{
		"m.jsonl": `{"id":"s1","audio":"s1.wav","text":"one"}` + "\n" + `{"id":"s2","audio":"s2.wav","text":"two"}` + "\n",
		"s1.wav":  a, "s2.wav": b,
	})
	files, err := dataset.LoadWith(filepath.Join(root, "m.jsonl"), dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "t.parquet")
	writeParquet(t, p, []seedRow{seed("s1", "one", a), seed("s2", "two", b)})
	rows, err := dataset.LoadWith(p, dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	fa, err1 := dataset.Fingerprint(files.Samples)
	fb, err2 := dataset.Fingerprint(rows.Samples)
	if err1 != nil || err2 != nil || fa != fb {
		t.Errorf("files %s (%v), rows %s (%v): want the same", fa, err1, fb, err2)
	}
	b2 := bytes.Clone(b)
	b2[len(b2)-1] ^= 1
	writeParquet(t, p, []seedRow{seed("s1", "one", a), seed("s2", "two", b2)})
	rows, _ = dataset.LoadWith(p, dataset.Options{Lang: "en"})
	if fc, _ := dataset.Fingerprint(rows.Samples); fc == fb {
		t.Error("one audio byte changed and the fingerprint did not")
	}
}

func TestLoadSeedTTS(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]any{
		"en/meta.lst":  "utt1|hello world|prompt-wavs/utt1.wav|a sentence to say\n\nutt2|good night|prompt-wavs/utt2.wav|another one\n",
		"bad/meta.lst": "utt1|hello|a.wav|x\nutt2|only|three\n",
		"dup/meta.lst": "utt1|hello|a.wav|x\nutt1|again|b.wav|y\n",
	})
	ds, err := dataset.LoadWith(filepath.Join(root, "en", "meta.lst"), dataset.Options{Lang: "en"})
	if err != nil {
		t.Fatal(err)
	}
	want := []want{
		{"utt1", filepath.Join(root, "en", "prompt-wavs", "utt1.wav"), "hello world", "en"},
		{"utt2", filepath.Join(root, "en", "prompt-wavs", "utt2.wav"), "good night", "en"},
	}
	if got := samplesOf(ds); !reflect.DeepEqual(got, want) || ds.Format != "seedtts" {
		t.Errorf("%s samples %q, want %q", ds.Format, got, want)
	}
	for dir, msg := range map[string]string{"bad": "meta.lst:2: 3 fields, want 4 (id|ref_text|ref_audio|target_text)", "dup": `meta.lst:2: duplicate id "utt1" (first on line 1)`} {
		if _, err := dataset.LoadWith(filepath.Join(root, dir, "meta.lst"), dataset.Options{Lang: "en"}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", dir, err, msg)
		}
	}
}

func TestParseColumns(t *testing.T) {
	c, err := dataset.ParseColumns("id=utt, audio=wav,text=words")
	if err != nil || c != (dataset.Columns{ID: "utt", Audio: "wav", Text: "words"}) || c.String() != "id=utt,audio=wav,text=words" {
		t.Errorf("%+v %v", c, err)
	}
	for _, bad := range []string{"speaker=x", "id", "id=a,id=b", "text="} {
		if _, err := dataset.ParseColumns(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
