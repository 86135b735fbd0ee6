// Package diarize scores speaker-attributed transcripts in
// MOSS-Transcribe-Diarize's markup, [start][Sxx]text[end], the way
// SGLang-Omni's transcribe-diarize benchmark does: CER without speakers,
// cpCER (concatenated minimum-permutation CER, the speakers paired by the
// Hungarian method on edit distance) and speaker-timestamp DER (collar 0,
// overlapped speech scored, speakers mapped one-to-one to maximize their
// overlap), each with its valid-sample rules and a micro average over a
// corpus. docs/SCORING.md ("Diarization") states every rule.
//
// Everything here is a pure function of strings, safe for concurrent use.
package diarize
