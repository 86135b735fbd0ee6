package score_test

import (
	"testing"

	"github.com/asrprof/asrprof/bench/score"
)

// TestReferenceIsSample: scoring against a Reference built once gives what
// Sample gives, for English, Chinese and an empty reference.
func TestReferenceIsSample(t *testing.T) {
	for _, tt := range []struct{ lang, ref, hyp string }{
		{"en", "The cat sat on the mat.", "the cat sat on a mat"},
		{"en", "twenty five dollars", "$25"},
		{"en", "hello world", ""},
		{"zh", "今天天气很好", "今天天汽很好啊"},
		{"en", "  ", "anything"},
	} {
		want, wantScored := score.Sample(tt.lang, tt.ref, tt.hyp)
		r := score.NewReference(tt.lang, tt.ref)
		other, _ := score.Sample(tt.lang, tt.ref, tt.hyp+" extra words")
		if got, _ := r.Score(tt.hyp + " extra words"); got != other {
			t.Errorf("%s %q: another hypothesis first: %+v, want %+v", tt.lang, tt.ref, got, other)
		}
		for range 2 { // the reference is not consumed, the last hypothesis is remembered
			got, scored := r.Score(tt.hyp)
			if got != want || scored != wantScored {
				t.Errorf("%s %q vs %q: Reference.Score = %+v %v, Sample = %+v %v", tt.lang, tt.ref, tt.hyp, got, scored, want, wantScored)
			}
		}
	}
}
