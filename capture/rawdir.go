package capture

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/score"
	"github.com/asrprof/asrprof/model"
)

// RawRecord is one line of a --save-raw-dir file: one sample of one scored
// pass under the field names of SGLang-Omni's ASR benchmark (the
// per_sample records its --save-raw-dir writes), with its meaning of each:
// a sample that failed, or whose reference is empty after normalization,
// has is_success false and wer null; a failed one keeps only its id,
// ref_text, error, text_ttft_s and inter_chunk_s (hyp_text, the
// normalized texts, audio_duration_s and latency_s are empty or 0, as
// theirs writes them). requests.jsonl keeps everything.
type RawRecord struct {
	ID             string    `json:"id"`
	IsSuccess      bool      `json:"is_success"`
	WER            *float64  `json:"wer"`
	RefText        string    `json:"ref_text"`
	HypText        string    `json:"hyp_text"`
	RefNorm        string    `json:"ref_norm"`
	HypNorm        string    `json:"hyp_norm"`
	AudioDurationS float64   `json:"audio_duration_s"`
	LatencyS       float64   `json:"latency_s"`
	TextTTFTS      *float64  `json:"text_ttft_s"`
	InterChunkS    []float64 `json:"inter_chunk_s"`
	Error          string    `json:"error"`
}

// emptyRefError is the error SGLang-Omni's benchmark gives a sample whose
// reference normalizes to nothing.
const emptyRefError = "Empty reference after normalization"

// RawRecords turns the records of one pass into raw records, one per item in
// dataset order (a sample the pass has no record of is "No transcription",
// as theirs says).
func RawRecords(items []driver.Item, recs []model.Request) []RawRecord {
	bySample := make(map[string]*model.Request, len(recs))
	for i := range recs {
		bySample[recs[i].SampleID] = &recs[i]
	}
	out := make([]RawRecord, 0, len(items))
	for _, it := range items {
		raw := RawRecord{ID: it.SampleID, RefText: it.Ref, InterChunkS: []float64{}}
		r := bySample[it.SampleID]
		switch {
		case r == nil:
			raw.Error = "No transcription"
		case r.Status != model.StatusOK:
			raw.Error = cmp.Or(r.Error, "No transcription")
		default:
			lang := cmp.Or(r.Lang, it.Lang)
			raw.HypText = r.Hyp
			raw.RefNorm = score.Normalize(lang, r.Ref)
			raw.HypNorm = score.Normalize(lang, r.Hyp)
			raw.AudioDurationS = r.AudioDurationS
			raw.LatencyS = r.LatencyS
			if r.Scored && r.Errors != nil {
				raw.IsSuccess = true
				if e := r.Errors; e.RefWords > 0 {
					w := float64(e.Sub+e.Del+e.Ins) / float64(e.RefWords)
					raw.WER = &w
				}
			} else {
				raw.Error = emptyRefError
			}
		}
		if r != nil {
			if r.FirstTokenUnixNs != 0 {
				ttft := r.TTFTS
				raw.TextTTFTS = &ttft
			}
			if len(r.ChunkGapsS) > 0 {
				raw.InterChunkS = r.ChunkGapsS
			}
		}
		out = append(out, raw)
	}
	return out
}

// RawFileName is the file of one scored pass in --save-raw-dir: their
// conc{N}_rep{R}.jsonl for a closed-loop level, rate{R}_rep{R}.jsonl for an
// open-loop one.
func RawFileName(lv SweepPoint, repeat int) string {
	if lv.Rate > 0 {
		return fmt.Sprintf("rate%s_rep%d.jsonl", strconv.FormatFloat(lv.Rate, 'g', -1, 64), repeat)
	}
	return fmt.Sprintf("conc%d_rep%d.jsonl", lv.Concurrency, repeat)
}

// prepareRawDir makes the --save-raw-dir directory before anything is sent
// ("" is none), so a path that cannot be written stops the capture at its
// start rather than after its first pass.
func prepareRawDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: --save-raw-dir: %v", ErrInvalidConfig, err)
	}
	return nil
}

// writeRaw writes one pass's raw records into dir.
func writeRaw(dir string, lv SweepPoint, repeat int, items []driver.Item, recs []model.Request) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--save-raw-dir: %w", err)
	}
	path := filepath.Join(dir, RawFileName(lv, repeat))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--save-raw-dir: %w", err)
	}
	defer f.Close() // on an error; after the Close below, nothing
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, raw := range RawRecords(items, recs) {
		if err := enc.Encode(raw); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
