package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/dataset"
)

// TestSnapshotLoadsAsTheTourSays: the snapshot is a hub snapshot of two
// splits that bench/dataset reads only with a split and the columns named,
// as README.md's step 10 types them, with each sample's audio and text.
func TestSnapshotLoadsAsTheTourSays(t *testing.T) {
	dir := t.TempDir()
	wav := []byte("RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n+".wav"), wav, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	man := filepath.Join(dir, "m.jsonl")
	os.WriteFile(man, []byte(`{"id":"a","audio":"a.wav","text":"one"}
{"id":"b","audio":"b.wav","text":"two"}

{"id":"c","audio":"c.wav","text":"three"}
`), 0o644)
	out := filepath.Join(dir, "hf")
	got, err := write(man, out, []string{"test", "train"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasSuffix(got[0], "test-00000-of-00001.parquet: 2 samples") || !strings.HasSuffix(got[1], "train-00000-of-00001.parquet: 1 samples") {
		t.Fatalf("written %q", got)
	}
	if _, err := dataset.LoadWith(out, dataset.Options{Lang: "en"}); err == nil || !strings.Contains(err.Error(), "--split") {
		t.Errorf("no --split: err %v, want the splits listed", err)
	}
	if _, err := dataset.LoadWith(out, dataset.Options{Lang: "en", Split: "test"}); err == nil || !strings.Contains(err.Error(), "--columns id=NAME") {
		t.Errorf("no --columns: err %v, want the id column asked for", err)
	}
	cols, err := dataset.ParseColumns("id=utt_id,text=transcript")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.LoadWith(out, dataset.Options{Lang: "en", Split: "test", Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Format != "hf-hub" || len(ds.Samples) != 2 || ds.Samples[0].ID != "a" || ds.Samples[1].ID != "c" || ds.Samples[1].Text != "three" {
		t.Fatalf("loaded %s %+v", ds.Format, ds.Samples)
	}
	b, err := ds.Samples[0].ReadAudio()
	if err != nil || string(b) != string(wav) {
		t.Errorf("audio of a: %v, %d bytes, want the file's %d", err, len(b), len(wav))
	}
	if _, err := write(man, out, []string{"en-us"}, 0); err == nil {
		t.Error("split name with '-': no error")
	}
}
