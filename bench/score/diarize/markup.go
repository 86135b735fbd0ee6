package diarize

import (
	"cmp"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/asrprof/asrprof/bench/score"
	"golang.org/x/text/cases"
)

// Go's RE2 \d and \s are ASCII-only; Python's re (which the reference
// uses on str) takes every Unicode decimal digit and space. The patterns
// below say \p{Nd} where the reference says \d.
var (
	timestampRe = regexp.MustCompile(`\[\p{Nd}+(?:\.\p{Nd}+)?\]`)
	// speakerTagRe is SPEAKER_TAG_RE: [S0*N], any case, N captured.
	speakerTagRe = regexp.MustCompile(`(?i)\[S0*(\p{Nd}+)\]`)
	// canonTagRe finds the tags left after canonicalization.
	canonTagRe  = regexp.MustCompile(`(?i)\[S\p{Nd}+\]`)
	lenticRe    = regexp.MustCompile(`【[^】]*】`)
	angleRe     = regexp.MustCompile(`<[^>]*>`)
	ampersandRe = regexp.MustCompile(`&[^&]{0,40}&`)
	// tagAheadRe is the negative lookahead (?!S\d+\]) of BRACKET_EVENT_RE.
	tagAheadRe  = regexp.MustCompile(`^(?i)S\p{Nd}+\]`)
	bracketRe   = regexp.MustCompile(`\[([^\]]+)\]`)
	timeTokenRe = regexp.MustCompile(`^\p{Nd}+(?:\.\p{Nd}+)?$`)
	spkTokenRe  = regexp.MustCompile(`^(?i)S0*(\p{Nd}+)$`)
	// The exact-match normalizer's patterns (normalize_transcribe_diarize_text).
	specialTokRe = regexp.MustCompile(`<\|(?:im_start|im_end|endoftext)\|>`)
	loosTagRe    = regexp.MustCompile(`(?i)\[` + pySpace + `*s0*(\p{Nd}+)` + pySpace + `*\]`)
	spacePunctRe = regexp.MustCompile(pySpace + `+([,.;!?])`)
	spaceRunRe   = regexp.MustCompile(pySpace + `+`)
	fold         = cases.Fold()
)

// pySpace is Python's \s on str (str.isspace): the ASCII controls
// \t..\r and U+001C..U+001F, and the Unicode spaces.
const pySpace = `[\t-\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

// asciiInt is str(int(digits)) for a run of Unicode decimal digits.
func asciiInt(digits string) string { return cmp.Or(strings.TrimLeft(asciiNumber(digits), "0"), "0") }

// asciiNumber turns the Unicode digits of a time token into ASCII ones.
func asciiNumber(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '.' {
			b.WriteByte('.')
		} else {
			b.WriteByte(byte('0' + score.PyDigitValue(r)))
		}
	}
	return b.String()
}

// canonicalize writes every speaker tag as [S<N>]: [S01], [s1] and
// [S001] all become [S1].
func canonicalize(text string) string {
	return speakerTagRe.ReplaceAllStringFunc(text, func(m string) string {
		return "[S" + asciiInt(speakerTagRe.FindStringSubmatch(m)[1]) + "]"
	})
}

// HasSpeakerTags reports whether text holds a speaker tag ([S01], any case).
func HasSpeakerTags(text string) bool { return speakerTagRe.MatchString(text) }

// removeEvents drops every [..] that is not a speaker tag (BRACKET_EVENT_RE:
// \[(?!S\d+\])[^]]+\], replaced by a space).
func removeEvents(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] == '[' && !tagAheadRe.MatchString(s[i+1:]) {
			if j := strings.IndexByte(s[i+1:], ']'); j > 0 {
				b.WriteByte(' ')
				i += j + 2
				continue
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// preclean is the reference's _preclean: times become spaces, speaker tags
// are canonical, and events (【..】, <..>, &..& up to 40 characters, any
// other [..]) become spaces.
func preclean(text string) string {
	s := timestampRe.ReplaceAllString(text, " ")
	s = canonicalize(s)
	s = lenticRe.ReplaceAllString(s, " ")
	s = angleRe.ReplaceAllString(s, " ")
	s = ampersandRe.ReplaceAllString(s, " ")
	return removeEvents(s)
}

// strip drops whitespace and punctuation (Unicode categories P*) and
// lower-cases what is left, as Python's str.lower does.
func strip(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if score.PySpace(r) || unicode.IsPunct(r) {
			continue
		}
		b.WriteRune(r)
	}
	return score.PyLower(b.String())
}

// CleanNoSpeaker is the text CER compares: the markup, speaker tags and
// events removed, then stripped of spaces and punctuation, lower case.
func CleanNoSpeaker(text string) string {
	return strip(canonTagRe.ReplaceAllString(preclean(text), " "))
}

// SplitBySpeaker gives each speaker the cleaned text after each of its tags:
// the speakers' texts, in order of their first appearance. Text before the
// first tag is dropped, and so is a speaker with no text. Without any tag
// the whole text is one speaker's, [S1], when implicit is true, and nobody's
// otherwise.
func SplitBySpeaker(text string, implicit bool) []string {
	cleaned := preclean(text)
	locs := canonTagRe.FindAllStringIndex(cleaned, -1)
	if len(locs) == 0 {
		flat := strip(cleaned)
		if !implicit || flat == "" {
			return nil
		}
		return []string{flat}
	}
	var out []string
	at := map[string]int{}
	for i, loc := range locs {
		next := len(cleaned)
		if i+1 < len(locs) {
			next = locs[i+1][0]
		}
		content := strip(cleaned[loc[1]:next])
		if content == "" {
			continue
		}
		spk := cleaned[loc[0]:loc[1]]
		if k, ok := at[spk]; ok {
			out[k] += content
		} else {
			at[spk] = len(out)
			out = append(out, content)
		}
	}
	return out
}

// Segment is one speaker turn of the markup, in seconds.
type Segment struct {
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Speaker string  `json:"speaker"` // canonical: [S1]
}

// Segments parses the timed speaker turns of a markup the way the
// reference does: the bracket tokens in order, a time (digits with an
// optional fraction, trimmed) opens a segment and the next time closes it
// and is consumed; the speaker is the last tag between them, else the
// previous segment's; a segment is kept when it has a speaker and its end
// is after its start. Text outside brackets is ignored.
func Segments(text string) []Segment {
	type token struct {
		time    float64
		speaker string // "" for a time
	}
	var toks []token
	for _, m := range bracketRe.FindAllStringSubmatch(text, -1) {
		raw := score.PyStrip(m[1])
		if timeTokenRe.MatchString(raw) {
			// Python's float() gives inf past the range; so does this
			// (ParseFloat's ErrRange comes with ±Inf, kept as is).
			v, _ := strconv.ParseFloat(asciiNumber(raw), 64)
			toks = append(toks, token{time: v})
			continue
		}
		if sm := spkTokenRe.FindStringSubmatch(raw); sm != nil {
			toks = append(toks, token{speaker: "[S" + asciiInt(sm[1]) + "]"})
		}
	}
	var segs []Segment
	last := ""
	for i := 0; i < len(toks); {
		if toks[i].speaker != "" {
			i++
			continue
		}
		start := toks[i].time
		j := i + 1
		spk := ""
		for j < len(toks) && toks[j].speaker != "" {
			spk = toks[j].speaker
			j++
		}
		if j >= len(toks) {
			break
		}
		end := toks[j].time
		if spk = cmp.Or(spk, last); spk != "" && end > start {
			segs = append(segs, Segment{start, end, spk})
			last = spk
		}
		i = j + 1
	}
	return segs
}

// NormalizeExact is the reference's normalize_transcribe_diarize_text, the
// form in which an exact match is judged (expected_normalized,
// result_normalized): special tokens and times become spaces, speaker tags
// become [S01] followed by a space, no space before , . ; ! ?, whitespace
// runs become one space, stripped and case-folded.
func NormalizeExact(text string) string {
	s := specialTokRe.ReplaceAllString(text, " ")
	s = timestampRe.ReplaceAllString(s, " ")
	s = loosTagRe.ReplaceAllStringFunc(s, func(m string) string {
		n := asciiInt(loosTagRe.FindStringSubmatch(m)[1])
		if len(n) < 2 {
			n = "0" + n
		}
		return "[S" + n + "]"
	})
	// (\[S\d+\])(?=\S) -> "\1 ": a space after a tag that is followed by
	// anything but a space.
	var b strings.Builder
	last := 0
	for _, loc := range canonTagRe.FindAllStringIndex(s, -1) {
		if !strings.HasPrefix(s[loc[0]:], "[S") {
			continue // the lookahead pattern is case-sensitive here
		}
		b.WriteString(s[last:loc[1]])
		last = loc[1]
		if r, n := utf8.DecodeRuneInString(s[loc[1]:]); n > 0 && !score.PySpace(r) {
			b.WriteByte(' ')
		}
	}
	b.WriteString(s[last:])
	s = spacePunctRe.ReplaceAllString(b.String(), "$1")
	s = score.PyStrip(spaceRunRe.ReplaceAllString(s, " "))
	return fold.String(s)
}
