package serve

import (
	"github.com/asrprof/asrprof/bundle"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/sched"
)

// metrics are the daemon's Prometheus series, in a registry of its own.
// Every series carries the capture's id: two captures on one host (or
// one GPU) stay apart.
type metrics struct {
	reg *prometheus.Registry

	inFlight *prometheus.GaugeVec
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	records  *prometheus.CounterVec
	periods  *prometheus.CounterVec

	gpu map[string]*prometheus.GaugeVec // entry.gpu's metric name → gauge

	threadCPU  *prometheus.GaugeVec
	threadCPUs *prometheus.CounterVec
	cudaRate   *prometheus.GaugeVec
	cudaLaunch *prometheus.CounterVec
	runq       *runqCollector
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "asrprof_capture_requests_in_flight",
		Help: "Requests the capture's driver has sent and not yet finished."}, []string{"capture"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asrprof_capture_requests_total",
		Help: "Finished requests by status (ok, http_error, timeout, ...; warmup included)."}, []string{"capture", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "asrprof_capture_request_latency_seconds",
		Help:    "Client latency of finished requests (open loop: from the intended send time).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 15)}, []string{"capture"})
	m.records = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asrprof_probe_records_total",
		Help: "Records each probe appended to the bundle."}, []string{"capture", "probe"})
	m.periods = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asrprof_capture_periods_total",
		Help: "Probe periods (passes) that ended."}, []string{"capture"})
	m.gpu = map[string]*prometheus.GaugeVec{}
	for _, g := range []struct{ name, help string }{
		{"asrprof_gpu_utilization_percent", "NVML GPU utilization: percent of the sample period a kernel ran."},
		{"asrprof_gpu_sm_active_percent", "GPM SM activity over the last GPM window (Hopper and later)."},
		{"asrprof_gpu_memory_used_bytes", "Device memory in use."},
		{"asrprof_gpu_power_watts", "Total board power."},
	} {
		m.gpu[g.name] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: g.name, Help: g.help}, []string{"capture", "gpu"})
		m.reg.MustRegister(m.gpu[g.name])
	}
	m.threadCPU = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "asrprof_thread_cpu_utilization",
		Help: "CPU share of each of the target's threads over the last probe period (1: one core the whole period)."},
		[]string{"capture", "pid", "tid", "thread"})
	m.threadCPUs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asrprof_thread_cpu_seconds_total",
		Help: "CPU time of each of the target's threads, summed over the probe periods."},
		[]string{"capture", "pid", "tid", "thread"})
	m.cudaRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "asrprof_cuda_launches_per_second",
		Help: "CUDA kernel and graph launches per second over the last probe period, all threads."}, []string{"capture", "symbol"})
	m.cudaLaunch = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asrprof_cuda_launches_total",
		Help: "CUDA kernel and graph launches, summed over the probe periods."}, []string{"capture", "symbol"})
	m.runq = &runqCollector{desc: prometheus.NewDesc("asrprof_runqueue_latency_seconds",
		"Run-queue latency of the target's threads (wake-up or preemption to running), eBPF sched probe; log2 buckets.",
		[]string{"capture"}, nil), h: map[string]*runqHist{}}
	m.reg.MustRegister(m.inFlight, m.requests, m.latency, m.records, m.periods, m.threadCPU, m.threadCPUs, m.cudaRate, m.cudaLaunch, m.runq)
	return m
}

// forget drops a finished capture's gauges of live state (threads, GPUs,
// in flight, launch rates): they describe nothing any more. Counters and
// histograms stay, so totals can still be read.
func (m *metrics) forget(id string) {
	l := prometheus.Labels{"capture": id}
	m.inFlight.DeletePartialMatch(l)
	m.threadCPU.DeletePartialMatch(l)
	m.cudaRate.DeletePartialMatch(l)
	for _, g := range m.gpu {
		g.DeletePartialMatch(l)
	}
}

// gpu sets the gauge one gpu probe record shows, in the metric's unit;
// records no gauge shows (device, clocks, per-period summaries, ...) set
// nothing.
func (e *entry) gpu(r *bundle.GPURecord) {
	var name string
	var v float64
	switch {
	case r.GPUUtil != nil:
		name, v = "asrprof_gpu_utilization_percent", r.UtilPct
	case r.GPUPower != nil:
		name, v = "asrprof_gpu_power_watts", r.PowerW
	case r.GPUMem != nil:
		name, v = "asrprof_gpu_memory_used_bytes", r.UsedMiB*(1<<20)
	case r.GPUGPM != nil && r.SMActivePct != nil:
		name, v = "asrprof_gpu_sm_active_percent", *r.SMActivePct
	default:
		return
	}
	e.m.gpu[name].WithLabelValues(e.id, strconv.Itoa(r.GPU)).Set(v)
}

// An entry is its capture's capture.Observer: it turns what the capture
// records into the daemon's series as it is recorded.
var _ capture.Observer = (*entry)(nil)

func (e *entry) RequestStarted() {
	e.sent.Add(1)
	e.m.inFlight.WithLabelValues(e.id).Inc()
}

func (e *entry) RequestDone(r *model.Request) {
	e.done.Add(1)
	if r.Status != model.StatusOK {
		e.failed.Add(1)
	}
	e.m.inFlight.WithLabelValues(e.id).Dec()
	e.m.requests.WithLabelValues(e.id, r.Status).Inc()
	e.m.latency.WithLabelValues(e.id).Observe(r.LatencyS)
}

func (e *entry) ProbeRecord(probeName, file string, rec any) {
	e.m.records.WithLabelValues(e.id, probeName).Inc()
	switch r := rec.(type) {
	case *bundle.GPURecord:
		e.gpu(r)
	case bundle.SchedRecord:
		e.sched(r)
	case bundle.CUDARecord:
		e.cuda(r)
	}
}

// sched sets a thread's CPU, and from the sched probe's lines (not the
// proc probe's) adds its run-queue waits.
func (e *entry) sched(r bundle.SchedRecord) {
	l := []string{e.id, strconv.Itoa(r.PID), strconv.Itoa(r.TID), r.Name}
	e.m.threadCPU.WithLabelValues(l...).Set(r.Utilization)
	e.m.threadCPUs.WithLabelValues(l...).Add(r.CPUSec)
	if r.SchedRunq != nil {
		e.m.runq.add(e.id, r.RunqHist, r.RunqWaitSec)
	}
}

// cuda adds one thread's launches of one symbol to the period's rate; the
// rate gauge is the sum over the threads whose records share the period.
func (e *entry) cuda(r bundle.CUDARecord) {
	e.m.cudaLaunch.WithLabelValues(e.id, r.Symbol).Add(float64(r.Calls))
	e.cudaMu.Lock()
	defer e.cudaMu.Unlock()
	key := r.Level + "/" + strconv.Itoa(r.Repeat)
	if key != e.cudaKey {
		for sym := range e.cudaRate { // a symbol not called in this period reads 0, not the last one's rate
			e.m.cudaRate.WithLabelValues(e.id, sym).Set(0)
		}
		e.cudaKey, e.cudaRate = key, map[string]float64{}
	}
	e.cudaRate[r.Symbol] += r.PerSec
	e.m.cudaRate.WithLabelValues(e.id, r.Symbol).Set(e.cudaRate[r.Symbol])
}

func (e *entry) PeriodEnded(probe.Period) {
	e.periods.Add(1)
	e.m.periods.WithLabelValues(e.id).Inc()
}

// runqCollector exposes the sched probe's run-queue histograms (log2 µs
// buckets, summed over threads and periods) as Prometheus histograms.
type runqCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	h    map[string]*runqHist
}

type runqHist struct {
	buckets []uint64 // per bucket, not cumulative
	sumS    float64
}

func (c *runqCollector) add(id string, hist []uint64, waitS float64) {
	if len(hist) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.h[id]
	if h == nil {
		h = &runqHist{}
		c.h[id] = h
	}
	h.buckets = append(h.buckets, make([]uint64, max(0, len(hist)-len(h.buckets)))...) // grown to hist's length
	for k, n := range hist {
		h.buckets[k] += n
	}
	h.sumS += waitS
}

func (c *runqCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *runqCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, h := range c.h {
		cum := map[float64]uint64{}
		var n uint64
		for k, b := range h.buckets {
			n += b
			cum[sched.RunqBucketUpperUs(k)/1e6] = n
		}
		ch <- prometheus.MustNewConstHistogram(c.desc, n, h.sumS, cum, id)
	}
}
