package main

import (
	"flag"

	bdataset "github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/capture"
)

// addDatasetFlags registers the flags of table datasets (Parquet, Hugging
// Face, docs/DATASETS.md) on fs, writing into cfg.
func addDatasetFlags(fs *flag.FlagSet, cfg *capture.Config) {
	fs.StringVar(&cfg.Split, "split", cfg.Split, "the split of a Parquet or Hugging Face dataset to send (`NAME`, e.g. test); needed when it has\nseveral, and the error lists them")
	fs.Func("columns", "the columns of a Parquet or Hugging Face dataset, where not the known names\n(id: sample_id, id; audio: ref_audio, audio; text: ref_text, text, transcription, sentence;\nlang: lang, language), as `id=NAME,audio=NAME,text=NAME,lang=NAME` (any of them)", func(v string) error {
		c, err := bdataset.ParseColumns(v)
		if err != nil {
			return err
		}
		cfg.Columns = c
		return nil
	})
}

// addRawDirFlag registers --save-raw-dir, SGLang-Omni's raw per-sample
// output, on fs, writing into cfg.
func addRawDirFlag(fs *flag.FlagSet, cfg *capture.Config) {
	fs.StringVar(&cfg.SaveRawDir, "save-raw-dir", cfg.SaveRawDir, "also write each scored pass's per-sample records into `DIR` as SGLang-Omni's benchmark does:\nconc{N}_rep{R}.jsonl (rate{R}_rep{R}.jsonl for --rate), one JSON object per sample with their field names")
}
