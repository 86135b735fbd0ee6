package score

import (
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Normalize returns s normalized for the language tag lang. "zh", "zh-*"
// (and "zh_*"), "cmn" and "yue", in any letter case, take the Chinese
// character path; every other tag, including an empty one, takes the English
// path.
func Normalize(lang, s string) string {
	if l := strings.ToLower(strings.TrimSpace(lang)); l == "zh" || l == "cmn" || l == "yue" || strings.HasPrefix(l, "zh-") || strings.HasPrefix(l, "zh_") {
		return NormalizeChinese(s)
	}
	return NormalizeEnglish(s)
}

// Words splits normalized text into words the way jiwer 4.0.0's default WER
// transform does: every run of two or more whitespace characters becomes one
// space, the text is stripped, and it is split on the ASCII space only. A
// single tab or newline between two words therefore does not split them.
func Words(s string) []string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		j, runes := spaceRun(s, i)
		if runes == 0 {
			_, n := utf8.DecodeRuneInString(s[i:])
			j = i + n
		}
		if runes >= 2 {
			b.WriteByte(' ')
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	var words []string
	for _, w := range strings.Split(PyStrip(b.String()), " ") {
		if w != "" {
			words = append(words, w)
		}
	}
	return words
}

// Counts are the edit operations of one alignment, or their sum over a
// corpus: substitutions, deletions (reference words missing from the
// hypothesis), insertions (extra hypothesis words) and hits.
type Counts struct{ Sub, Del, Ins, Hits int }

// RefWords is the number of reference words, Sub+Del+Hits.
func (c Counts) RefWords() int { return c.Sub + c.Del + c.Hits }

// Align aligns hyp to ref with the Levenshtein distance at unit cost and
// returns the operation counts of one optimal alignment. Among equally cheap
// alignments it prefers, walking back from the end, a deletion, then an
// insertion, then a substitution or hit; so "a b" against "b a" gives one
// hit, one deletion and one insertion, as jiwer reports. The error total, and
// so WER, is the same for every optimal alignment.
//
// It uses O(min(len(ref), len(hyp))) memory.
func Align(ref, hyp []string) Counts {
	var c Counts
	// A common prefix and suffix are hits in every optimal alignment.
	for len(ref) > 0 && len(hyp) > 0 && ref[0] == hyp[0] {
		ref, hyp = ref[1:], hyp[1:]
		c.Hits++
	}
	for len(ref) > 0 && len(hyp) > 0 && ref[len(ref)-1] == hyp[len(hyp)-1] {
		ref, hyp = ref[:len(ref)-1], hyp[:len(hyp)-1]
		c.Hits++
	}
	var mid cell
	switch {
	case len(ref) == 0:
		mid = cell{ins: int32(len(hyp))}
	case len(hyp) == 0:
		mid = cell{del: int32(len(ref))}
	case len(hyp) <= len(ref):
		mid = levenshtein(ref, hyp, true)
	default:
		mid = levenshtein(hyp, ref, false)
	}
	c.Sub += int(mid.sub)
	c.Del += int(mid.del)
	c.Ins += int(mid.ins)
	c.Hits += len(ref) - int(mid.sub) - int(mid.del)
	return c
}

// cell is one entry of the edit-distance table: the operations on the chosen
// path to it. Its cost is sub+del+ins.
type cell struct{ sub, del, ins int32 }

// levenshtein fills the edit-distance table one row of the shorter sequence
// at a time. outer is the reference when outerIsRef, else the hypothesis.
// A step "up" consumes an outer word, a step "left" an inner word; which of
// them is a deletion depends on outerIsRef.
func levenshtein(outerWords, innerWords []string, outerIsRef bool) cell {
	// Compare small integers instead of strings in the inner loop.
	ids := make(map[string]int32, len(innerWords))
	inner := make([]int32, len(innerWords))
	for k, w := range innerWords {
		id, ok := ids[w]
		if !ok {
			id = int32(len(ids))
			ids[w] = id
		}
		inner[k] = id
	}
	// What a step up or left adds to (del, ins).
	var upDel, upIns, leftDel, leftIns int32 = 1, 0, 0, 1
	if !outerIsRef {
		upDel, upIns, leftDel, leftIns = 0, 1, 1, 0
	}
	row := make([]cell, len(inner)+1)
	cost := make([]int32, len(inner)+1)
	for k := 1; k <= len(inner); k++ {
		row[k] = cell{del: row[k-1].del + leftDel, ins: row[k-1].ins + leftIns}
		cost[k] = int32(k)
	}
	for o := 1; o <= len(outerWords); o++ {
		diag, diagCost := row[0], cost[0]
		row[0].del += upDel
		row[0].ins += upIns
		cost[0]++
		w, ok := ids[outerWords[o-1]]
		if !ok {
			w = -1 // matches no inner word
		}
		for k := 1; k <= len(inner); k++ {
			upCost, leftCost := cost[k]+1, cost[k-1]+1
			dCost := diagCost
			if w != inner[k-1] {
				dCost++
			}
			up := row[k]
			// Preference on ties: deletion, then insertion, then diagonal.
			delCost, insCost := leftCost, upCost
			if outerIsRef {
				delCost, insCost = upCost, leftCost
			}
			best := min(delCost, insCost, dCost)
			var c cell
			switch {
			case delCost == best && outerIsRef, delCost != best && insCost == best && !outerIsRef:
				c = cell{up.sub, up.del + upDel, up.ins + upIns}
			case delCost == best, insCost == best:
				left := row[k-1]
				c = cell{left.sub, left.del + leftDel, left.ins + leftIns}
			default:
				c = diag
				if dCost != diagCost {
					c.sub++
				}
			}
			diag, diagCost = up, cost[k]
			row[k], cost[k] = c, best
		}
	}
	return row[len(inner)]
}

// Sample normalizes ref and hyp for lang, splits them into words and aligns
// them. scored is false when the normalized reference has no words; such a
// sample is left out of the corpus WER. An empty hypothesis is scored: every
// reference word is a deletion.
func Sample(lang, ref, hyp string) (c Counts, scored bool) {
	return NewReference(lang, ref).Score(hyp)
}

// Reference is a reference transcript normalized and split into words
// once, to score many hypotheses against it (every request of a sample).
// It keeps the last hypothesis scored and its counts, so a server that
// answers a sample the same way every time is scored once. It is safe for
// concurrent use.
type Reference struct {
	lang  string
	words []string
	last  atomic.Pointer[scoredHyp]
}

type scoredHyp struct {
	hyp string
	c   Counts
}

// NewReference normalizes ref for language lang.
func NewReference(lang, ref string) *Reference {
	return &Reference{lang: lang, words: Words(Normalize(lang, ref))}
}

// Score is Sample(lang, ref, hyp) for the reference's lang and ref.
func (r *Reference) Score(hyp string) (c Counts, scored bool) {
	if len(r.words) == 0 {
		return Counts{}, false
	}
	if l := r.last.Load(); l != nil && l.hyp == hyp {
		return l.c, true
	}
	c = Align(r.words, Words(Normalize(r.lang, hyp)))
	r.last.Store(&scoredHyp{hyp: hyp, c: c})
	return c, true
}
