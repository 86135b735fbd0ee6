package score

import (
	"fmt"
	"iter"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file re-implements Whisper's EnglishNumberNormalizer: spelled-out
// numbers become digits, with ordinals, plurals, currencies, percentages,
// signs, "and a half", "double"/"triple" and decimal points handled the way
// the reference does, quirks included ("second" is always an ordinal, "ninth"
// is not a number word, a standalone "1" is finally written "one").

// numberWords holds the vocabulary of the number normalizer. It is built once
// and only read afterwards.
type numberWords struct {
	zeros       map[string]bool
	ones        map[string]int
	onesSuffix  map[string]suffixed[int]
	tens        map[string]int
	tensSuffix  map[string]suffixed[int]
	mults       map[string]*big.Int
	multsSuffix map[string]suffixed[*big.Int]
	preceding   map[string]string // minus, plus...: a sign before a number
	following   map[string]string // dollars, cents...: a currency after a number
	all         map[string]bool   // every word the normalizer treats specially
}

type suffixed[V any] struct {
	value  V
	suffix string
}

var numWords = buildNumberWords()

func buildNumberWords() *numberWords {
	w := &numberWords{
		zeros:       map[string]bool{"o": true, "oh": true, "zero": true},
		ones:        map[string]int{},
		onesSuffix:  map[string]suffixed[int]{},
		tens:        map[string]int{},
		tensSuffix:  map[string]suffixed[int]{},
		mults:       map[string]*big.Int{},
		multsSuffix: map[string]suffixed[*big.Int]{},
		preceding:   map[string]string{"minus": "-", "negative": "-", "plus": "+", "positive": "+"},
		following: map[string]string{
			"pound": "£", "pounds": "£", "euro": "€", "euros": "€",
			"dollar": "$", "dollars": "$", "cent": "¢", "cents": "¢",
		},
		all: map[string]bool{},
	}
	ones := []string{"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
		"eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"}
	for i, name := range ones {
		v := i + 1
		w.ones[name] = v
		plural := name + "s"
		if name == "six" {
			plural = "sixes"
		}
		w.onesSuffix[plural] = suffixed[int]{v, "s"}
		switch v {
		case 1, 2, 3, 5, 12:
			// irregular ordinals, below
		default:
			ord := name + "th"
			if strings.HasSuffix(name, "t") {
				ord = name + "h"
			}
			w.onesSuffix[ord] = suffixed[int]{v, "th"}
		}
	}
	// "ninth" is deliberately absent: the reference derives "nineth".
	maps.Copy(w.onesSuffix, map[string]suffixed[int]{
		"zeroth": {0, "th"}, "first": {1, "st"}, "second": {2, "nd"},
		"third": {3, "rd"}, "fifth": {5, "th"}, "twelfth": {12, "th"},
	})
	tens := []string{"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"}
	for i, name := range tens {
		v := (i + 2) * 10
		w.tens[name] = v
		stem := strings.TrimSuffix(name, "y")
		w.tensSuffix[stem+"ies"] = suffixed[int]{v, "s"}
		w.tensSuffix[stem+"ieth"] = suffixed[int]{v, "th"}
	}
	mults := []string{"hundred", "thousand", "million", "billion", "trillion", "quadrillion",
		"quintillion", "sextillion", "septillion", "octillion", "nonillion", "decillion"}
	for i, name := range mults {
		exp := 2
		if i > 0 {
			exp = 3 * i
		}
		v := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil)
		w.mults[name] = v
		w.multsSuffix[name+"s"] = suffixed[*big.Int]{v, "s"}
		w.multsSuffix[name+"th"] = suffixed[*big.Int]{v, "th"}
	}
	for _, keys := range []iter.Seq[string]{maps.Keys(w.zeros), maps.Keys(w.ones), maps.Keys(w.onesSuffix),
		maps.Keys(w.tens), maps.Keys(w.tensSuffix), maps.Keys(w.mults), maps.Keys(w.multsSuffix),
		maps.Keys(w.preceding), maps.Keys(w.following), slices.Values([]string{"per", "percent", "and", "double", "triple", "point"})} {
		for k := range keys {
			w.all[k] = true
		}
	}
	return w
}

// isDecimalWord reports whether a word can follow "point" as a digit.
func (w *numberWords) isDecimalWord(s string) bool {
	_, one := w.ones[s]
	_, ten := w.tens[s]
	return one || ten || w.zeros[s]
}

// isArabic reports whether s matches ^\d+(\.\d+)?$ with Unicode digits.
func isArabic(s string) bool {
	digits, dot := 0, false
	for _, r := range s {
		switch {
		case unicode.IsDigit(r):
			digits++
		case r == '.' && !dot && digits > 0:
			dot, digits = true, 0
		default:
			return false
		}
	}
	return digits > 0
}

// decimalParts parses s as Python's Fraction would parse a plain decimal
// string: an optional sign, digits, an optional point and more digits, with
// at least one digit before or just after the point. It returns the value as
// mantissa / 10^scale.
func decimalParts(s string) (mantissa *big.Int, scale int, ok bool) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	mantissa = new(big.Int)
	ten := big.NewInt(10)
	intDigits, dot := 0, false
	for _, r := range s {
		switch {
		case unicode.IsDigit(r):
			mantissa.Mul(mantissa, ten)
			mantissa.Add(mantissa, big.NewInt(int64(PyDigitValue(r))))
			if dot {
				scale++
			} else {
				intDigits++
			}
		case r == '.' && !dot:
			dot = true
		default:
			return nil, 0, false
		}
	}
	if intDigits == 0 && scale == 0 {
		return nil, 0, false
	}
	if neg {
		mantissa.Neg(mantissa)
	}
	return mantissa, scale, true
}

// scaleExact returns s*mult when that product is a whole number.
func scaleExact(s string, mult *big.Int) (*big.Int, bool) {
	m, scale, ok := decimalParts(s)
	if !ok {
		return nil, false
	}
	p := new(big.Int).Mul(m, mult)
	if scale == 0 {
		return p, true
	}
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)
	q, r := new(big.Int).QuoRem(p, den, new(big.Int))
	if r.Sign() != 0 {
		return nil, false
	}
	return q, true
}

// numValue is the number being accumulated: nothing, an integer, or a digit
// string (kept verbatim, e.g. "1999", "2.5", "007").
type numValue struct {
	set   bool
	isStr bool
	str   string
	n     *big.Int
}

func intValue(n *big.Int) numValue { return numValue{set: true, n: n} }
func strValue(s string) numValue   { return numValue{set: true, isStr: true, str: s} }
func smallValue(n int) numValue    { return intValue(big.NewInt(int64(n))) }

// String is Python's str(value).
func (v numValue) String() string {
	if v.isStr {
		return v.str
	}
	return v.n.String()
}

// orEmpty is Python's str(value or ""): empty for nothing, 0 and "".
func (v numValue) orEmpty() string {
	if !v.set || (!v.isStr && v.n.Sign() == 0) {
		return ""
	}
	return v.String()
}

// modIsZero reports whether the integer value is a multiple of m.
func (v numValue) modIsZero(m int64) bool {
	return new(big.Int).Rem(v.n, big.NewInt(m)).Sign() == 0
}

func (v numValue) plus(k int) numValue {
	return intValue(new(big.Int).Add(v.n, big.NewInt(int64(k))))
}

// timesKeepThousands is the reference's rule for an integer followed by a
// multiplier: only the part below 1000 is multiplied.
func (v numValue) timesKeepThousands(m *big.Int) numValue {
	thousand := big.NewInt(1000)
	before, residual := new(big.Int).DivMod(v.n, thousand, new(big.Int))
	before.Mul(before, thousand)
	residual.Mul(residual, m)
	return intValue(before.Add(before, residual))
}

// addOne is the value after the number word for one (1 to 19); prevIsOne and
// prevIsTen say whether the word before was such a word or a tens word.
func (v numValue) addOne(one int, prevIsOne, prevIsTen bool) numValue {
	switch {
	case !v.set:
		return smallValue(one)
	case v.isStr || prevIsOne:
		s := v.String()
		if prevIsTen && one < 10 && strings.HasSuffix(s, "0") {
			s = s[:len(s)-1]
		}
		return strValue(s + strconv.Itoa(one))
	case one < 10 && v.modIsZero(10), one >= 10 && v.modIsZero(100):
		return v.plus(one)
	}
	return strValue(v.String() + strconv.Itoa(one))
}

// addTen is the value after the tens word for ten (20 to 90).
func (v numValue) addTen(ten int) numValue {
	switch {
	case !v.set:
		return smallValue(ten)
	case v.isStr || !v.modIsZero(100):
		return strValue(v.String() + strconv.Itoa(ten))
	}
	return v.plus(ten)
}

// processWords is the core state machine of the number normalizer.
func (w *numberWords) processWords(words []string) []string {
	out := make([]string, 0, len(words))
	var value numValue
	prefix := ""
	emit := func(s string) {
		out = append(out, prefix+s)
		value = numValue{}
		prefix = ""
	}
	// emitValue emits the pending value, if any.
	emitValue := func() {
		if value.set {
			emit(value.String())
		}
	}
	// flush emits the pending value, if any, then s.
	flush := func(s string) {
		emitValue()
		emit(s)
	}
	// times is the value after a multiplier word worth m.
	times := func(m *big.Int) numValue {
		switch {
		case !value.set:
			return intValue(m)
		case value.isStr || value.n.Sign() == 0:
			if p, ok := scaleExact(value.String(), m); ok {
				return intValue(p)
			}
			emitValue()
			return intValue(m)
		}
		return value.timesKeepThousands(m)
	}

	// The words between two "": each has a word before and after it.
	words = slices.Concat([]string{""}, words, []string{""})
	for i := 1; i < len(words)-1; i++ {
		prev, cur, next := words[i-1], words[i], words[i+1]
		nextNumeric := isArabic(next)
		first, size := utf8.DecodeRuneInString(cur)
		hasPrefix := strings.ContainsRune("-+£€$¢", first)
		bare := cur
		if hasPrefix {
			bare = cur[size:]
		}
		_, prevIsOne := w.ones[prev]
		_, prevIsTen := w.tens[prev]

		switch {
		case isArabic(bare):
			if value.isStr && strings.HasSuffix(value.str, ".") {
				// decimals and dotted components are concatenated
				value = strValue(value.str + cur)
				continue
			}
			emitValue()
			if hasPrefix {
				prefix = string(first)
			}
			if n, whole := scaleExact(bare, big.NewInt(1)); whole { // an integer, or a decimal with a whole value
				value = intValue(n)
			} else {
				value = strValue(bare)
			}

		case !w.all[cur]:
			flush(cur)

		case w.zeros[cur]:
			value = strValue(value.orEmpty() + "0")

		case w.ones[cur] > 0:
			value = value.addOne(w.ones[cur], prevIsOne, prevIsTen)

		case w.onesSuffix[cur].suffix != "":
			sx := w.onesSuffix[cur]
			emit(value.addOne(sx.value, prevIsOne, prevIsTen).String() + sx.suffix)

		case w.tens[cur] > 0:
			value = value.addTen(w.tens[cur])

		case w.tensSuffix[cur].suffix != "":
			sx := w.tensSuffix[cur]
			emit(value.addTen(sx.value).String() + sx.suffix)

		case w.mults[cur] != nil:
			value = times(w.mults[cur])

		case w.multsSuffix[cur].value != nil:
			// An integer 0 takes times' scaleExact path, which gives the
			// same 0 as timesKeepThousands would.
			sx := w.multsSuffix[cur]
			emit(times(sx.value).String() + sx.suffix)

		case w.preceding[cur] != "":
			emitValue()
			if w.all[next] || nextNumeric {
				prefix = w.preceding[cur]
			} else {
				emit(cur)
			}

		case w.following[cur] != "":
			if value.set {
				prefix = w.following[cur]
				emitValue()
			} else {
				emit(cur)
			}

		case cur == "per" || cur == "percent":
			switch {
			case !value.set:
				emit(cur)
			case cur == "percent":
				emit(value.String() + "%")
			case next == "cent":
				emit(value.String() + "%")
				i++ // "cent" is part of the match
			default:
				emitValue()
				emit(cur)
			}

		default: // and, double, triple, point
			switch {
			case !w.all[next] && !nextNumeric:
				flush(cur)
			case cur == "and":
				if w.mults[prev] == nil {
					flush(cur)
				}
			case cur == "double" || cur == "triple":
				if _, one := w.ones[next]; one || w.zeros[next] {
					repeats := map[string]int{"double": 2, "triple": 3}[cur]
					digit := strconv.Itoa(w.ones[next])
					value = strValue(value.orEmpty() + strings.Repeat(digit, repeats))
					i++ // the digit word is part of the match
				} else {
					flush(cur)
				}
			case cur == "point":
				if w.isDecimalWord(next) || nextNumeric {
					value = strValue(value.orEmpty() + ".")
				}
			}
		}
	}
	emitValue()
	return out
}

// normalizeNumbers is the number normalizer's __call__: preprocess (halves,
// letters apart from digits, suffixes joined to their digits), the word
// state machine, postprocess.
func normalizeNumbers(s string) string {
	s = joinNumberSuffixes(spaceLetterDigit(numWords.expandHalves(s)))
	s = strings.Join(numWords.processWords(pyFields(s)), " ")
	return postprocessNumbers(s)
}

var (
	// The currency patterns below also need a Unicode \b after them, which
	// replaceBounded checks.
	combineCentsRE = regexp.MustCompile(`([€£$])([0-9]+) (?:and )?¢([0-9]{1,2})`)
	extractCentsRE = regexp.MustCompile(`[€£$]0.([0-9]{1,2})`)
)

// expandHalves turns "<number word> and a half" into "<number word> point
// five", following the reference's split-and-rejoin (which also drops
// whitespace-only pieces and re-joins the rest with single spaces).
func (w *numberWords) expandHalves(s string) string {
	if !strings.Contains(s, "half") {
		return s
	}
	var segs []string
	last := 0
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "and")
		if j < 0 {
			break
		}
		i += j
		if end, ok := matchHalf(s, i); ok {
			segs = append(segs, s[last:i])
			last, i = end, end
			continue
		}
		i++
	}
	if segs == nil {
		return s
	}
	segs = append(segs, s[last:])
	var parts []string
	for k, seg := range segs {
		if PyStrip(seg) == "" {
			continue
		}
		parts = append(parts, seg)
		if k == len(segs)-1 {
			break
		}
		f := pyFields(seg)
		lastWord := f[len(f)-1]
		if w.isDecimalWord(lastWord) || w.mults[lastWord] != nil {
			parts = append(parts, "point five")
		} else {
			parts = append(parts, "and a half")
		}
	}
	return strings.Join(parts, " ")
}

// matchHalf matches \band\s+a\s+half\b at byte offset i of s.
func matchHalf(s string, i int) (end int, ok bool) {
	if wordBefore(s, i) {
		return 0, false
	}
	pos := i
	for k, lit := range []string{"and", "a", "half"} {
		if k > 0 {
			var n int
			if pos, n = spaceRun(s, pos); n == 0 {
				return 0, false
			}
		}
		if !strings.HasPrefix(s[pos:], lit) {
			return 0, false
		}
		pos += len(lit)
	}
	if wordAt(s, pos) {
		return 0, false
	}
	return pos, true
}

// joinNumberSuffixes re-attaches ordinal and plural suffixes to the digit
// before them: re.sub(r"([0-9])\s+(st|nd|rd|th|s)\b", r"\1\2", s).
func joinNumberSuffixes(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			continue
		}
		pos, n := spaceRun(s, i+1)
		if n == 0 {
			continue
		}
		for _, sfx := range []string{"st", "nd", "rd", "th", "s"} {
			if strings.HasPrefix(s[pos:], sfx) && !wordAt(s, pos+len(sfx)) {
				b.WriteString(s[last : i+1])
				b.WriteString(sfx)
				last = pos + len(sfx)
				i = last - 1
				break
			}
		}
	}
	return finish(&b, s, last)
}

func postprocessNumbers(s string) string {
	if !strings.ContainsAny(s, "$€£") {
		return spellOne(s)
	}
	// "$2 and ¢7" -> "$2.07"
	s = replaceBounded(combineCentsRE, s, func(m []string) string {
		cents, _ := strconv.Atoi(m[3])
		return m[1] + m[2] + "." + fmt.Sprintf("%02d", cents)
	})
	// "$0.07" -> "¢7"
	s = replaceBounded(extractCentsRE, s, func(m []string) string {
		cents, _ := strconv.Atoi(m[1])
		return "¢" + strconv.Itoa(cents)
	})
	return spellOne(s)
}

// replaceBounded replaces, left to right without overlap, the matches of re
// that are followed by a Unicode word boundary (the pattern's last character
// is always a digit, so the next character must not be a word character).
func replaceBounded(re *regexp.Regexp, s string, repl func([]string) string) string {
	var b strings.Builder
	last, pos := 0, 0
	for pos <= len(s) {
		loc := re.FindStringSubmatchIndex(s[pos:])
		if loc == nil {
			break
		}
		start, end := pos+loc[0], pos+loc[1]
		if wordAt(s, end) {
			_, size := utf8.DecodeRuneInString(s[start:])
			pos = start + size
			continue
		}
		groups := make([]string, len(loc)/2)
		for g := range groups {
			if loc[2*g] >= 0 {
				groups[g] = s[pos+loc[2*g] : pos+loc[2*g+1]]
			}
		}
		b.WriteString(s[last:start])
		b.WriteString(repl(groups))
		last, pos = end, end
	}
	return finish(&b, s, last)
}

// spellOne writes a standalone "1" or "1s" as "one" or "ones":
// re.sub(r"\b1(s?)\b", r"one\1", s).
func spellOne(s string) string {
	if !strings.Contains(s, "1") {
		return s
	}
	return rewrite(s, "1", func(i int) (int, string, bool) {
		if wordBefore(s, i) {
			return 0, "", false
		}
		if strings.HasPrefix(s[i+1:], "s") && !wordAt(s, i+2) {
			return i + 2, "ones", true
		}
		return i + 1, "one", !wordAt(s, i+1)
	})
}
