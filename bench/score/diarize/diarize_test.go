package diarize

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// eq compares an optional rate with want; want < 0 means "none" (nil).
func eq(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	switch {
	case want < 0 && got != nil:
		t.Errorf("%s = %v, want none", what, *got)
	case want >= 0 && got == nil:
		t.Errorf("%s = none, want %v", what, want)
	case want >= 0 && !near(*got, want):
		t.Errorf("%s = %v, want %v", what, *got, want)
	}
}

const (
	v67ref = "[0.00][S01]ab[1.00][1.00][S02]cd[2.00]"
)

// The fact sheet's §5 vectors 1–9: CER, cpCER, DER (-1: invalid or skipped).
var vectors = []struct {
	name, ref, hyp   string
	cer, cp, der     float64
	cpReason, derWhy string
}{
	{"1 same", "[0.00][S01]hello[1.00][1.00][S02]world[2.00]", "[0.00][S01]hello[1.00][1.00][S02]world[2.00]", 0, 0, 0, "", ""},
	{"1 swapped", "[0.00][S01]hello[1.00][1.00][S02]world[2.00]", "[0.00][S02]hello[1.00][1.00][S01]world[2.00]", 0, 0, 0, "", ""},
	{"2 merged speakers", "[0.00][S01]abcd[2.00][2.00][S02]efgh[4.00]", "[0.00][S01]abcdefgh[4.00]", 0, 8.0 / 8, 2.0 / 4, "", ""},
	{"3 shifted", "[0.0][S01]hello[3.0]", "[1.0][S01]hello[4.0]", 0, 0, 2.0 / 3, "", ""},
	{"4 overlap missed", "[0.00][S01]aaaa[4.00][2.00][S02]bb[3.00]", "[0.00][S01]aaaa[4.00]", 2.0 / 6, 2.0 / 6, 1.0 / 5, "", ""},
	{"5 punctuation, events, case", "[0.00][S01]你好，世界！[1.50][1.50][S02]Hello World.[3.00]", "[0.00][S01]你好世界[1.50][1.50][S02][笑声]hello word[3.00]", 1.0 / 14, 1.0 / 14, 0, "", ""},
	{"6 untagged hyp", v67ref, "abcd", 0, 4.0 / 4, -1, "", ReasonNoPredSegs},
	{"7 shared boundary", v67ref, "[0.00][S01]ab[1.00][S02]cd[2.00]", 0, 0, 1.0 / 2, "", ""},
	{"8 inherited speaker", v67ref, "[0.00][S01]ab[1.00][1.00]cd[2.00]", 0, 4.0 / 4, 1.0 / 2, "", ""},
	{"9 untagged ref", "hello", "[S01]hello", 0, -1, -1, ReasonNoRefSpeakerTags, ReasonNoRefSegs},
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			r := Compute([]Row{{ID: "x", Ref: v.ref, Pred: v.hyp}})
			s := r.Samples[0]
			eq(t, "cer", s.CERNoSpk, v.cer)
			eq(t, "cp_cer", s.CPCER, v.cp)
			eq(t, "der", s.DER, v.der)
			if *s.CPCERValid != (v.cp >= 0) || *s.CPInvalidReason != v.cpReason {
				t.Errorf("cp valid %v reason %q, want %v %q", *s.CPCERValid, *s.CPInvalidReason, v.cp >= 0, v.cpReason)
			}
			if *s.DERValid != (v.der >= 0) || *s.DERInvalidReason != v.derWhy {
				t.Errorf("der valid %v reason %q, want %v %q", *s.DERValid, *s.DERInvalidReason, v.der >= 0, v.derWhy)
			}
			// One sample: the corpus figures are the sample's.
			eq(t, "corpus cer", r.Metrics.CER, v.cer)
			eq(t, "corpus cp_cer", r.Metrics.CPCER, v.cp)
			eq(t, "corpus der", r.Metrics.DER, v.der)
		})
	}
}

// Vector 10: the corpus of vectors 2, 3 and 6 is a micro average.
func TestCorpusMicro(t *testing.T) {
	rows := []Row{
		{"2", vectors[2].ref, vectors[2].hyp},
		{"3", vectors[3].ref, vectors[3].hyp},
		{"6", vectors[6].ref, vectors[6].hyp},
	}
	r := Compute(rows)
	m := r.Metrics
	eq(t, "cer", m.CER, 0)
	eq(t, "cp_cer", m.CPCER, 12.0/17)
	eq(t, "der", m.DER, 4.0/7) // not the macro mean (0.5+0.667)/2 = 0.583
	if m.DERValidSamples != 2 || m.DERSkipped != 1 || m.DERSkippedNoPredSegs != 1 || m.DERSkippedNoRefSegs != 0 || m.DERSkippedParseError != 0 {
		t.Errorf("der counts: %+v", m)
	}
	if m.CERValidSamples != 3 || m.CPCERValidSamples != 3 || m.Count != 3 {
		t.Errorf("valid counts: cer %d cp %d count %d", m.CERValidSamples, m.CPCERValidSamples, m.Count)
	}
	if !near(m.DERTotalSeconds, 7) || !near(m.DERConfusion, 2) || !near(m.DERFalseAlarm, 1) || !near(m.DERMissedDetection, 1) {
		t.Errorf("der seconds: total %v fa %v miss %v conf %v", m.DERTotalSeconds, m.DERFalseAlarm, m.DERMissedDetection, m.DERConfusion)
	}
	eq(t, "delta_cer", m.DeltaCER, 12.0/17)
	eq(t, "percent cp_cer", r.Percent.CPCER, 1200.0/17)
	eq(t, "percent der", r.Percent.DER, 400.0/7)
	if r.Percent.DERTotalSeconds != m.DERTotalSeconds || r.Percent.PctAbove50 != m.PctAbove50 {
		t.Error("percent changed a figure that is not one of the seven rates")
	}
}

// Vector 11: the over-50% partition (U).
func TestAbove50(t *testing.T) {
	long := "[S01]"
	for range 100 {
		long += "d"
	}
	r := Compute([]Row{{"a", "[S01]hello", "[S01]hello"}, {"b", "[S01]abc", long}})
	m := r.Metrics
	eq(t, "cer", m.CER, 100.0/8)
	eq(t, "below_50", m.CERBelow50Corpus, 0)
	if m.NAbove50 != 1 || !near(m.PctAbove50, 50) {
		t.Errorf("n_above_50 %d pct %v, want 1 50", m.NAbove50, m.PctAbove50)
	}
}

func TestEmpty(t *testing.T) {
	m := Compute(nil).Metrics
	if m.CER != nil || m.CPCER != nil || m.DER != nil || m.DeltaCER != nil || m.CERBelow50Corpus != nil || m.Count != 0 || m.PctAbove50 != 0 {
		t.Errorf("empty corpus: %+v", m)
	}
	// An empty cleaned reference is not CER-valid; its hypothesis errors
	// leave the CER undefined.
	s := Compute([]Row{{"e", "[0.0][S01][笑声][1.0]", "[0.0][S01]x[1.0]"}}).Samples[0]
	if *s.CERValid || s.CERNoSpk != nil || *s.CPCERValid || *s.CPInvalidReason != ReasonEmptyRef || !*s.DERValid {
		t.Errorf("empty-after-clean sample: %+v", s)
	}
}

func TestClean(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[0.00][S01]Hello, World![1.00]", "helloworld"},
		{"<|im_end|>a【注释】b&laugh&c[noise]d", "abcd"},
		{"[s001]x[S1]y", "xy"},
		{"a[b[S1]c", "ac"},     // [^]]+ runs from the first [ to the first ]
		{"[１.５][S٠١]Ab", "ab"}, // Unicode digits are digits, as in Python's re
		{"ΑΣ ΑΣ", "ασας"},      // lower-cased after the spaces go: one final sigma
	} {
		if got := CleanNoSpeaker(c.in); got != c.want {
			t.Errorf("CleanNoSpeaker(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSegments(t *testing.T) {
	got := Segments("[0.5][s02]a[ 1.5 ][2][S1]b[noise][3][3]c[3][4][S01]d")
	want := []Segment{{0.5, 1.5, "[S2]"}, {2, 3, "[S1]"}, {4, 4, ""}}[:2]
	if len(got) != len(want) {
		t.Fatalf("Segments = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Segments = %v, want %v", got, want)
		}
	}
	// A time with no closing time is dropped; a speaker carries over.
	got = Segments("[0][S3]a[1][1]b[2][5]")
	if len(got) != 2 || got[1].Speaker != "[S3]" || got[1].Start != 1 || got[1].End != 2 {
		t.Fatalf("carry-over: %v", got)
	}
}

func TestNormalizeExact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[0.00][S1]Hello , World[1.00][1.00][ s2 ]Straße .[2.00]", "[s01] hello, world [s02] strasse."},
		{"<|endoftext|>[S01]x", "[s01] x"},
	} {
		if got := NormalizeExact(c.in); got != c.want {
			t.Errorf("NormalizeExact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestAssign(t *testing.T) {
	cost := [][]float64{{4, 1, 3}, {2, 0, 5}, {3, 2, 2}}
	p := assign(cost)
	total := 0.0
	for i, j := range p {
		total += cost[i][j]
	}
	if total != 5 { // 1 + 2 + 2
		t.Fatalf("assign = %v (cost %v), want cost 5", p, total)
	}
}

// Random markup-like text: scoring never fails, rates are not negative,
// and a prediction equal to its reference scores zero everywhere.
func TestRandomTextInvariants(t *testing.T) {
	tokens := []string{"[0]", "[1.5]", "[2.00]", "[3]", "[0.5]", "[4.25]", "[S01]", "[s2]", "[S003]", "[S1]",
		"ab", "你好", "，", "！", " ", "c", "[笑声]", "[", "]", "<x>", "&y&", "【z】", "7", "S", "."}
	r := uint64(1)
	next := func(n int) int {
		r = r*6364136223846793005 + 1442695040888963407
		return int((r >> 33) % uint64(n))
	}
	gen := func() string {
		var b strings.Builder
		for range next(14) {
			b.WriteString(tokens[next(len(tokens))])
		}
		return b.String()
	}
	derValid, cpValid := 0, 0
	for i := range 3000 {
		ref, hyp := gen(), gen()
		for _, row := range []Row{{"x", string(ref), string(hyp)}, {"same", string(ref), string(ref)}} {
			res := Compute([]Row{row})
			s := res.Samples[0]
			for name, p := range map[string]*float64{"cer": s.CERNoSpk, "cp": s.CPCER, "der": s.DER} {
				if p != nil && (*p < 0 || math.IsNaN(*p)) {
					t.Fatalf("case %d %q/%q: %s = %v", i, row.Ref, row.Pred, name, *p)
				}
			}
			if *s.CERValid && s.CERNoSpk == nil || *s.CPCERValid && s.CPCER == nil || *s.DERValid && s.DER == nil {
				t.Fatalf("case %d %q/%q: valid without a value: %+v", i, row.Ref, row.Pred, s)
			}
			if row.ID == "same" {
				if *s.DERValid {
					derValid++
				}
				if *s.CPCERValid {
					cpValid++
				}
				for name, p := range map[string]*float64{"cer": s.CERNoSpk, "cp": s.CPCER, "der": s.DER} {
					if p != nil && *p > 1e-12 {
						t.Fatalf("case %d: %q against itself: %s = %v", i, row.Ref, name, *p)
					}
				}
			}
		}
	}
	if derValid < 10 || cpValid < 10 { // the generator must reach the scorers
		t.Fatalf("only %d DER-valid and %d cp-valid random references", derValid, cpValid)
	}
}

// assign finds the least total cost: checked against every permutation of
// random matrices up to 6×6, ties and negative costs included.
func TestAssignBruteForce(t *testing.T) {
	r := uint64(7)
	next := func(n int) int {
		r = r*6364136223846793005 + 1442695040888963407
		return int((r >> 33) % uint64(n))
	}
	var best func(cost [][]float64, row int, used []bool) float64
	best = func(cost [][]float64, row int, used []bool) float64 {
		if row == len(cost) {
			return 0
		}
		m := math.Inf(1)
		for j := range cost {
			if !used[j] {
				used[j] = true
				m = min(m, cost[row][j]+best(cost, row+1, used))
				used[j] = false
			}
		}
		return m
	}
	for range 500 {
		n := 1 + next(6)
		cost := make([][]float64, n)
		for i := range cost {
			cost[i] = make([]float64, n)
			for j := range cost[i] {
				cost[i][j] = float64(next(9) - 4)
			}
		}
		p := assign(cost)
		seen := map[int]bool{}
		got := 0.0
		for i, j := range p {
			seen[j] = true
			got += cost[i][j]
		}
		if len(seen) != n {
			t.Fatalf("assign %v is not a permutation", p)
		}
		if want := best(cost, 0, make([]bool, n)); got != want {
			t.Fatalf("assign(%v) costs %v, the best is %v", cost, got, want)
		}
	}
}
