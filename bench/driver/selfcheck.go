package driver

import (
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"os"
	"runtime/metrics"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/stats"
)

// The driver's self-check (docs/BUNDLE.md, "The driver's self-check"): a
// load generator that cannot keep up sets the pace itself and the server
// is blamed for it. Each pass records how far the driver fell behind and
// what it cost; these limits say when the capture prints that it lagged.
// The analysis that names the driver as a cause (scripts/lib/driver.star)
// keeps its own thresholds, the same values.
const (
	// SlotGapP99Limit: closed loop, p99 of the time from a response's end
	// to the next send on the same slot (scoring, recording, the next
	// request's set-up): a slot idle that long is load not offered.
	SlotGapP99Limit = 5 * time.Millisecond
	// CPUShareLimit: the driver's process used this share of the cores it
	// may use (affinity, cgroup quota) over the pass.
	CPUShareLimit = 0.9
	// RunnableWaitP99Limit: p99 of the time the driver's goroutines waited,
	// runnable, for a thread (Go's /sched/latencies): the process was
	// starved of CPU.
	RunnableWaitP99Limit = 10 * time.Millisecond
	// ReadStallLimit: realtime sessions, the worst session's longest time
	// away from its connection between two messages.
	ReadStallLimit = 50 * time.Millisecond
	// LagShareLimit: a lag over its limit sets the pass's pace only when
	// it is this share of the pass's mean latency or more (open loop: the
	// mean send lag over the mean latency, measured from the intended
	// send; closed loop: the mean slot gap over gap + latency, the share
	// of each slot's cycle it sat idle).
	LagShareLimit = 0.1
)

// The one rule of the load generator (issue 43): a pass lagged when its
// lag (an open loop's sends behind the schedule, a closed loop's idle
// slots) broke its limit and is LagShareLimit of its mean latency or
// more, or a realtime reader stalled ReadStallLimit. A busy or starved
// process whose sends kept their schedule did not set the pace: its CPU
// and runnable wait are reasons beside a lag, not a verdict of their own
// (Strained). The capture's stderr line, the manifest's record (Verdict,
// Lagging) and the driver table and diagnosis (scripts/lib/driver.star,
// which reads Verdict) say the same.

// SelfCheck is the driver's check on itself over one pass: how late it
// sent, how long its slots sat idle, the CPU its process used and could
// use, how long its goroutines waited to run, and for realtime sessions
// how long its readers stalled. Seconds; nil or 0 where the pass has no
// such number (an open loop has no slot gaps).
type SelfCheck struct {
	Loop     string  `json:"loop"` // "open" or "closed"
	Requests int     `json:"requests"`
	WallS    float64 `json:"wall_s"`
	// Open loop: each send's lag behind its intended time, the pass's
	// schedule fidelity (Fidelity), with its mean.
	SendLagMeanS *float64 `json:"send_lag_mean_s,omitempty"`
	SendLagP50S  *float64 `json:"send_lag_p50_s,omitempty"`
	SendLagP99S  *float64 `json:"send_lag_p99_s,omitempty"`
	SendLagMaxS  *float64 `json:"send_lag_max_s,omitempty"`
	// Closed loop: on each slot, from a response's end (the protocol
	// client returned) to the slot's next send.
	SlotGaps     int      `json:"slot_gaps,omitempty"`
	SlotGapMeanS *float64 `json:"slot_gap_mean_s,omitempty"`
	SlotGapP50S  *float64 `json:"slot_gap_p50_s,omitempty"`
	SlotGapP99S  *float64 `json:"slot_gap_p99_s,omitempty"`
	SlotGapMaxS  *float64 `json:"slot_gap_max_s,omitempty"`
	// The driver's process (all of asrprof: the driver, the recorder,
	// probes and receiver beside it): user + system CPU seconds over the
	// pass (getrusage), that as cores (cpu_s / wall_s: a share of one
	// core), the cores it may use (affinity, cgroup quota) and the share
	// of those it used.
	CPUS              float64 `json:"cpu_s"`
	CPUCores          float64 `json:"cpu_cores"`
	CoresAllowed      float64 `json:"cores_allowed"`
	CPUShareOfAllowed float64 `json:"cpu_share_of_allowed"`
	// Go's scheduler over the pass: how long goroutines waited, runnable,
	// to run (/sched/latencies:seconds, the bucket's upper bound; its
	// buckets are a power of two apart at most).
	RunnableWaitP99S float64 `json:"runnable_wait_p99_s"`
	RunnableWaitMaxS float64 `json:"runnable_wait_max_s"`
	// The kernel's scheduler over the pass: the time the process's
	// threads spent runnable on a run queue, waiting for a CPU (the sum
	// over its threads of /proc/self/task/*/schedstat's wait; threads that
	// exited during the pass are left out), and that per second of the
	// pass: > 0 when other work (or a quota) held the driver off the CPU.
	RunQueueWaitS    float64 `json:"run_queue_wait_s"`
	RunQueueWaitPerS float64 `json:"run_queue_wait_per_s"`
	// Realtime sessions: how many, their readers' longest stall
	// (RealtimeResult.ReadStallMax) at p99 over sessions and the worst.
	Streams       int      `json:"streams,omitempty"`
	ReadStallP99S *float64 `json:"read_stall_p99_s,omitempty"`
	ReadStallMaxS *float64 `json:"read_stall_max_s,omitempty"`
	// Verdict is the rule's (above): "lagged" or "kept up".
	Verdict string `json:"verdict"`
	// LagShare is the lag's share of the pass's mean latency (nil: no
	// lag measured or no successful request).
	LagShare *float64 `json:"lag_share,omitempty"`
	// Lagging says which limits the driver broke when it lagged (empty: it
	// kept up). The open loop's send-lag limits are the schedule
	// fidelity's.
	Lagging []string `json:"lagging,omitempty"`
	// Strained: limits broken in a pass that kept up (a busy process whose
	// sends kept their schedule, a lag too small a share of latency).
	Strained []string `json:"strained,omitempty"`
}

// String is the line a capture prints at the end of a pass in which the
// driver lagged.
func (c *SelfCheck) String() string {
	s := fmt.Sprintf("driver self-check: %s loop, CPU %.2f cores of %.2f allowed (%.0f %%), run-queue wait %.3f s/s, runnable wait p99 %s",
		c.Loop, c.CPUCores, c.CoresAllowed, 100*c.CPUShareOfAllowed, c.RunQueueWaitPerS, ms(c.RunnableWaitP99S))
	if c.SendLagP99S != nil {
		s += fmt.Sprintf(", send lag p99 %s", ms(*c.SendLagP99S))
	}
	if c.SlotGapP99S != nil {
		s += fmt.Sprintf(", slot gap p99 %s", ms(*c.SlotGapP99S))
	}
	if c.ReadStallMaxS != nil {
		s += fmt.Sprintf(", read stall max %s", ms(*c.ReadStallMaxS))
	}
	if len(c.Lagging) > 0 {
		s += "; THE DRIVER LAGGED (" + strings.Join(c.Lagging, ", ") + "): the load generator, not the server, may have set this pass's pace"
	} else if len(c.Strained) > 0 {
		s += "; kept up (" + strings.Join(c.Strained, ", ") + ", but its sends set no pace)"
	}
	return s
}

// meter takes the process's CPU time and Go's scheduling latencies at the
// start of a pass, to difference at its end.
type meter struct {
	cpu   float64
	wait  map[int]uint64            // thread → schedstat wait ns at the start
	sched *metrics.Float64Histogram // nil where the runtime has none
}

// threadWaits is each thread's run-queue wait so far (ns), from
// /proc/self/task/*/schedstat; empty where the kernel has no schedstat.
func threadWaits() map[int]uint64 {
	pid := os.Getpid()
	out := map[int]uint64{}
	for _, tid := range proctree.Threads(pid) {
		if st, err := proctree.ReadSchedstat(pid, tid); err == nil {
			out[tid] = st.WaitNs
		}
	}
	return out
}

// processCPU is the process's user + system CPU seconds (getrusage).
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func readSched() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	h := s[0].Value.Float64Histogram()
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

// selfCheckInput is what a pass gathered for its self-check.
type selfCheckInput struct {
	open     bool
	requests int
	wallS    float64
	fidelity *bundle.Fidelity
	lags     []float64 // open loop: send lags (sorted by NewFidelity)
	gaps     []float64 // closed loop: slot gaps
	stalls   []float64 // realtime: each session's ReadStallMax
	// latencyMeanS is the pass's mean latency over its successful
	// requests (0: none), what a lag is a share of.
	latencyMeanS float64
}

// finish ends the meter and builds the pass's self-check.
func (m *meter) finish(in selfCheckInput) *SelfCheck {
	c := &SelfCheck{Loop: "closed", Requests: in.requests, WallS: in.wallS}
	if in.open {
		c.Loop = "open"
	}
	c.CPUS = math.Max(processCPU()-m.cpu, 0)
	var waitNs uint64
	for tid, ns := range threadWaits() {
		if ns >= m.wait[tid] { // a thread born in the pass counts from 0
			waitNs += ns - m.wait[tid]
		}
	}
	c.RunQueueWaitS = float64(waitNs) / 1e9
	if in.wallS > 0 {
		c.RunQueueWaitPerS = c.RunQueueWaitS / in.wallS
		c.CPUCores = c.CPUS / in.wallS
	}
	if cores, err := cpulimit.Allowed("/sys", "/proc", os.Getpid()); err == nil && cores > 0 {
		c.CoresAllowed = cores
		c.CPUShareOfAllowed = c.CPUCores / cores
	}
	if h := readSched(); h != nil && m.sched != nil && len(h.Counts) == len(m.sched.Counts) {
		for i := range h.Counts { // readSched's own copy
			h.Counts[i] -= m.sched.Counts[i]
		}
		c.RunnableWaitP99S, c.RunnableWaitMaxS = histQuantile(h.Counts, h.Buckets, 0.99)
	}
	var lag, stall, strain []string
	if f := in.fidelity; f != nil {
		c.SendLagMeanS = new(stats.Mean(in.lags))
		c.SendLagP50S, c.SendLagP99S, c.SendLagMaxS = new(f.SendLagP50S), new(f.SendLagP99S), new(f.SendLagMaxS)
		lag = append(lag, f.Lost...)
		if in.latencyMeanS > 0 {
			c.LagShare = new(math.Min(*c.SendLagMeanS/in.latencyMeanS, 1))
		}
	}
	if len(in.gaps) > 0 {
		sort.Float64s(in.gaps)
		c.SlotGaps = len(in.gaps)
		c.SlotGapMeanS = new(stats.Mean(in.gaps))
		c.SlotGapP50S = new(stats.PercentileSorted(in.gaps, 50))
		c.SlotGapP99S = new(stats.PercentileSorted(in.gaps, 99))
		c.SlotGapMaxS = new(in.gaps[len(in.gaps)-1])
		lag = over(lag, "slot gap p99", *c.SlotGapP99S, SlotGapP99Limit)
		if in.latencyMeanS > 0 {
			c.LagShare = new(*c.SlotGapMeanS / (*c.SlotGapMeanS + in.latencyMeanS))
		}
	}
	if len(in.stalls) > 0 {
		sort.Float64s(in.stalls)
		c.Streams = len(in.stalls)
		c.ReadStallP99S = new(stats.PercentileSorted(in.stalls, 99))
		c.ReadStallMaxS = new(in.stalls[len(in.stalls)-1])
		stall = over(stall, "read stall max", *c.ReadStallMaxS, ReadStallLimit)
	}
	if c.CoresAllowed > 0 && c.CPUShareOfAllowed >= CPUShareLimit {
		strain = append(strain, fmt.Sprintf("CPU %.0f %% of the %.2f cores allowed ≥ %.0f %%", 100*c.CPUShareOfAllowed, c.CoresAllowed, 100*CPUShareLimit))
	}
	strain = over(strain, "runnable wait p99", c.RunnableWaitP99S, RunnableWaitP99Limit)
	c.judge(lag, stall, strain)
	return c
}

// judge applies the one rule (above) to a pass's broken limits: lag (the
// sends or slots), stall (a realtime reader), strain (CPU, runnable wait).
func (c *SelfCheck) judge(lag, stall, strain []string) {
	lagged := len(lag) > 0 && c.LagShare != nil && *c.LagShare >= LagShareLimit
	if lagged || len(stall) > 0 {
		c.Verdict = "lagged"
		if lagged {
			c.Lagging = append(c.Lagging, lag...)
			c.Lagging = append(c.Lagging, fmt.Sprintf("lag %.0f %% of the mean latency ≥ %.0f %%", 100**c.LagShare, 100*LagShareLimit))
		}
		c.Lagging = append(append(c.Lagging, stall...), strain...)
		return
	}
	c.Verdict = "kept up"
	c.Strained = append(append(c.Strained, lag...), strain...)
}

// histQuantile is the upper bound of the bucket that holds quantile q of
// counts, and of the highest non-empty bucket (0, 0 when empty). An
// infinite bound is reported as the bucket's lower bound.
func histQuantile(counts []uint64, buckets []float64, q float64) (float64, float64) {
	var total uint64
	for _, n := range counts {
		total += n
	}
	bound := func(i int) float64 {
		if hi := buckets[i+1]; !math.IsInf(hi, 1) {
			return hi
		}
		return buckets[i]
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	qv, maxv := 0.0, 0.0
	for i, n := range counts {
		if n == 0 {
			continue
		}
		if seen < want && seen+n >= want {
			qv = bound(i)
		}
		seen += n
		maxv = bound(i)
	}
	return qv, maxv
}
