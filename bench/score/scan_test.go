package score

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// For these patterns Go's regexp and Python's re agree (no \b, \s or \d), so
// the hand-written scanners are checked against regexp on random text.
func TestScannersMatchRegexp(t *testing.T) {
	tests := []struct {
		name string
		scan func(string) string
		re   string
		repl string
	}{
		{"brackets", removeBrackets, `[<\[][^>\]]*[>\]]`, ""},
		{"parens", removeParens, `\(([^)]+?)\)`, ""},
		{"digit commas", removeDigitCommas, `(\p{Nd}),(\p{Nd})`, "${1}${2}"},
		{"periods", replacePeriods, `\.([^0-9]|$)`, " ${1}"},
		{"lone symbols", replaceLoneSymbols, `[.$¢€£]([^0-9])`, " ${1}"},
		{"lone percents", replaceLonePercents, `([^0-9])%`, "${1} "},
		{"letter digit", spaceLetterDigit, ``, ""},
	}
	letterDigit := regexp.MustCompile(`([a-z])([0-9])`)
	digitLetter := regexp.MustCompile(`([0-9])([a-z])`)
	alphabet := []rune("ab1 2,.%$¢€£<>[]()\n٣é")
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := func(s string) string {
				if tt.re == "" {
					s = letterDigit.ReplaceAllString(s, "${1} ${2}")
					return digitLetter.ReplaceAllString(s, "${1} ${2}")
				}
				return regexp.MustCompile(tt.re).ReplaceAllString(s, tt.repl)
			}
			for range 3000 {
				var b strings.Builder
				for range rng.IntN(12) {
					b.WriteRune(alphabet[rng.IntN(len(alphabet))])
				}
				s := b.String()
				if got, want := tt.scan(s), ref(s); got != want {
					t.Fatalf("%s(%q) = %q, regexp gives %q", tt.name, s, got, want)
				}
			}
		})
	}
}
