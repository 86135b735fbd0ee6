package columns

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// decimalInt agrees with strconv.ParseInt wherever it answers, and
// answers for every plain decimal that fits an int64.
func TestDecimalIntAsParseInt(t *testing.T) {
	cases := []string{"0", "-0", "7", "-7", "0123", "1764480000050839588", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "99999999999999999999",
		"18446744073709551616", "", "-", "+5", "1e9", "12.0", "1_0", " 1", "１"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		cases = append(cases, strconv.FormatInt(int64(r.Uint64()), 10), strconv.FormatUint(r.Uint64(), 10),
			strconv.FormatInt(r.Int64N(1e6)-5e5, 10))
	}
	for _, c := range cases {
		got, ok := decimalInt([]byte(c))
		want, err := strconv.ParseInt(c, 10, 64)
		if ok && (err != nil || got != want) {
			t.Errorf("decimalInt(%q) = %d, ParseInt gives %d, %v", c, got, want, err)
		}
		plain := len(c) > 0 && c[0] != '+'
		if !ok && err == nil && plain {
			t.Errorf("decimalInt(%q) declined a plain decimal that ParseInt reads (%d)", c, want)
		}
	}
}
