package score

// The Python character classes of pyunicode.go, for the scorers built on
// this package (bench/score/diarize), so that each rule has one home.

// PySpace reports whether Python's str.isspace (and re's \s) accepts r.
func PySpace(r rune) bool { return isPySpace(r) }

// PyDigitValue is the value of a decimal digit (category Nd), as Python's
// int() and float() read it.
func PyDigitValue(r rune) int { return digitValue(r) }

// PyLower lower-cases s like Python's str.lower.
func PyLower(s string) string { return pyLower(s) }

// PyStrip trims Python whitespace from both ends, like str.strip().
func PyStrip(s string) string { return pyStrip(s) }
