package analysis

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fixture"
)

// largeConfig is the performance target: 100,000 requests and 1,000,000
// spans (one client span, the refserver's five, four filler spans each).
func largeConfig() fixture.Config {
	lv := fixture.SweepLevels(true)
	return fixture.Config{Format: fixture.RefServer, Levels: lv, Repeats: 1, RequestsPerPass: 25000,
		ExtraSpans: 4, ClockOffset: time.Second, Seed: 9, SpansPerBatch: 256}
}

// BenchmarkLarge loads a 100k-request, 1M-span bundle and runs stages.star
// and sweep.star: go test -run '^$' -bench Large -benchtime 1x ./analysis/
// Set ASRPROF_LARGE_DIR to keep (and reuse) the generated bundle.
func BenchmarkLarge(b *testing.B) {
	dir := os.Getenv("ASRPROF_LARGE_DIR")
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "large")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		tr, err := fixture.Write(dir, largeConfig())
		if err != nil {
			b.Fatal(err)
		}
		if tr.Requests != 100000 || tr.Spans != 1000000 {
			b.Fatalf("fixture has %d requests and %d spans", tr.Requests, tr.Spans)
		}
	}
	runtime.GC()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c, err := loadT(b, dir)
		if err != nil {
			b.Fatal(err)
		}
		s := NewSession(c, Options{})
		tabs, err := RunScripts(context.Background(), s, []string{"stages", "sweep"})
		if err != nil {
			b.Fatal(err)
		}
		if len(tabs) != 2 || len(tabs[0].Rows) != 4 {
			b.Fatalf("tables %v", tabs)
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b.ReportMetric(time.Since(start).Seconds(), "s/run")
		b.ReportMetric(float64(m.Sys)/(1<<20), "MiB-sys")
		b.ReportMetric(float64(m.HeapInuse)/(1<<20), "MiB-heap-inuse")
	}
}
