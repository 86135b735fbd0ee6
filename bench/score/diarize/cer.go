package diarize

// charStats are the character counts of one comparison.
type charStats struct {
	cer       *float64
	refChars  int
	predChars int
	errors    int
}

// levenshtein is the edit distance between two strings, in code points.
func levenshtein(a, b []rune) int {
	if len(a) < len(b) {
		a, b = b, a
	}
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cur := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return row[len(b)]
}

// compare counts the errors of pred against ref (both cleaned). An empty
// reference counts every predicted character as an error; its CER is 0
// when there are none and undefined otherwise.
func compare(ref, pred string) charStats {
	r, p := []rune(ref), []rune(pred)
	if len(r) == 0 {
		st := charStats{predChars: len(p), errors: len(p)}
		if len(p) == 0 {
			st.cer = new(0.0)
		}
		return st
	}
	e := levenshtein(r, p)
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
		n := 0
		for _, s := range SplitBySpeaker(pred, true) {
			n += len([]rune(s.text))
		}
		return cpStats{charStats: charStats{predChars: n}, reason: reason}
	}
	if !HasSpeakerTags(ref) {
		return invalid(ReasonNoRefSpeakerTags)
	}
	var refs, preds []string
	for _, s := range SplitBySpeaker(ref, false) {
		refs = append(refs, s.text)
	}
	for _, s := range SplitBySpeaker(pred, true) {
		preds = append(preds, s.text)
	}
	n := max(len(refs), len(preds))
	refs = append(refs, make([]string, n-len(refs))...)
	preds = append(preds, make([]string, n-len(preds))...)
	refLen := 0
	for _, r := range refs {
		refLen += len(r)
	}
	if n == 0 || refLen == 0 {
		return invalid(ReasonEmptyRef)
	}
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
