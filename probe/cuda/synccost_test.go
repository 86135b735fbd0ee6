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

// cost is one run of syncapp's bench mode: ns a round, wall and the
// calling thread's CPU.
// bpfNs is the blocking calls' BPF programs' run time a run (probed only).
type cost struct{ wall, cpu, bpfNs float64 }

// benchRun runs syncapp's bench mode (calls cuStreamSynchronize calls
// times, each after work ns of CPU) and returns its cost a round; with
// probed, under the probe, in an open pass.
func benchRun(b *testing.B, bin string, calls, work int, probed bool) cost {
	b.Helper()
	a := startBenchApp(b, bin, calls, work)
	defer a.stop()
	var p *Probe
	per := probe.Period{Level: "bench", Repeat: 1}
	if probed {
		p = New()
		if err := p.Start(context.Background(), probe.Target{PID: a.pid}, &probetest.Sink{Dir: b.TempDir()}); err != nil {
			b.Fatalf("starting the probe: %v", err)
		}
		defer p.Stop(context.Background())
		p.Begin(per)
	}
	if _, err := a.stdin.Write([]byte{1}); err != nil {
		b.Fatal(err)
	}
	var c cost
	s := a.readLine(b, 5*time.Minute)
	if _, err := fmt.Sscanf(s, "bench ns=%g cpu_ns=%g", &c.wall, &c.cpu); err != nil {
		b.Fatalf("app said %q: %v", s, err)
	}
	if probed {
		if err := p.End(context.Background(), per); err != nil {
			b.Fatalf("End: %v", err)
		}
		if l := p.Losses(); l != "" {
			b.Logf("losses: %s", l)
		}
		if o, err := p.Overhead(); err == nil && o.SyncRuns > 0 {
			c.bpfNs = float64(o.SyncRuntime.Nanoseconds()) / float64(o.SyncRuns)
		}
	}
	return c
}

// syncCostPairs is how many alternating pairs one b.N makes.
const syncCostPairs = 5

// BenchmarkSyncCost measures what the timing of a blocking call costs the
// calling thread: the stand-in's cuStreamSynchronize returning at once,
// called 1e6 times in a loop without and with the probe (uprobe at entry,
// uretprobe at return, the ring buffer and the binning of an open pass),
// and the same for a loop that does 10 µs of work a call (1e5 calls). Each
// b.N is syncCostPairs alternating pairs of each (off, on; run it with
// -benchtime 1x). The cost is the calling thread's CPU time a call (user
// and system: the traps and the BPF programs run in it), which a shared
// machine's load does not inflate as it does wall time; the wall time is
// logged beside it, and so is the BPF programs' own run time (two runs a
// call; BPF statistics are turned on for the benchmark). It reports medians over the pairs: CPU ns a call off
// and on, the µs added a call, and the share added to the 10 µs loop.
func BenchmarkSyncCost(b *testing.B) {
	need.Root(b, "to attach uprobes")
	probetest.EnableStats(b)
	bin := buildSyncApp(b)
	var off, on, woff, won, added, share []float64
	for i := 0; i < b.N*syncCostPairs; i++ {
		o, n := benchRun(b, bin, syncCostCalls, 0, false), benchRun(b, bin, syncCostCalls, 0, true)
		wo, wn := benchRun(b, bin, syncCostWorkCalls, syncCostWorkNs, false), benchRun(b, bin, syncCostWorkCalls, syncCostWorkNs, true)
		off, on, woff, won = append(off, o.cpu), append(on, n.cpu), append(woff, wo.cpu), append(won, wn.cpu)
		added = append(added, (n.cpu-o.cpu)/1000)
		share = append(share, 100*(wn.cpu-wo.cpu)/wo.cpu)
		b.Logf("pair %d: immediate %.1f → %.1f ns CPU a call (wall %.1f → %.1f; BPF %.0f ns a program run); 10 µs work %.1f → %.1f ns CPU a call (%+.1f %%; wall %.1f → %.1f; BPF %.0f ns)",
			i+1, o.cpu, n.cpu, o.wall, n.wall, n.bpfNs, wo.cpu, wn.cpu, share[i], wo.wall, wn.wall, wn.bpfNs)
	}
	b.ReportMetric(median(off), "cpu-ns/call-off")
	b.ReportMetric(median(on), "cpu-ns/call-on")
	b.ReportMetric(median(added), "µs-added/call")
	b.ReportMetric(median(woff), "cpu-ns/10µs-call-off")
	b.ReportMetric(median(won), "cpu-ns/10µs-call-on")
	b.ReportMetric(median(share), "%-added-to-10µs")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
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
