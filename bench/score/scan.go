package score

import (
	"strings"
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
		if isPyDigit(r) && i+n < len(s) && s[i+n] == ',' {
			r2, n2 := utf8.DecodeRuneInString(s[i+n+1:])
			if isPyDigit(r2) {
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
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if strings.ContainsRune(".$¢€£", r) && i+n < len(s) && (s[i+n] < '0' || s[i+n] > '9') {
			_, n2 := utf8.DecodeRuneInString(s[i+n:])
			b.WriteByte(' ')
			b.WriteString(s[i+n : i+n+n2])
			i += n + n2
			continue
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}

// replaceLonePercents turns a '%' after a non-ASCII-digit into a space:
// re.sub(r"([^0-9])%", r"\1 ", s).
func replaceLonePercents(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r < '0' || r > '9') && i+n < len(s) && s[i+n] == '%' {
			b.WriteString(s[i : i+n])
			b.WriteByte(' ')
			i += n + 1
			continue
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}

// spaceLetterDigit puts a space between an ASCII lower-case letter and a
// digit next to it, in two passes as the reference does:
// re.sub(r"([a-z])([0-9])", r"\1 \2", s), then the same for ([0-9])([a-z]).
func spaceLetterDigit(s string) string {
	isLetter := func(c byte) bool { return 'a' <= c && c <= 'z' }
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	s = spacePairs(s, isLetter, isDigit)
	return spacePairs(s, isDigit, isLetter)
}

func spacePairs(s string, first, second func(byte) bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if first(s[i]) && i+1 < len(s) && second(s[i+1]) {
			if b.Len() == 0 {
				b.Grow(len(s) + 8)
			}
			b.WriteString(s[:i+1])
			b.WriteByte(' ')
			s = s[i+1:]
			i = 0 // s[0] is the second character, already matched
		}
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}
