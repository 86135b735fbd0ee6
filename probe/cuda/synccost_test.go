package cuda

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

// Calls a run of BenchmarkSyncCost makes: cuStreamSynchronize returning
// at once, and after 10 µs of work.
const (
	syncCostCalls     = 1_000_000
	syncCostWorkCalls = 100_000
	syncCostWorkNs    = 10_000
)

// benchRun runs syncapp's bench mode (calls cuStreamSynchronize calls
// times, each after work ns of spinning) and returns its ns a round; with
// probed, under the probe, in an open pass.
func benchRun(b *testing.B, bin string, calls, work int, probed bool) float64 {
	b.Helper()
	a := startBenchApp(b, bin, calls, work)
	defer a.stop()
	var p *Probe
	per := probe.Period{Level: "bench", Repeat: 1}
	if probed {
		p = New(Config{})
		if err := p.Start(context.Background(), probe.Target{PID: a.pid}, &probetest.Sink{Dir: b.TempDir()}); err != nil {
			b.Fatalf("starting the probe: %v", err)
		}
		defer p.Stop(context.Background())
		p.Begin(per)
	}
	if _, err := a.stdin.Write([]byte{1}); err != nil {
		b.Fatal(err)
	}
	var ns float64
	s := a.readLine(b, 5*time.Minute)
	if _, err := fmt.Sscanf(s, "bench ns=%g", &ns); err != nil {
		b.Fatalf("app said %q: %v", s, err)
	}
	if probed {
		if err := p.End(context.Background(), per); err != nil {
			b.Fatalf("End: %v", err)
		}
		if l := p.Losses(); l != "" {
			b.Logf("losses: %s", l)
		}
	}
	return ns
}

// BenchmarkSyncCost measures what the timing of a blocking call costs the
// calling thread: the stand-in's cuStreamSynchronize returning at once,
// called 1e6 times in a loop without and with the probe (uprobe at entry,
// uretprobe at return, the ring buffer and the binning of an open pass),
// and the same for a loop that does 10 µs of work a call (1e5 calls). Each
// b.N is one alternating pair of each (off, on); run it with -benchtime 5x
// for five. It reports the medians: ns a call off and on, the added µs a
// call, and the added share of the 10 µs loop.
func BenchmarkSyncCost(b *testing.B) {
	need.Root(b, "to attach uprobes")
	bin := buildSyncApp(b)
	var off, on, woff, won []float64
	for i := 0; i < b.N; i++ {
		off = append(off, benchRun(b, bin, syncCostCalls, 0, false))
		on = append(on, benchRun(b, bin, syncCostCalls, 0, true))
		woff = append(woff, benchRun(b, bin, syncCostWorkCalls, syncCostWorkNs, false))
		won = append(won, benchRun(b, bin, syncCostWorkCalls, syncCostWorkNs, true))
		b.Logf("pair %d: immediate %.1f → %.1f ns a call; 10 µs work %.1f → %.1f ns a call (%+.1f %%)",
			i+1, off[i], on[i], woff[i], won[i], 100*(won[i]-woff[i])/woff[i])
	}
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		if n := len(s); n%2 == 1 {
			return s[n/2]
		} else {
			return (s[n/2-1] + s[n/2]) / 2
		}
	}
	b.ReportMetric(med(off), "ns/call-off")
	b.ReportMetric(med(on), "ns/call-on")
	b.ReportMetric((med(on)-med(off))/1000, "µs-added/call")
	b.ReportMetric(med(woff), "ns/10µs-call-off")
	b.ReportMetric(med(won), "ns/10µs-call-on")
	b.ReportMetric(100*(med(won)-med(woff))/med(woff), "%-added-to-10µs")
	b.ReportMetric(0, "ns/op")
}

// benchApp is a running syncapp in bench mode.
type benchApp struct{ *app }

func startBenchApp(b *testing.B, bin string, calls, work int) benchApp {
	b.Helper()
	a, err := launchApp(bin, "bench", fmt.Sprint(calls), fmt.Sprint(work))
	if err != nil {
		b.Fatal(err)
	}
	if s := a.readLine(b, 10*time.Second); !strings.HasPrefix(s, "ready") {
		a.stop()
		b.Fatalf("app said %q", s)
	}
	return benchApp{a}
}
