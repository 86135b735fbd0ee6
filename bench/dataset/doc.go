// Package dataset loads the list of utterances a benchmark sends to a
// speech-to-text server, checks their audio before any request is made, and
// fingerprints them so results can name exactly what they measured.
//
// The pipeline is Load, then Preflight, then Fingerprint:
//
//   - [Load] reads a manifest in one of three layouts (a JSONL file, a
//     Kaldi data directory, or a folder of audio files with .txt
//     transcripts) and fails only on a malformed manifest. It does not open
//     any audio file.
//   - [Preflight] probes every audio file with bounded parallelism and splits
//     the samples into good ones (with [Sample.Info] filled) and [BadEntry]
//     records that say why the rest cannot be used.
//   - [Fingerprint] hashes ids, transcripts and audio bytes into one
//     SHA-256 that changes when any of them does.
//
// docs/DATASETS.md describes the layouts for users.
package dataset
