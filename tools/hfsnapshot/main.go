// Command hfsnapshot writes a JSONL manifest's samples as a Hugging Face
// hub snapshot, the layout `huggingface-cli download REPO --repo-type
// dataset` leaves: data/<split>-00000-of-00001.parquet, the audio inline as
// Hugging Face's Audio feature (a struct of the file's bytes and its path).
// It is for trying `asrprof capture --dataset DIR --split --columns` on a
// table without downloading one (README.md, step 10).
//
// The columns are named utt_id, audio and transcript (not a name asrprof
// looks for by itself, so the text needs --columns text=transcript). The
// samples are dealt to the splits in turn: with -splits test,train the
// first sample goes to test, the second to train, and so on.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/asrprof/asrprof/internal/datasettest"
)

// row is one sample of the snapshot's tables.
type row struct {
	UttID      string               `parquet:"utt_id"`
	Audio      *datasettest.HFAudio `parquet:"audio,optional"`
	Transcript string               `parquet:"transcript"`
}

func main() {
	manifest := flag.String("manifest", "refserver/data/refset/manifest.jsonl", "JSONL manifest to read (id, audio, text; audio relative to the manifest)")
	out := flag.String("out", "runs/hf", "snapshot directory to write (data/ below it)")
	splits := flag.String("splits", "test,train", "comma-separated split names; samples are dealt to them in turn")
	max := flag.Int("max", 0, "at most this many samples (0: all)")
	flag.Parse()
	log.SetFlags(0)
	written, err := write(*manifest, *out, strings.Split(*splits, ","), *max)
	if err != nil {
		log.Fatalf("hfsnapshot: %v", err)
	}
	for _, w := range written {
		fmt.Println(w)
	}
}

// write reads manifest and writes the snapshot below out; it returns a
// line per table written ("PATH: N samples").
func write(manifest, out string, names []string, max int) ([]string, error) {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "/-") {
			return nil, fmt.Errorf("split name %q: want it non-empty, without '/' or '-'", n)
		}
	}
	f, err := os.Open(manifest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tables := make([][]row, len(names))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line, n := 0, 0
	for sc.Scan() {
		line++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		if max > 0 && n >= max {
			break
		}
		var e struct{ ID, Audio, Text string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", manifest, line, err)
		}
		if e.ID == "" || e.Audio == "" {
			return nil, fmt.Errorf("%s:%d: want the fields id and audio", manifest, line)
		}
		path := e.Audio
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(manifest), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", manifest, line, err)
		}
		base := filepath.Base(path)
		tables[n%len(names)] = append(tables[n%len(names)], row{UttID: e.ID, Audio: &datasettest.HFAudio{Bytes: b, Path: &base}, Transcript: e.Text})
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", manifest, err)
	}
	var written []string
	for i, name := range names {
		p := filepath.Join(out, "data", name+"-00000-of-00001.parquet")
		if err := datasettest.WriteParquet(p, tables[i]); err != nil {
			return nil, fmt.Errorf("%s: %v", p, err)
		}
		written = append(written, fmt.Sprintf("%s: %d samples", p, len(tables[i])))
	}
	return written, nil
}
