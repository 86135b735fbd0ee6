package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/datasettest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

// rowsFor makes n samples, each with audio of its own and a transcript the
// fake server answers for its file name (<id>.wav).
func rowsFor(n int) ([]datasettest.Row, func(string) string) {
	words := []string{"turn the lights off", "what time is it", "play some music", "call my mother"}
	rows := make([]datasettest.Row, n)
	for i := range rows {
		s := make([]int16, 4000+800*i)
		for j := range s {
			s[j] = int16(j*(i+1)) % 3000
		}
		rows[i] = datasettest.Row{ID: fmt.Sprintf("utt%02d", i), Text: words[i%len(words)], Audio: audiotest.WAV16(16000, 1, s...)}
	}
	byName := map[string]string{}
	for _, r := range rows {
		byName[r.ID+".wav"] = r.Text
	}
	return rows, func(name string) string { return byName[name] }
}

// asrprof capture --dataset on each layout the field stores SeedTTS and
// Hugging Face sets in: every row is sent (its own audio bytes, inline ones
// decoded in memory), scored, and fingerprinted as the same data.
func TestCaptureDatasetLayouts(t *testing.T) {
	t.Parallel() // reads datasets; checks what was sent, not how fast
	rows, textFor := rowsFor(3)
	root := t.TempDir()
	layouts := map[string]string{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// A Parquet folder, as a user exports one.
	must(datasettest.WriteSeedParquet(filepath.Join(root, "pq", "part-0.parquet"), rows))
	layouts["parquet dir"] = filepath.Join(root, "pq")
	// A hub snapshot: data/<split>-NNNNN-of-NNNNN.parquet, two splits.
	must(datasettest.WriteSeedParquet(filepath.Join(root, "hub", "data", "test-00000-of-00001.parquet"), rows))
	must(datasettest.WriteSeedParquet(filepath.Join(root, "hub", "data", "train-00000-of-00001.parquet"), rows[:1]))
	layouts["hub snapshot"] = filepath.Join(root, "hub")
	// A datasets cache: dataset_info.json beside <builder>-<split>.arrow.
	must(datasettest.WriteHFCache(filepath.Join(root, "cache"), "seed-tts-eval", "test", rows))
	layouts["hf cache"] = filepath.Join(root, "cache")
	// Other column names, given with --columns; the audio a bare binary
	// column, so the upload is named by the id and the format (utt00.wav).
	type otherRow struct {
		Utt   string `parquet:"utt"`
		Wav   []byte `parquet:"wav"`
		Words string `parquet:"words"`
	}
	other := make([]otherRow, len(rows))
	for i, r := range rows {
		other[i] = otherRow{r.ID, r.Audio, r.Text}
	}
	must(datasettest.WriteParquet(filepath.Join(root, "other", "t.parquet"), other))
	layouts["parquet --columns"] = filepath.Join(root, "other", "t.parquet")
	// seed-tts-eval's meta.lst.
	lst, err := datasettest.WriteMetaLst(filepath.Join(root, "seedtts", "en"), rows)
	must(err)
	layouts["meta.lst"] = lst
	// A Parquet file written by DuckDB, not by us: the audio read from
	// the meta.lst's wav files with read_blob, as a struct {bytes, path}.
	duck := filepath.Join(root, "duck", "test.parquet")
	must(os.MkdirAll(filepath.Dir(duck), 0o755))
	refs := make([]string, len(rows))
	for i, r := range rows {
		refs[i] = fmt.Sprintf("('%s.wav', '%s')", r.ID, r.Text)
	}
	duckdb(t, fmt.Sprintf(`copy (select regexp_extract(b.filename, '(utt[0-9]+)\.wav$', 1) as sample_id,
		{'bytes': b.content, 'path': b.filename} as ref_audio, r.ref_text
		from read_blob('%s') b join (values %s) r(name, ref_text) on b.filename like '%%/' || r.name
		order by b.filename) to '%s' (format parquet)`,
		filepath.Join(filepath.Dir(lst), "prompt-wavs", "*.wav"), strings.Join(refs, ", "), duck))
	layouts["duckdb parquet"] = duck

	sums := map[[32]byte]string{}
	for _, r := range rows {
		sums[sha256.Sum256(r.Audio)] = r.ID + ".wav"
	}
	fingerprints := map[string]string{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range layouts {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{TextFor: textFor})
			out := filepath.Join(t.TempDir(), "b")
			args := []string{"capture", "--target", srv.URL, "--dataset", layouts[name], "--concurrency", "2", "--repeats", "1",
				"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}
			switch name {
			case "hub snapshot":
				args = append(args, "--split", "test")
			case "parquet --columns":
				args = append(args, "--columns", "id=utt,audio=wav,text=words")
			}
			var stdout, stderr bytes.Buffer
			if code := runTest(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
			}
			reqs := srv.Requests()
			if len(reqs) != len(rows) {
				t.Fatalf("the server got %d requests, want %d", len(reqs), len(rows))
			}
			for _, r := range reqs {
				if want, ok := sums[r.FileSHA256]; !ok || want != r.FileName {
					t.Errorf("request with file %q (%d bytes) is not the audio of a row", r.FileName, r.FileSize)
				}
			}
			var res model.Results
			readJSONInto(t, filepath.Join(out, bundle.ResultsFile), &res)
			lr := res.Results[0]
			if lr.Evaluated != len(rows) || lr.Total != len(rows) || lr.Skipped != 0 || lr.CorpusWER.Mean != 0 {
				t.Errorf("results.json: evaluated %d/%d, skipped %d, WER %v", lr.Evaluated, lr.Total, lr.Skipped, lr.CorpusWER.Mean)
			}
			var m model.Manifest
			readJSONInto(t, filepath.Join(out, bundle.ManifestFile), &m)
			fingerprints[name] = m.Fingerprint.DatasetSHA256
		})
	}
	// The same ids, transcripts and audio bytes, however stored.
	var first string
	for name, fp := range fingerprints {
		if first == "" {
			first = fp
		}
		if fp != first || fp == "" {
			t.Errorf("fingerprints differ across layouts: %v (%s)", fingerprints, name)
			break
		}
	}
}

// A table row that is bad stops the capture before anything is sent, and
// the message names the row and the column.
func TestCaptureDatasetBadRow(t *testing.T) {
	rows, textFor := rowsFor(3)
	rows[1].Audio = []byte("RIFF but not really a wave file")
	p := filepath.Join(t.TempDir(), "t.parquet")
	if err := datasettest.WriteSeedParquet(p, rows); err != nil {
		t.Fatal(err)
	}
	srv := fakeasr.NewServer(t, fakeasr.Config{TextFor: textFor})
	var stdout, stderr bytes.Buffer
	code := runTest([]string{"capture", "--target", srv.URL, "--dataset", p, "--concurrency", "1",
		"--out", filepath.Join(t.TempDir(), "b"), "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}, &stdout, &stderr)
	if code == exitOK || srv.Count() != 0 || !strings.Contains(stderr.String(), "bad entry utt01: t.parquet row 1, column ref_audio: ") {
		t.Errorf("exit %d, %d requests sent\n%s", code, srv.Count(), stderr.String())
	}
}

// results.json and --save-raw-dir against the fields SGLang-Omni's
// summarize scripts read: the first seed runbook's field list
// (results[0].evaluated, total, skipped and the .mean of corpus_wer,
// throughput_samples_per_s, latency_mean_s, latency_p95_s, rtf_mean) and
// the per-sample records of benchmark_asr_seedtts.py's --save-raw-dir.
func TestSaveRawDirAndResultsFields(t *testing.T) {
	rows, textFor := rowsFor(4)
	rows[2].Text = "" // empty after normalization: skipped, not failed
	root := t.TempDir()
	if err := datasettest.WriteSeedParquet(filepath.Join(root, "hub", "data", "test-00000-of-00001.parquet"), rows); err != nil {
		t.Fatal(err)
	}
	// The warmup pass sends requests 1-4; request 6 (utt01 in the first
	// scored repeat, at concurrency 1) gets a 500.
	srv := fakeasr.NewServer(t, fakeasr.Config{TextFor: textFor, Fail: fakeasr.FailOn(map[int]fakeasr.Failure{6: fakeasr.Status(500)})})
	out, raw := filepath.Join(root, "b"), filepath.Join(root, "raw")
	var stdout, stderr bytes.Buffer
	code := runTest([]string{"capture", "--target", srv.URL, "--dataset", filepath.Join(root, "hub"), "--concurrency", "1",
		"--repeats", "2", "--warmup", "--save-raw-dir", raw, "--out", out, "--quiet", "--verbose", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none"}, &stdout, &stderr)
	if !strings.Contains(stdout.String()+stderr.String(), "evaluated 2 of 4, 2 skipped: 1 failed (http_5xx 1), 1 empty normalized reference") {
		t.Errorf("exit %d: an incomplete capture, saying why\n%s%s", code, stdout.String(), stderr.String())
	}
	var res map[string]any
	readJSONInto(t, filepath.Join(out, bundle.ResultsFile), &res)
	r0 := res["results"].([]any)[0].(map[string]any)
	for _, k := range []string{"evaluated", "total", "skipped"} {
		if _, ok := r0[k].(float64); !ok {
			t.Errorf("results[0].%s = %v, want a count", k, r0[k])
		}
	}
	for _, k := range []string{"corpus_wer", "throughput_samples_per_s", "latency_mean_s", "latency_p95_s", "rtf_mean"} {
		if st, ok := r0[k].(map[string]any); !ok || st["mean"] == nil {
			t.Errorf("results[0].%s.mean missing: %v", k, r0[k])
		}
	}
	total, evaluated, skipped := r0["total"].(float64), r0["evaluated"].(float64), r0["skipped"].(float64)
	if total != 8 || skipped != total-evaluated || evaluated != 5 || r0["failed"] != 1.0 {
		t.Errorf("level: total %v evaluated %v skipped %v failed %v, want 8, 5, 3, 1 (skipped = total − evaluated)", total, evaluated, skipped, r0["failed"])
	}
	for _, pr := range r0["per_repeat"].([]any) {
		cov := pr.(map[string]any)["coverage"].(map[string]any)
		if cov["skipped"].(float64) != cov["total"].(float64)-cov["evaluated"].(float64) {
			t.Errorf("repeat coverage %v: skipped is not total − evaluated", cov)
		}
	}

	fields := []string{"id", "is_success", "wer", "ref_text", "hyp_text", "ref_norm", "hyp_norm",
		"audio_duration_s", "latency_s", "text_ttft_s", "inter_chunk_s", "error"}
	entries, err := os.ReadDir(raw)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"conc1_rep1.jsonl", "conc1_rep2.jsonl"}) {
		t.Fatalf("--save-raw-dir holds %v, want conc1_rep1.jsonl, conc1_rep2.jsonl (no warmup)", names)
	}
	for _, name := range names {
		b, _ := os.ReadFile(filepath.Join(raw, name))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != len(rows) {
			t.Fatalf("%s: %d records, want %d", name, len(lines), len(rows))
		}
		for i, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s:%d: %v", name, i+1, err)
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range rec {
					if !yield(k) {
						return
					}
				}
			})
			if !slices.Equal(keys, slices.Sorted(slices.Values(fields))) {
				t.Errorf("%s:%d: fields %v, want %v", name, i+1, keys, fields)
			}
			if rec["id"] != rows[i].ID || rec["ref_text"] != rows[i].Text {
				t.Errorf("%s:%d: id %v ref_text %v, want dataset order", name, i+1, rec["id"], rec["ref_text"])
			}
			switch {
			case i == 2: // empty reference
				if rec["is_success"] != false || rec["wer"] != nil || rec["error"] != "Empty reference after normalization" || rec["hyp_text"] == "" {
					t.Errorf("%s:%d: empty reference record %v", name, i+1, rec)
				}
			case i == 1 && name == "conc1_rep1.jsonl": // the 500
				if rec["is_success"] != false || rec["wer"] != nil || !strings.Contains(rec["error"].(string), "500") || rec["hyp_text"] != "" || rec["latency_s"] != 0.0 {
					t.Errorf("%s:%d: failed record %v", name, i+1, rec)
				}
			default:
				if rec["is_success"] != true || rec["wer"] != 0.0 || rec["hyp_norm"] != rec["ref_norm"] || rec["hyp_norm"] == "" || rec["error"] != "" ||
					rec["latency_s"].(float64) <= 0 || rec["audio_duration_s"].(float64) <= 0 {
					t.Errorf("%s:%d: successful record %v", name, i+1, rec)
				}
			}
		}
	}
}
