package score

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file holds the character classes the reference implementation gets
// from Python's str methods and its Unicode-aware re module. Go's RE2 classes
// \s, \d and \b are ASCII-only, so the normalizers use these instead; the
// exported ones also serve bench/score/diarize, so that each rule has one home.

// PySpace reports whether Python's str.isspace (and re's \s) accepts r.
// Python also counts the ASCII information separators U+001C..U+001F, which
// Go's unicode.IsSpace does not.
func PySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// isPyWord reports whether r is a word character for Python's \w and \b:
// letters, any kind of number, and the underscore. Combining marks are not.
func isPyWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// PyDigitValue is the value of a decimal digit (category Nd), as Python's
// int() and float() read it.
// Unicode encodes every decimal digit set as a contiguous run from 0 to 9,
// so the value is the distance from the start of the run, modulo ten.
func PyDigitValue(r rune) int {
	if '0' <= r && r <= '9' {
		return int(r - '0')
	}
	n := 0
	for unicode.IsDigit(r - rune(n) - 1) {
		n++
	}
	return n % 10
}

// wordBefore reports whether the rune ending at byte offset i of s is a word
// character. It is false at the start of s.
func wordBefore(s string, i int) bool {
	if i <= 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isPyWord(r)
}

// wordAt reports whether the rune starting at byte offset i of s is a word
// character. It is false at the end of s.
func wordAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isPyWord(r)
}

// PyLower lower-cases s like Python's str.lower: simple case mappings plus
// the one unconditional special mapping (U+0130 to "i" and a combining dot)
// and the Final_Sigma rule for U+03A3.
func PyLower(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= utf8.RuneSelf }) {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i, r := range s {
		switch r {
		case 0x130:
			b.WriteString("i\u0307")
		case 0x3a3:
			if finalSigma(s, i) {
				b.WriteRune(0x3c2)
			} else {
				b.WriteRune(0x3c3)
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma reports whether the capital sigma at byte offset i ends a word:
// a cased letter comes before it (skipping case-ignorable characters) and no
// cased letter comes after it (again skipping case-ignorable characters).
func finalSigma(s string, i int) bool {
	before := false
	for j := i; j > 0; {
		r, n := utf8.DecodeLastRuneInString(s[:j])
		j -= n
		if !isCaseIgnorable(r) {
			before = isCased(r)
			break
		}
	}
	if !before {
		return false
	}
	for j := i + 2; j < len(s); { // U+03A3 is two bytes long.
		r, n := utf8.DecodeRuneInString(s[j:])
		j += n
		if !isCaseIgnorable(r) {
			return !isCased(r)
		}
	}
	return true
}

func isCased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', 0xb7, 0x387, 0x55f, 0x5f4, 0x2018, 0x2019, 0x2024, 0x2027,
		0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// collapseSpace replaces every run of Python whitespace with one ASCII space,
// like re.sub(r"\s+", " ", s). It does not strip.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	inSpace := false
	for _, r := range s {
		if PySpace(r) {
			if !inSpace {
				b.WriteByte(' ')
			}
			inSpace = true
			continue
		}
		inSpace = false
		b.WriteRune(r)
	}
	return b.String()
}

// spaceRun returns the end of the run of Python whitespace that starts at byte
// offset i of s, and the number of runes in it.
func spaceRun(s string, i int) (end, runes int) {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !PySpace(r) {
			break
		}
		i += n
		runes++
	}
	return i, runes
}

// finish returns s when nothing of it was rewritten (last is 0), else what b
// holds followed by s[last:].
func finish(b *strings.Builder, s string, last int) string {
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// pyFields splits s like Python's str.split() with no argument.
func pyFields(s string) []string {
	return strings.FieldsFunc(s, PySpace)
}

// PyStrip trims Python whitespace from both ends, like str.strip().
func PyStrip(s string) string {
	return strings.TrimFunc(s, PySpace)
}
