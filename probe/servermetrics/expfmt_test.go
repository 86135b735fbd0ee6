package servermetrics

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseExpfmt is Parse done with github.com/prometheus/common/expfmt, the
// library the probe was measured against (docs/PERFORMANCE.md,
// "servermetrics: expfmt against the hand parser"): its metric families
// mapped back to one Sample per exposed line. It is not used: expfmt was
// about 4x slower per scrape (BenchmarkParse, BenchmarkIngest*), and it
// cannot give the same records (it returns the families as a map, so the
// exposed order is lost; it parses le and quantile into floats, so
// le="1.0" comes back as "1"; it keeps bucket and _count values as
// integers; it drops a # TYPE without samples of its own name, so a
// counter typed as x with samples x_total is untyped; it rejects CRLF,
// exemplars, OpenMetrics types and a TYPE after its samples).
func parseExpfmt(text string) (*Exposition, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		var pe expfmt.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %s", pe.Line, pe.Msg)
		}
		return nil, err
	}
	e := &Exposition{Types: map[string]string{}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range fams {
			if !yield(n) {
				return
			}
		}
	}) {
		mf := fams[name]
		if t := strings.ToLower(mf.GetType().String()); t != "untyped" {
			e.Types[name] = t
		}
		for _, m := range mf.GetMetric() {
			var lb []Label
			for _, lp := range m.GetLabel() {
				lb = append(lb, Label{lp.GetName(), lp.GetValue()})
			}
			base := Sample{Name: name, Labels: lb}
			if m.TimestampMs != nil {
				base.TimestampMs, base.HasTimestamp = m.GetTimestampMs(), true
			}
			add := func(suffix string, extra *Label, v float64) {
				s := base
				s.Name, s.Value = name+suffix, v
				if extra != nil {
					s.Labels = append(slices.Clip(lb), *extra)
				}
				e.Samples = append(e.Samples, s)
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add("", nil, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add("", nil, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add("", nil, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add("_bucket", &Label{"le", promFloat(b.GetUpperBound())}, float64(b.GetCumulativeCount()))
				}
				if h.SampleSum != nil {
					add("_sum", nil, h.GetSampleSum())
				}
				if h.SampleCount != nil {
					add("_count", nil, float64(h.GetSampleCount()))
				}
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					add("", &Label{"quantile", promFloat(q.GetQuantile())}, q.GetValue())
				}
				if sm.SampleSum != nil {
					add("_sum", nil, sm.GetSampleSum())
				}
				if sm.SampleCount != nil {
					add("_count", nil, float64(sm.GetSampleCount()))
				}
			}
		}
	}
	return e, nil
}

func promFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// sampleKeys lists an exposition's samples as sorted strings.
func sampleKeys(e *Exposition) []string {
	var out []string
	for _, s := range e.Samples {
		lb := slices.SortedFunc(slices.Values(s.Labels), func(a, b Label) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, fmt.Sprintf("%s%v %s %v", s.Name, lb, e.TypeOf(s.Name), s.Value))
	}
	slices.Sort(out)
	return out
}

// The benchmark's exposition is one both parsers read alike (but for the
// order of the samples), so BenchmarkParse compares like with like.
func TestExpfmtReadsTheBenchmarkAlike(t *testing.T) {
	text := vllmLike(1000)
	a, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseExpfmt(text)
	if err != nil {
		t.Fatal(err)
	}
	if ka, kb := sampleKeys(a), sampleKeys(b); !slices.Equal(ka, kb) {
		t.Errorf("Parse and expfmt differ: %d and %d samples", len(ka), len(kb))
	}
}

// BenchmarkParse is parsing alone, with Parse and with expfmt.
func BenchmarkParse(b *testing.B) {
	text := vllmLike(1000)
	for _, bc := range []struct {
		name  string
		parse func(string) (*Exposition, error)
	}{{"hand", Parse}, {"expfmt", parseExpfmt}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for range b.N {
				if _, err := bc.parse(text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIngestExpfmt is BenchmarkIngest with expfmt parsing.
func BenchmarkIngestExpfmt(b *testing.B) {
	text := vllmLike(1000)
	p := New(Config{})
	sink := &discardSink{}
	p.out, p.series = sink, map[string]*series{}
	b.ResetTimer()
	for range b.N {
		e, err := parseExpfmt(text)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.ingest(time.Now(), time.Millisecond, e, len(text)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sink.bytes)/float64(b.N), "jsonl-bytes/scrape")
}
