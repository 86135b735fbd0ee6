package score

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hand-written equivalents of the reference's simple re.sub calls. They scan
// left to right and never overlap matches, as Python's re.sub does, and are
// several times faster than Go's regexp for these patterns.

// removeBrackets deletes each span from '<' or '[' to the first '>' or ']'
// after it: re.sub(r"[<\[][^>\]]*[>\]]", "", s).
func removeBrackets(s string) string {
	i := strings.IndexAny(s, "<[")
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		j := strings.IndexAny(s[i+1:], ">]")
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		s = s[i+1+j+1:]
		i = strings.IndexAny(s, "<[")
	}
	b.WriteString(s)
	return b.String()
}

// removeParens deletes each non-empty "(...)" that holds no ')':
// re.sub(r"\(([^)]+?)\)", "", s).
func removeParens(s string) string {
	if !strings.Contains(s, "(") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, '(')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+1:], ')')
		if j < 0 {
			break
		}
		if j == 0 { // "()" does not match; go on after the '('
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		s = s[i+1+j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// removeDigitCommas deletes commas between two decimal digits (any script):
// re.sub(r"(\d),(\d)", r"\1\2", s).
func removeDigitCommas(s string) string {
	if !strings.Contains(s, ",") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsDigit(r) && i+n < len(s) && s[i+n] == ',' {
			r2, n2 := utf8.DecodeRuneInString(s[i+n+1:])
			if unicode.IsDigit(r2) {
				b.WriteString(s[i : i+n])
				b.WriteString(s[i+n+1 : i+n+1+n2])
				i += n + 1 + n2
				continue
			}
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}

// replacePeriods turns a period followed by a non-ASCII-digit, or ending the
// text, into a space: re.sub(r"\.([^0-9]|$)", r" \1", s).
func replacePeriods(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '.' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(s) {
			b.WriteByte(' ')
			continue
		}
		if next := s[i+1]; next >= '0' && next <= '9' {
			b.WriteByte('.')
			continue
		}
		// The following character is consumed by the match and kept.
		b.WriteByte(' ')
		_, n := utf8.DecodeRuneInString(s[i+1:])
		b.WriteString(s[i+1 : i+1+n])
		i += n
	}
	return b.String()
}

// replaceLoneSymbols turns any of . $ ¢ € £ followed by a non-ASCII-digit into
// a space: re.sub(r"[.$¢€£]([^0-9])", r" \1", s).
func replaceLoneSymbols(s string) string {
	if !strings.ContainsAny(s, ".$¢€£") {
		return s
	}
	return replacePairs(s, func(r1, r2 rune) bool { return strings.ContainsRune(".$¢€£", r1) && !isASCIIDigit(r2) },
		func(_, c string) string { return " " + c })
}

// replaceLonePercents turns a '%' after a non-ASCII-digit into a space:
// re.sub(r"([^0-9])%", r"\1 ", s).
func replaceLonePercents(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return replacePairs(s, func(r1, r2 rune) bool { return !isASCIIDigit(r1) && r2 == '%' },
		func(a, _ string) string { return a + " " })
}

// spaceLetterDigit puts a space between an ASCII lower-case letter and a
// digit next to it, in two passes as the reference does:
// re.sub(r"([a-z])([0-9])", r"\1 \2", s), then the same for ([0-9])([a-z]).
func spaceLetterDigit(s string) string {
	isLetter := func(r rune) bool { return 'a' <= r && r <= 'z' }
	space := func(a, c string) string { return a + " " + c }
	s = replacePairs(s, func(r1, r2 rune) bool { return isLetter(r1) && isASCIIDigit(r2) }, space)
	return replacePairs(s, func(r1, r2 rune) bool { return isASCIIDigit(r1) && isLetter(r2) }, space)
}

func isASCIIDigit(r rune) bool { return '0' <= r && r <= '9' }

// replacePairs rewrites, left to right and without overlap, every two
// adjacent runes a c of s for which match holds as repl(a, c).
func replacePairs(s string, match func(r1, r2 rune) bool, repl func(a, c string) string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r1, n1 := utf8.DecodeRuneInString(s[i:])
		if r2, n2 := utf8.DecodeRuneInString(s[i+n1:]); n2 > 0 && match(r1, r2) {
			b.WriteString(repl(s[i:i+n1], s[i+n1:i+n1+n2]))
			i += n1 + n2
			continue
		}
		b.WriteString(s[i : i+n1])
		i += n1
	}
	return b.String()
}
