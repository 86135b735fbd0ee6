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
	return rewrite(s, ".", func(i int) (int, string, bool) {
		// The following character is consumed by the match and kept: only
		// a period there would start a match of its own.
		if strings.HasPrefix(s[i+1:], ".") {
			return i + 2, " .", true
		}
		return i + 1, " ", i+1 == len(s) || !isASCIIDigit(rune(s[i+1]))
	})
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

// rewrite replaces, left to right and without overlap, what at finds in s:
// every match starts with lead, and at(i) says whether one starts at byte
// offset i, where it ends and what replaces it. The scan goes on after a
// match, else at the next lead after i.
func rewrite(s, lead string, at func(i int) (end int, repl string, ok bool)) string {
	var b strings.Builder
	last := 0 // s[:last] has been written
	for i := 0; ; {
		k := strings.Index(s[i:], lead)
		if k < 0 {
			break
		}
		i += k
		if end, repl, ok := at(i); ok {
			b.WriteString(s[last:i])
			b.WriteString(repl)
			last, i = end, end
			continue
		}
		i++
	}
	return finish(&b, s, last)
}

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
