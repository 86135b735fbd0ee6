package servermetrics

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// discardSink marshals records as the bundle writer does and drops them.
type discardSink struct{ bytes int }

func (d *discardSink) Append(_ string, rec any) error {
	b, err := json.Marshal(rec)
	d.bytes += len(b) + 1
	return err
}

func (d *discardSink) Path(name string) string { return name }

// vllmLike is an exposition of about n series shaped like vLLM's: a few
// gauges and counters, and histograms of 20 buckets with two label sets.
func vllmLike(n int) string {
	var b strings.Builder
	lb := `engine="0",model_name="openai/whisper-large-v3"`
	for i := 0; b.Len() == 0 || strings.Count(b.String(), "\n")-3*i < n; i++ {
		fmt.Fprintf(&b, "# HELP vllm:h%d_seconds Histogram.\n# TYPE vllm:h%d_seconds histogram\n", i, i)
		for j := range 20 {
			fmt.Fprintf(&b, "vllm:h%d_seconds_bucket{%s,le=\"%g\"} %d.0\n", i, lb, 0.001*float64(int(1)<<j), j*7)
		}
		fmt.Fprintf(&b, "vllm:h%d_seconds_bucket{%s,le=\"+Inf\"} 140.0\n", i, lb)
		fmt.Fprintf(&b, "vllm:h%d_seconds_sum{%s} 12.5\nvllm:h%d_seconds_count{%s} 140.0\n", i, lb, i, lb)
		fmt.Fprintf(&b, "# TYPE vllm:g%d gauge\nvllm:g%d{%s} 3.0\n", i, i, lb)
	}
	return b.String()
}

// BenchmarkIngest is the probe's CPU per scrape of a 1,000-series
// exposition: parsing it and writing its records (marshalled as the bundle
// writer does).
func BenchmarkIngest(b *testing.B) {
	text := vllmLike(1000)
	p := New(Config{})
	sink := &discardSink{}
	p.out, p.series = sink, map[string]*series{}
	e, err := Parse(text)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d series, %d bytes", len(e.Samples), len(text))
	b.ResetTimer()
	for range b.N {
		e, err := Parse(text)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.ingest(time.Now(), time.Millisecond, e, len(text)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sink.bytes)/float64(b.N), "jsonl-bytes/scrape")
}
