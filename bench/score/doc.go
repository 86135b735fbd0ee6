// Package score turns a reference transcript and a server's hypothesis into
// word error counts, the way SGLang-Omni's ASR benchmark does, so that the
// numbers asrprof prints can be compared with that benchmark's directly.
//
// The pipeline for one sample is:
//
//	Normalize(lang, ref) and Normalize(lang, hyp)
//	  -> Words (jiwer's whitespace split)
//	  -> Align (Levenshtein, unit costs) -> Counts{Sub, Del, Ins, Hits}
//
// and model/summary sums Counts over a pass's scored samples to give its
// micro-averaged corpus WER.
//
// English text goes through a re-implementation of openai-whisper's
// EnglishTextNormalizer (release 20250625); Chinese text goes through
// SGLang-Omni's character path (punctuation removed, one "word" per
// character), which makes the WER a character error rate.
//
// All functions are pure and safe for concurrent use. The package holds only
// read-only tables, built once.
package score
