// Package datasettest writes small datasets in the layouts the field
// stores them (Parquet, Hugging Face Arrow IPC streams, hub snapshots,
// SeedTTS meta.lst) for tests of bench/dataset and of the CLI.
package datasettest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
)

// Row is one sample: its id, reference text and audio file bytes.
type Row struct {
	ID, Text string
	Audio    []byte
}

// HFAudio is the Hugging Face Audio feature as datasets stores it: a
// struct of the file's bytes and its original path.
type HFAudio struct {
	Bytes []byte  `parquet:"bytes,optional"`
	Path  *string `parquet:"path,optional"`
}

// SeedRow is a row of SeedTTS on the Hugging Face hub: ref_audio inline,
// ref_text its transcript, target_text the sentence a TTS model says.
type SeedRow struct {
	SampleID     string   `parquet:"sample_id"`
	RefAudio     *HFAudio `parquet:"ref_audio,optional"`
	RefText      *string  `parquet:"ref_text,optional"`
	RefAudioPath string   `parquet:"ref_audio_path"`
	TargetText   string   `parquet:"target_text"`
}

// Seed is r as a SeedTTS row, its audio named <id>.wav.
func Seed(r Row) SeedRow {
	path, text := r.ID+".wav", r.Text
	return SeedRow{SampleID: r.ID, RefAudio: &HFAudio{Bytes: r.Audio, Path: &path}, RefText: &text,
		RefAudioPath: "prompt-wavs/" + path, TargetText: "not the reference"}
}

// WriteParquet writes rows (any struct with parquet tags) to path, making
// its directory.
func WriteParquet[T any](path string, rows []T) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return parquet.WriteFile(path, rows)
}

// WriteSeedParquet writes rows as a SeedTTS Parquet file.
func WriteSeedParquet(path string, rows []Row) error {
	seed := make([]SeedRow, len(rows))
	for i, r := range rows {
		seed[i] = Seed(r)
	}
	return WriteParquet(path, seed)
}

// ArrowRow is a row of an Arrow table: Audio nil and Path "" is a null
// audio struct; Audio nil with a Path is a struct of a null bytes field.
type ArrowRow struct {
	ID, Text, Path string
	Audio          []byte
}

// WriteArrowStream writes rows as an Arrow IPC stream, the format
// Hugging Face datasets caches: columns id (string), audio (a struct of
// bytes and path) and text (string).
func WriteArrowStream(path string, rows []ArrowRow) error {
	audioType := arrow.StructOf(arrow.Field{Name: "bytes", Type: arrow.BinaryTypes.Binary, Nullable: true},
		arrow.Field{Name: "path", Type: arrow.BinaryTypes.String, Nullable: true})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "audio", Type: audioType, Nullable: true},
		{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ab := b.Field(1).(*array.StructBuilder)
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r.ID)
		if r.Audio == nil && r.Path == "" {
			ab.AppendNull()
		} else {
			ab.Append(true)
			if r.Audio == nil {
				ab.FieldBuilder(0).(*array.BinaryBuilder).AppendNull()
			} else {
				ab.FieldBuilder(0).(*array.BinaryBuilder).Append(r.Audio)
			}
			ab.FieldBuilder(1).(*array.StringBuilder).Append(r.Path)
		}
		b.Field(2).(*array.StringBuilder).Append(r.Text)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := ipc.NewWriter(f, ipc.WithSchema(schema))
	return errors.Join(w.Write(rec), w.Close(), f.Close())
}

// WriteHFCache writes rows as a Hugging Face datasets cache directory of
// one split: dataset_info.json and <builder>-<split>.arrow.
func WriteHFCache(dir, builder, split string, rows []Row) error {
	ar := make([]ArrowRow, len(rows))
	for i, r := range rows {
		ar[i] = ArrowRow{ID: r.ID, Text: r.Text, Path: r.ID + ".wav", Audio: r.Audio}
	}
	if err := WriteArrowStream(filepath.Join(dir, fmt.Sprintf("%s-%s.arrow", builder, split)), ar); err != nil {
		return err
	}
	info := fmt.Sprintf(`{"builder_name": %q, "features": {"id": {"dtype": "string", "_type": "Value"}, "audio": {"_type": "Audio"}, "text": {"dtype": "string", "_type": "Value"}}, "splits": {%q: {"name": %q, "num_examples": %d}}}`,
		builder, split, split, len(rows))
	return os.WriteFile(filepath.Join(dir, "dataset_info.json"), []byte(info), 0o644)
}

// WriteMetaLst writes rows as a SeedTTS meta.lst in dir with the audio in
// dir/prompt-wavs/<id>.wav, and returns the meta.lst's path.
func WriteMetaLst(dir string, rows []Row) (string, error) {
	var m strings.Builder
	for _, r := range rows {
		rel := filepath.Join("prompt-wavs", r.ID+".wav")
		if err := os.MkdirAll(filepath.Join(dir, "prompt-wavs"), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, rel), r.Audio, 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&m, "%s|%s|%s|%s\n", r.ID, r.Text, filepath.ToSlash(rel), "a sentence to synthesize")
	}
	p := filepath.Join(dir, "meta.lst")
	return p, os.WriteFile(p, []byte(m.String()), 0o644)
}
