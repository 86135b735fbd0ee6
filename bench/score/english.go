package score

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// NormalizeEnglish normalizes s the way openai-whisper's EnglishTextNormalizer
// (release 20250625) does. The steps, in order, are documented in
// docs/SCORING.md. The result has single spaces between words but may start or
// end with a space; Words strips it.
func NormalizeEnglish(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = PyLower(s)
	s = removeBrackets(s)
	s = removeParens(s)
	s = dropWords(s, fillers)
	s = joinApostrophes(s)
	for _, r := range englishReplacers {
		s = r.apply(s)
	}
	s = removeDigitCommas(s)
	s = replacePeriods(s)
	s = removeSymbols(s)
	s = normalizeNumbers(s)
	s = americanize(s)
	s = replaceLoneSymbols(s)
	s = replaceLonePercents(s)
	return collapseSpace(s)
}

// fillers are deleted when they form a whole word.
var fillers = map[string]bool{"hmm": true, "mm": true, "mhm": true, "mmm": true, "uh": true, "um": true}

// dropWords deletes every maximal run of word characters that is in set.
// With Python's Unicode \b, `\b(hmm|mm|...)\b` matches exactly those runs.
func dropWords(s string, set map[string]bool) string {
	var b strings.Builder
	b.Grow(len(s))
	start := -1 // start of the current word run, or -1
	for i, r := range s {
		if isPyWord(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if !set[s[start:i]] {
				b.WriteString(s[start:i])
			}
			start = -1
		}
		b.WriteRune(r)
	}
	if start >= 0 && !set[s[start:]] {
		b.WriteString(s[start:])
	}
	return b.String()
}

// joinApostrophes removes whitespace just before an ASCII apostrophe, like
// re.sub(r"\s+'", "'", s).
func joinApostrophes(s string) string {
	if !strings.Contains(s, "'") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	spaceStart := -1
	for i, r := range s {
		switch {
		case PySpace(r):
			if spaceStart < 0 {
				spaceStart = i
			}
			continue
		case r == '\'':
			// drop the pending whitespace run
		default:
			if spaceStart >= 0 {
				b.WriteString(s[spaceStart:i])
			}
		}
		spaceStart = -1
		b.WriteRune(r)
	}
	if spaceStart >= 0 {
		b.WriteString(s[spaceStart:])
	}
	return b.String()
}

// replacer is one literal rewrite rule with optional Unicode word boundaries
// before and after the literal (Python's \b on each side). Every literal
// starts and ends with an ASCII character, and a boundary is only requested
// next to a word character, so \b reduces to "the neighbour is not a word
// character".
type replacer struct {
	lit, repl   string
	lead, trail bool
}

// apply rewrites every match of r in s, left to right without overlap.
func (r replacer) apply(s string) string {
	if !strings.Contains(s, r.lit) {
		return s
	}
	return rewrite(s, r.lit, func(i int) (int, string, bool) {
		end := i + len(r.lit)
		return end, r.repl, (!r.lead || !wordBefore(s, i)) && (!r.trail || !wordAt(s, end))
	})
}

// englishReplacers are Whisper's contraction and title rules, applied one
// after the other to the whole text, in this order.
var englishReplacers = buildReplacers()

func buildReplacers() []replacer {
	var rs []replacer
	word := func(lit, repl string) { rs = append(rs, replacer{lit, repl, true, true}) }
	tail := func(lit, repl string) { rs = append(rs, replacer{lit, repl, false, true}) }

	// Common contractions and colloquial forms.
	for _, p := range [][2]string{
		{"won't", "will not"}, {"can't", "can not"}, {"let's", "let us"},
		{"ain't", "aint"}, {"y'all", "you all"}, {"wanna", "want to"},
		{"gotta", "got to"}, {"gonna", "going to"}, {"i'ma", "i am going to"},
		{"imma", "i am going to"}, {"woulda", "would have"},
		{"coulda", "could have"}, {"shoulda", "should have"},
		{"ma'am", "madam"},
	} {
		word(p[0], p[1])
	}
	// Abbreviated titles; the expansion carries a trailing space.
	for _, p := range [][2]string{
		{"mr", "mister"}, {"mrs", "missus"}, {"st", "saint"}, {"dr", "doctor"},
		{"prof", "professor"}, {"capt", "captain"}, {"gov", "governor"},
		{"ald", "alderman"}, {"gen", "general"}, {"sen", "senator"},
		{"rep", "representative"}, {"pres", "president"}, {"rev", "reverend"},
		{"hon", "honorable"}, {"asst", "assistant"}, {"assoc", "associate"},
		{"lt", "lieutenant"}, {"col", "colonel"}, {"jr", "junior"},
		{"sr", "senior"}, {"esq", "esquire"},
	} {
		word(p[0], p[1]+" ")
	}
	// Perfect tenses that are unambiguous.
	for _, p := range [][2]string{
		{"'d been", " had been"}, {"'s been", " has been"},
		{"'d gone", " had gone"}, {"'s gone", " has gone"},
		{"'d done", " had done"}, {"'s got", " has got"},
	} {
		tail(p[0], p[1])
	}
	// General contractions (possessive 's included, as in Whisper).
	for _, p := range [][2]string{
		{"n't", " not"}, {"'re", " are"}, {"'s", " is"}, {"'d", " would"},
		{"'ll", " will"}, {"'t", " not"}, {"'ve", " have"}, {"'m", " am"},
	} {
		tail(p[0], p[1])
	}
	return rs
}

// removeSymbols applies NFKD, then keeps the numeric symbols . % $ ¢ € £,
// spells out a few letters that NFKD leaves alone, drops nonspacing marks
// and turns every other mark, symbol or punctuation character into a space.
func removeSymbols(s string) string {
	s = norm.NFKD.String(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case strings.ContainsRune(".%$¢€£", r):
			b.WriteRune(r)
		case extraLetters[r] != "":
			b.WriteString(extraLetters[r])
		case unicode.Is(unicode.Mn, r):
		case unicode.IsMark(r) || unicode.IsSymbol(r) || unicode.IsPunct(r):
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// extraLetters are letters without a canonical decomposition that Whisper
// still spells with plain Latin letters.
var extraLetters = map[rune]string{
	'œ': "oe", 'Œ': "OE", 'ø': "o", 'Ø': "O", 'æ': "ae", 'Æ': "AE",
	'ß': "ss", 'ẞ': "SS", 'đ': "d", 'Đ': "D", 'ð': "d", 'Ð': "D",
	'þ': "th", 'Þ': "th", 'ł': "l", 'Ł': "L",
}
