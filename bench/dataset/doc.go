// Package dataset loads the list of utterances a benchmark sends to a
// speech-to-text server, checks their audio before any request is made, and
// fingerprints them so results can name exactly what they measured.
//
// The pipeline is LoadWith, then Preflight, then Fingerprint:
//
//   - [LoadWith] reads a manifest in one of the layouts the
//     field uses (a JSONL file, a Kaldi data directory, a folder of audio
//     files with .txt transcripts, a SeedTTS meta.lst, or a table: Parquet
//     files, a Hugging Face datasets directory of Arrow files, a hub
//     snapshot) and fails only on a malformed manifest. It does not probe
//     any audio; a table's inline audio is held in memory ([Inline]).
//   - [Preflight] probes every audio file (inline audio in memory) with bounded parallelism and splits
//     the samples into good ones (with [Sample.Info] filled) and [BadEntry]
//     records that say why the rest cannot be used.
//   - [Fingerprint] hashes ids, transcripts and audio bytes into one
//     SHA-256 that changes when any of them does.
//
// docs/DATASETS.md describes the layouts for users.
package dataset
