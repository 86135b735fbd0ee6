package diarize

import (
	"strings"
	"unicode/utf8"

	"github.com/asrprof/asrprof/bench/score"
)

// charStats are the character counts of one comparison.
type charStats struct {
	cer       *float64
	refChars  int
	predChars int
	errors    int
}

// compare counts the errors of pred against ref (both cleaned). An empty
// reference counts every predicted character as an error; its CER is 0
// when there are none and undefined otherwise. The errors are the edit
// distance in code points (score.Align's over the characters: the cleaned
// texts are valid UTF-8, which strings.Split cuts into code points).
func compare(ref, pred string) charStats {
	r, p := strings.Split(ref, ""), strings.Split(pred, "")
	if len(r) == 0 {
		st := charStats{predChars: len(p), errors: len(p)}
		if len(p) == 0 {
			st.cer = new(0.0)
		}
		return st
	}
	c := score.Align(r, p)
	e := c.Sub + c.Del + c.Ins
	return charStats{cer: new(float64(e) / float64(len(r))), refChars: len(r), predChars: len(p), errors: e}
}

// sum adds counts up: the corpus (micro) rate is total errors over total
// reference characters, undefined without reference characters.
func sum(items []charStats) charStats {
	var s charStats
	for _, it := range items {
		s.refChars += it.refChars
		s.predChars += it.predChars
		s.errors += it.errors
	}
	if s.refChars > 0 {
		s.cer = new(float64(s.errors) / float64(s.refChars))
	}
	return s
}

// cpStats is a cpCER comparison: valid, or why not.
type cpStats struct {
	charStats
	valid  bool
	reason string
}

// cpInvalid reasons.
const (
	ReasonNoRefSpeakerTags = "no_ref_speaker_tags"
	ReasonEmptyRef         = "empty_ref_after_clean"
)

// cpCER is the concatenated minimum-permutation CER: each speaker's text
// is concatenated, the speakers of both sides padded with empty ones to the
// same number, and the one-to-one pairing of least total edit distance
// (Hungarian) is scored as the sum over its pairs.
func cpCER(ref, pred string) cpStats {
	invalid := func(reason string) cpStats {
		n := utf8.RuneCountInString(strings.Join(SplitBySpeaker(pred, true), ""))
		return cpStats{charStats: charStats{predChars: n}, reason: reason}
	}
	if !HasSpeakerTags(ref) {
		return invalid(ReasonNoRefSpeakerTags)
	}
	refs, preds := SplitBySpeaker(ref, false), SplitBySpeaker(pred, true)
	if len(refs) == 0 { // SplitBySpeaker drops a speaker without text
		return invalid(ReasonEmptyRef)
	}
	n := max(len(refs), len(preds))
	refs = append(refs, make([]string, n-len(refs))...)
	preds = append(preds, make([]string, n-len(preds))...)
	cost := make([][]float64, n)
	stats := make([][]charStats, n)
	for i := range refs {
		cost[i] = make([]float64, n)
		stats[i] = make([]charStats, n)
		for j := range preds {
			stats[i][j] = compare(refs[i], preds[j])
			cost[i][j] = float64(stats[i][j].errors)
		}
	}
	var assigned []charStats
	for i, j := range assign(cost) {
		assigned = append(assigned, stats[i][j])
	}
	s := sum(assigned)
	out := cpStats{charStats: s, valid: s.refChars > 0}
	if !out.valid {
		out.reason = ReasonEmptyRef
	}
	return out
}
