package score

import "strings"

// NormalizeChinese normalizes s the way SGLang-Omni does for Chinese: it
// removes zhon's Chinese punctuation and ASCII punctuation other than the
// apostrophe, removes spaces (ASCII and U+3000), strips, and puts one space
// between every remaining character, so that WER becomes a character error
// rate. There is no case folding and no Unicode normalization.
func NormalizeChinese(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\u3000' || isChinesePunct(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	// Split with no separator gives each character (s is valid UTF-8).
	return strings.Join(strings.Split(PyStrip(s), ""), " ")
}

// zhonPunctuation is zhon 2.1.1's hanzi.punctuation (82 characters).
const zhonPunctuation = "" +
	// fullwidth ASCII variants
	"＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠" +
	// halfwidth CJK punctuation
	"｢｣､" +
	// CJK symbols and punctuation: ideographic space, comma, ditto mark
	"\u3000、〃" +
	// CJK angle and corner brackets
	"〈〉《》「」『』【】" +
	// CJK brackets and symbols
	"〔〕〖〗〘〙〚〛〜〝〞〟" +
	"〰〾〿" +
	// dashes, quotation marks, ellipsis, hyphenation point
	"–—‘’‛“”„‟…‧" +
	// overscore, small form variants, middle dot
	"﹏﹑﹔·" +
	// stops
	"．！？｡。"

// isChinesePunct reports whether the Chinese path deletes r: zhon's
// punctuation or one of the 32 ASCII punctuation marks except the apostrophe.
func isChinesePunct(r rune) bool {
	if r < 0x80 {
		return r != '\'' && strings.ContainsRune(asciiPunctuation, r)
	}
	return strings.ContainsRune(zhonPunctuation, r)
}

// asciiPunctuation is Python's string.punctuation.
const asciiPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
