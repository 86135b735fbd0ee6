package diarize

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mdEval is NIST md-eval v22 from Debian's sctk (tools/deps.sh installs it).
const mdEval = "/usr/lib/sctk/bin/md-eval.pl"

// mdCase is one recording for md-eval: ref and hyp markup.
type mdCase struct{ ref, hyp string }

// rttm writes segs as RTTM SPEAKER lines of recording file.
func rttm(b *strings.Builder, file string, segs []Segment) {
	for _, s := range segs {
		spk := strings.Trim(s.Speaker, "[]")
		fmt.Fprintf(b, "SPEAKER %s 1 %.6f %.6f <NA> <NA> %s <NA> <NA>\n", file, s.Start, s.End-s.Start, spk)
	}
}

var mdLine = regexp.MustCompile(`(SCORED SPEAKER TIME|MISSED SPEAKER TIME|FALARM SPEAKER TIME|SPEAKER ERROR TIME) =\s*([0-9.]+)|OVERALL SPEAKER DIARIZATION ERROR = ([0-9.]+) percent`)

// runMDEval scores the cases as one corpus with md-eval at collar 0,
// overlap scored; with uem, each recording's scoring region spans the
// extents of its ref and hyp segments (without it md-eval scores only the
// ref's extent, and hyp speech outside it is no false alarm).
func runMDEval(t *testing.T, cases []mdCase, uem bool) (der float64, secs map[string]float64) {
	t.Helper()
	if _, err := os.Stat(mdEval); err != nil {
		t.Fatalf("%s is missing: install Debian's sctk (tools/deps.sh)", mdEval)
	}
	dir := t.TempDir()
	var ref, sys, u strings.Builder
	for i, c := range cases {
		file := fmt.Sprintf("rec%03d", i)
		rs, hs := Segments(c.ref), Segments(c.hyp)
		rttm(&ref, file, rs)
		rttm(&sys, file, hs)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range append(rs, hs...) {
			lo, hi = min(lo, s.Start), max(hi, s.End)
		}
		fmt.Fprintf(&u, "%s 1 %.6f %.6f\n", file, lo, hi)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{mdEval, "-c", "0", "-r", write("ref.rttm", ref.String()), "-s", write("sys.rttm", sys.String())}
	if uem {
		args = append(args, "-u", write("f.uem", u.String()))
	}
	out, err := exec.Command("perl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("md-eval: %v\n%s", err, out)
	}
	secs = map[string]float64{}
	der = -1
	for _, m := range mdLine.FindAllStringSubmatch(string(out), -1) {
		if m[3] != "" {
			der, _ = strconv.ParseFloat(m[3], 64)
		} else if _, seen := secs[m[1]]; !seen {
			secs[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
	}
	if der < 0 {
		t.Fatalf("md-eval printed no OVERALL SPEAKER DIARIZATION ERROR:\n%s", out)
	}
	return der, secs
}

// checkMDEval compares Compute's corpus DER and seconds with md-eval's
// (which prints percent and seconds with two decimals).
func checkMDEval(t *testing.T, name string, cases []mdCase) {
	t.Helper()
	rows := make([]Row, len(cases))
	for i, c := range cases {
		rows[i] = Row{ID: fmt.Sprint(i), Ref: c.ref, Pred: c.hyp}
	}
	m := Compute(rows).Metrics
	der, secs := runMDEval(t, cases, true)
	if m.DER == nil {
		t.Fatalf("%s: no DER", name)
	}
	if math.Abs(*m.DER*100-der) > 0.006 {
		t.Errorf("%s: DER %.4f%%, md-eval %.2f%%", name, *m.DER*100, der)
	}
	for k, v := range map[string]float64{
		"SCORED SPEAKER TIME": m.DERTotalSeconds, "MISSED SPEAKER TIME": m.DERMissedDetection,
		"FALARM SPEAKER TIME": m.DERFalseAlarm, "SPEAKER ERROR TIME": m.DERConfusion,
	} {
		if got, ok := secs[k]; !ok || math.Abs(got-v) > 0.006 {
			t.Errorf("%s: %s %.4f, md-eval %v (found %v)", name, k, v, got, ok)
		}
	}
}

func TestDERMatchesMDEvalVectors(t *testing.T) {
	for _, v := range vectors {
		if v.der < 0 {
			continue // skipped here; md-eval would score it as 100% missed
		}
		checkMDEval(t, v.name, []mdCase{{v.ref, v.hyp}})
	}
	// Vector 10 (2, 3, 6 without the skipped 6): one corpus.
	checkMDEval(t, "corpus 2+3", []mdCase{{vectors[2].ref, vectors[2].hyp}, {vectors[3].ref, vectors[3].hyp}})
	// The scoring-region caveat: without a UEM md-eval scores vector 3
	// only over the ref's extent, 1/3 where the UEM (and we) give 2/3.
	if der, _ := runMDEval(t, []mdCase{{vectors[3].ref, vectors[3].hyp}}, false); math.Abs(der-100.0/3) > 0.006 {
		t.Errorf("vector 3 without UEM: md-eval %.2f%%, want 33.33%%", der)
	}
}

// randomMarkup is a random diarization in the markup: up to four speakers,
// each with turns that do not overlap each other but may overlap other
// speakers', times in hundredths.
func randomMarkup(r *rand.Rand, nspk int) string {
	type turn struct {
		s, e float64
		spk  int
	}
	var turns []turn
	for spk := 1; spk <= nspk; spk++ {
		t := float64(r.IntN(300)) / 100
		for range 1 + r.IntN(4) {
			t += float64(r.IntN(200)) / 100
			d := float64(1+r.IntN(300)) / 100
			turns = append(turns, turn{t, t + d, spk})
			t += d
		}
	}
	var b strings.Builder
	for _, tr := range turns {
		fmt.Fprintf(&b, "[%.2f][S%02d]w[%.2f]", tr.s, tr.spk, tr.e)
	}
	return b.String()
}

func TestDERMatchesMDEvalRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 3))
	var corpus []mdCase
	for i := range 40 {
		c := mdCase{randomMarkup(r, 1+r.IntN(3)), randomMarkup(r, 1+r.IntN(4))}
		checkMDEval(t, fmt.Sprintf("random %d: %s / %s", i, c.ref, c.hyp), []mdCase{c})
		corpus = append(corpus, c)
	}
	checkMDEval(t, "random corpus", corpus)
}
