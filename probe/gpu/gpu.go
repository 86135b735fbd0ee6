package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
)

// File is the bundle file the probe appends to.
const File = bundle.GPUFile

// Defaults for Config's zero values, and the longest poll interval (the
// power-sample buffer holds ~2.4 s).
const (
	DefaultInterval  = 100 * time.Millisecond
	DefaultGPMWindow = time.Second
	MaxInterval      = time.Second
	pidRefresh       = time.Second
)

var _ probe.Probe = (*Probe)(nil)

// Config configures a Probe.
type Config struct {
	// GPUs are the NVML indices to sample; nil or empty: all.
	GPUs []int
	// Interval is the poll period (DefaultInterval when zero, at most
	// MaxInterval).
	Interval time.Duration
	// GPMWindow is the window of one GPM record (DefaultGPMWindow when
	// zero).
	GPMWindow time.Duration
	// PCIe turns on PCIe throughput records. NVML blocks ~20 ms per
	// counter, so they are polled from a goroutine of their own.
	PCIe bool
	// Lib is the NVML to use; nil: the system's libnvidia-ml.so.1.
	Lib nvml.Interface
}

// Stats counts what the poller did.
type Stats struct {
	Polls   int
	Records int
	// Errors counts failed NVML calls by call name. A call that answers
	// ERROR_NOT_SUPPORTED is counted once and not made again for that GPU.
	Errors    map[string]int
	LastError string
}

// gpuState is one sampled GPU; only the goroutine that polls it touches
// its NVML fields.
type gpuState struct {
	info                          DeviceInfo
	dev                           device
	lastUtil, lastPower, lastProc uint64 // newest NVML timestamps seen (µs)
	gpm                           [2]nvml.GpmSample
	gpmAt                         time.Time       // when gpm[0] was taken; zero: not yet
	off                           map[string]bool // kinds turned off; loop goroutine only
	pcieOff                       bool            // pcie goroutine only
}

type period struct {
	p          probe.Period
	start, end int64 // end 0: open
	acc        map[int]*periodAcc
}

// Probe samples NVML. Create it with New; it implements probe.Probe.
type Probe struct {
	cfg Config

	mu      sync.Mutex // guards the fields below
	lib     library
	gpus    []*gpuState
	out     probe.Sink
	target  probe.Target
	pids    map[int]bool
	offset  offsetEstimate
	cur     *period
	stats   Stats
	loopErr error
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	flush   chan chan struct{}

	pidsAt time.Time // when pids was refreshed; loop goroutine only
}

// New returns a probe that does nothing until Start.
func New(cfg Config) *Probe {
	cfg.Interval = min(cmp.Or(max(cfg.Interval, 0), DefaultInterval), MaxInterval)
	cfg.GPMWindow = cmp.Or(max(cfg.GPMWindow, 0), DefaultGPMWindow)
	return &Probe{cfg: cfg}
}

// Name returns "gpu".
func (p *Probe) Name() string { return "gpu" }

// Start initialises NVML, opens the configured GPUs, writes one device
// record per GPU and starts polling. It returns an error wrapping
// probe.ErrNotSupported (a *NoNVMLError, "no NVML: <reason>") when NVML
// cannot be initialised, or when it sees no GPU. NVML calls run on their
// own goroutine; Start gives up when ctx ends.
func (p *Probe) Start(ctx context.Context, t probe.Target, out probe.Sink) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("gpu: already started")
	}
	p.mu.Unlock()
	var lib library = p.cfg.Lib
	if p.cfg.Lib == nil {
		lib = nvml.New()
	}
	if err := initLib(ctx, lib); err != nil {
		return err
	}
	type opened struct {
		gpus   []*gpuState
		driver string
		err    error
	}
	startUs := uint64(time.Now().UnixMicro())
	res, err := within(ctx, func() opened {
		var o opened
		o.driver, _ = lib.SystemGetDriverVersion()
		devs, infos, err := openDevices(lib, p.cfg.GPUs)
		if err != nil {
			o.err = err
			return o
		}
		for i, d := range devs {
			g := &gpuState{info: infos[i], dev: d, off: map[string]bool{},
				lastUtil: startUs, lastPower: startUs, lastProc: startUs}
			for i := range g.gpm { // GPM is off when a sample cannot be allocated
				if !g.info.GPM {
					break
				}
				s, r := lib.GpmSampleAlloc()
				if r != nvml.SUCCESS {
					g.off[bundle.GPUKindGPM] = true
					break
				}
				g.gpm[i] = s
			}
			o.gpus = append(o.gpus, g)
		}
		return o
	}, func(o opened) { freeAll(lib, o.gpus) })
	if err == nil && res.err != nil {
		err = res.err
		freeAll(lib, res.gpus)
	}
	if err != nil {
		return fmt.Errorf("gpu: opening devices: %w", err)
	}
	now := time.Now().UnixNano()
	for _, g := range res.gpus {
		rec := &bundle.GPURecord{GPUHead: bundle.GPUHead{TS: now, GPU: g.info.Index, Kind: bundle.GPUKindDevice}, GPUDevice: &bundle.GPUDevice{
			Name: g.info.Name, UUID: g.info.UUID, GPM: g.info.GPM && !g.off[bundle.GPUKindGPM], Driver: res.driver}}
		if err := out.Append(File, rec); err != nil {
			freeAll(lib, res.gpus)
			return fmt.Errorf("gpu: %w", err)
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.lib, p.gpus, p.out, p.target = lib, res.gpus, out, t
	p.cancel, p.done, p.flush = cancel, make(chan struct{}), make(chan chan struct{})
	p.stats.Errors = map[string]int{}
	p.started = true
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.loop(loopCtx) }()
	if p.cfg.PCIe {
		wg.Add(1)
		go func() { defer wg.Done(); p.pcieLoop(loopCtx) }()
	}
	go func() {
		wg.Wait()
		freeAll(lib, res.gpus)
		close(p.done)
	}()
	return nil
}

// freeAll frees the GPM samples and shuts NVML down.
func freeAll(lib library, gpus []*gpuState) {
	for _, g := range gpus {
		for i, s := range g.gpm {
			if s != nil {
				s.Free()
				g.gpm[i] = nil
			}
		}
	}
	lib.Shutdown()
}

// Begin starts a pass: samples whose timestamp falls between the pass's
// start (p.StartUnixNs, or now when zero) and its end count in its summary.
func (p *Probe) Begin(per probe.Period) {
	start := cmp.Or(per.StartUnixNs, time.Now().UnixNano())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = &period{p: per, start: start, acc: map[int]*periodAcc{}}
	for _, g := range p.gpus {
		p.cur.acc[g.info.Index] = &periodAcc{}
	}
}

// End closes the pass (at p.EndUnixNs, or now when zero), asks the poller
// for one more poll so that samples up to the end are in, and writes one
// period record per GPU. When ctx ends before the poll is done it writes
// the summary of what it has and returns ctx's error with it.
func (p *Probe) End(ctx context.Context, per probe.Period) error {
	end := cmp.Or(per.EndUnixNs, time.Now().UnixNano())
	p.mu.Lock()
	cur := p.cur
	if cur == nil {
		p.mu.Unlock()
		return errors.New("gpu: End without Begin")
	}
	cur.end = end
	p.mu.Unlock()

	flushErr := p.requestPoll(ctx)

	p.mu.Lock()
	p.cur = nil
	out, loopErr := p.out, p.loopErr
	p.mu.Unlock()
	errs := []error{flushErr, loopErr}
	for _, i := range slices.Sorted(maps.Keys(cur.acc)) {
		rec := cur.acc[i].summary(i, cur.p.Level, cur.p.Repeat, cur.p.Warmup, cur.start, end)
		if err := out.Append(File, rec); err != nil {
			errs = append(errs, fmt.Errorf("gpu: %w", err))
		}
	}
	return errors.Join(errs...)
}

// requestPoll makes the poller poll now and waits for it, or for ctx.
func (p *Probe) requestPoll(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case p.flush <- ack:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gpu: poller busy (an NVML call did not return): %w", ctx.Err())
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gpu: final poll (an NVML call did not return): %w", ctx.Err())
	}
}

// Stop polls once more, stops the pollers, frees the GPM samples and shuts
// NVML down. When an NVML call does not return before ctx ends, Stop
// returns ctx's error and the goroutine is left to finish on its own.
func (p *Probe) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		return nil
	}
	p.started = false
	p.mu.Unlock()
	pollErr := p.requestPoll(ctx)
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return errors.Join(pollErr, fmt.Errorf("gpu: stopping (an NVML call did not return): %w", ctx.Err()))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(pollErr, p.loopErr)
}

// ClockOffset returns the estimated offset of NVML's sample timestamps
// from the system clock (NVML minus system, ns), measured at every power
// poll; ok is false until one was measured. The estimate is a lower bound
// that is low by at most the age of the freshest sample seen (~20 ms, the
// power-sample cadence, usually much less after a few polls).
func (p *Probe) ClockOffset() (ns int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offset.ns, p.offset.ok
}

func (p *Probe) loop(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	p.poll(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case ack := <-p.flush:
			p.poll(time.Now())
			close(ack)
		case now := <-tick.C:
			p.poll(now)
		}
	}
}

func (p *Probe) pcieLoop(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, g := range p.gpus {
			if ctx.Err() != nil {
				return
			}
			if g.pcieOff {
				continue
			}
			tx, r1 := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)
			rx, r2 := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES)
			if r := cmp.Or(r1, r2); r != nvml.SUCCESS { // SUCCESS is 0: the first failure
				if r == nvml.ERROR_NOT_SUPPORTED {
					g.pcieOff = true
				}
				p.count(g, "GetPcieThroughput", r)
				continue
			}
			p.emit(&bundle.GPURecord{GPUHead: bundle.GPUHead{TS: time.Now().UnixNano(), GPU: g.info.Index, Kind: bundle.GPUKindPCIe}, GPUPCIe: &bundle.GPUPCIe{TxKiBs: tx, RxKiBs: rx}})
		}
	}
}

// callFailed counts a failed call of the loop goroutine;
// ERROR_NOT_SUPPORTED turns kind off for g.
func (p *Probe) callFailed(g *gpuState, kind, call string, r nvml.Return) {
	if r == nvml.ERROR_NOT_SUPPORTED {
		g.off[kind] = true
	}
	p.count(g, call, r)
}

// count counts a failed call.
func (p *Probe) count(g *gpuState, call string, r nvml.Return) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Errors[call]++
	p.stats.LastError = fmt.Sprintf("GPU %d: %s: %v", g.info.Index, call, r)
}

// emit appends rec to the sink and adds it to the open pass's summary.
func (p *Probe) emit(rec *bundle.GPURecord) {
	p.mu.Lock()
	if c := p.cur; c != nil && rec.TS >= c.start && (c.end == 0 || rec.TS <= c.end) {
		if a := c.acc[rec.GPU]; a != nil {
			a.add(rec)
		}
	}
	p.stats.Records++
	out := p.out
	p.mu.Unlock()
	if err := out.Append(File, rec); err != nil {
		p.mu.Lock()
		if p.loopErr == nil {
			p.loopErr = fmt.Errorf("gpu: %w", err)
		}
		p.mu.Unlock()
	}
}

// targetPIDs returns the target's pids, refreshed at most every pidRefresh.
func (p *Probe) targetPIDs(now time.Time, last *time.Time) map[int]bool {
	p.mu.Lock()
	pids, t := p.pids, p.target
	p.mu.Unlock()
	if pids != nil && now.Sub(*last) < pidRefresh {
		return pids
	}
	pids = map[int]bool{}
	if t.PID > 0 {
		pids[t.PID] = true
	}
	if t.Children != nil {
		for _, c := range t.Children() {
			pids[c] = true
		}
	}
	*last = now
	p.mu.Lock()
	p.pids = pids
	p.mu.Unlock()
	return pids
}

// poll reads every kind once from every GPU. Only the loop goroutine
// calls it.
func (p *Probe) poll(now time.Time) {
	p.mu.Lock()
	p.stats.Polls++
	p.mu.Unlock()
	pids := p.targetPIDs(now, &p.pidsAt)
	for _, g := range p.gpus {
		p.pollSamples(g, bundle.GPUKindUtil, nvml.GPU_UTILIZATION_SAMPLES, &g.lastUtil)
		p.pollSamples(g, bundle.GPUKindPower, nvml.TOTAL_POWER_SAMPLES, &g.lastPower)
		p.pollState(g)
		if len(pids) > 0 {
			p.pollProc(g, pids)
		}
		if g.info.GPM && !g.off[bundle.GPUKindGPM] {
			p.pollGPM(g)
		}
	}
}

// pollSamples reads the samples of st newer than *last and emits them.
func (p *Probe) pollSamples(g *gpuState, kind string, st nvml.SamplingType, last *uint64) {
	if g.off[kind] {
		return
	}
	vt, ss, r := g.dev.GetSamples(st, *last)
	after := time.Now()
	if r == nvml.ERROR_NOT_FOUND {
		return // no sample newer than *last
	}
	if r != nvml.SUCCESS {
		p.callFailed(g, kind, "GetSamples", r)
		return
	}
	recs, newest := decodeSamples(g.info.Index, kind, vt, ss, *last)
	if newest > *last {
		*last = newest
		if kind == bundle.GPUKindPower {
			p.mu.Lock()
			p.offset.observe(newest, after)
			p.mu.Unlock()
		}
	}
	for _, rec := range recs {
		p.emit(rec)
	}
}

// decodeSamples turns NVML samples newer than last into records, sorted by
// time, and returns the newest timestamp. Power comes in milliwatts.
func decodeSamples(gpu int, kind string, vt nvml.ValueType, ss []nvml.Sample, last uint64) ([]*bundle.GPURecord, uint64) {
	sort.Slice(ss, func(i, j int) bool { return ss[i].TimeStamp < ss[j].TimeStamp })
	var recs []*bundle.GPURecord
	newest := last
	for _, s := range ss {
		if s.TimeStamp <= last || s.TimeStamp == 0 {
			continue // NVML's buffer can hand back the boundary sample
		}
		v, ok := Value(vt, s.SampleValue)
		if !ok {
			continue
		}
		newest = max(newest, s.TimeStamp)
		r := &bundle.GPURecord{GPUHead: bundle.GPUHead{TS: usToNs(s.TimeStamp), GPU: gpu, Kind: kind}}
		switch kind {
		case bundle.GPUKindUtil:
			r.GPUUtil = &bundle.GPUUtil{UtilPct: v}
		case bundle.GPUKindPower:
			r.GPUPower = &bundle.GPUPower{PowerW: v / 1000}
		}
		recs = append(recs, r)
	}
	return recs, newest
}

// pollState reads memory, clocks, temperature and throttle reasons.
func (p *Probe) pollState(g *gpuState) {
	idx := g.info.Index
	if !g.off[bundle.GPUKindMem] {
		if m, r := g.dev.GetMemoryInfo(); r == nvml.SUCCESS {
			p.emit(&bundle.GPURecord{GPUHead: bundle.GPUHead{TS: time.Now().UnixNano(), GPU: idx, Kind: bundle.GPUKindMem}, GPUMem: &bundle.GPUMem{UsedMiB: float64(m.Used) / (1 << 20), TotalMiB: float64(m.Total) / (1 << 20)}})
		} else {
			p.callFailed(g, bundle.GPUKindMem, "GetMemoryInfo", r)
		}
	}
	if !g.off[bundle.GPUKindClock] {
		sm, r1 := g.dev.GetClockInfo(nvml.CLOCK_SM)
		mem, r2 := g.dev.GetClockInfo(nvml.CLOCK_MEM)
		if r := cmp.Or(r1, r2); r == nvml.SUCCESS {
			p.emit(&bundle.GPURecord{GPUHead: bundle.GPUHead{TS: time.Now().UnixNano(), GPU: idx, Kind: bundle.GPUKindClock}, GPUClock: &bundle.GPUClock{SMMHz: sm, MemMHz: mem}})
		} else {
			p.callFailed(g, bundle.GPUKindClock, "GetClockInfo", r)
		}
	}
	if !g.off[bundle.GPUKindTemp] {
		if c, r := g.dev.GetTemperature(nvml.TEMPERATURE_GPU); r == nvml.SUCCESS {
			p.emit(&bundle.GPURecord{GPUHead: bundle.GPUHead{TS: time.Now().UnixNano(), GPU: idx, Kind: bundle.GPUKindTemp}, GPUTemp: &bundle.GPUTemp{TempC: c}})
		} else {
			p.callFailed(g, bundle.GPUKindTemp, "GetTemperature", r)
		}
	}
	if !g.off[bundle.GPUKindThrottle] {
		if m, r := g.dev.GetCurrentClocksEventReasons(); r == nvml.SUCCESS {
			p.emit(&bundle.GPURecord{GPUHead: bundle.GPUHead{TS: time.Now().UnixNano(), GPU: idx, Kind: bundle.GPUKindThrottle}, GPUThrottle: &bundle.GPUThrottle{Reasons: m, Names: ThrottleNames(m)}})
		} else {
			p.callFailed(g, bundle.GPUKindThrottle, "GetCurrentClocksEventReasons", r)
		}
	}
}

// pollProc reads per-process utilization samples newer than g.lastProc
// and emits them: the target's processes', and other processes' marked
// Other (a co-tenant on the target's GPU; docs/VALIDITY.md).
func (p *Probe) pollProc(g *gpuState, pids map[int]bool) {
	if g.off[bundle.GPUKindProc] {
		return
	}
	ss, r := g.dev.GetProcessUtilization(g.lastProc)
	if r == nvml.ERROR_NOT_FOUND || (r == nvml.SUCCESS && len(ss) == 0) {
		return
	}
	if r != nvml.SUCCESS {
		p.callFailed(g, bundle.GPUKindProc, "GetProcessUtilization", r)
		return
	}
	recs, newest := filterProc(g.info.Index, ss, pids, g.lastProc)
	g.lastProc = newest
	for _, rec := range recs {
		p.emit(rec)
	}
}

// filterProc keeps the samples newer than last, sorted by time, those
// of processes outside pids marked Other, and returns the newest
// timestamp of all samples.
func filterProc(gpu int, ss []nvml.ProcessUtilizationSample, pids map[int]bool, last uint64) ([]*bundle.GPURecord, uint64) {
	sort.Slice(ss, func(i, j int) bool { return ss[i].TimeStamp < ss[j].TimeStamp })
	var recs []*bundle.GPURecord
	newest := last
	for _, s := range ss {
		if s.TimeStamp <= last {
			continue
		}
		newest = max(newest, s.TimeStamp)
		recs = append(recs, &bundle.GPURecord{GPUHead: bundle.GPUHead{TS: usToNs(s.TimeStamp), GPU: gpu, Kind: bundle.GPUKindProc}, GPUProc: &bundle.GPUProc{
			PID: int(s.Pid), SMPct: s.SmUtil, MemPct: s.MemUtil, EncPct: s.EncUtil, DecPct: s.DecUtil, Other: !pids[int(s.Pid)]}})
	}
	return recs, newest
}

// GPM metrics read per window, in the order of bundle.GPUGPM's fields.
var gpmMetrics = []nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
}

// pollGPM takes the window's first GPM sample, or, once the window has
// passed, the second one, and emits the metrics between the two; the
// second sample starts the next window.
func (p *Probe) pollGPM(g *gpuState) {
	if g.gpmAt.IsZero() {
		if r := g.dev.GpmSampleGet(g.gpm[0]); r != nvml.SUCCESS {
			p.callFailed(g, bundle.GPUKindGPM, "GpmSampleGet", r)
			return
		}
		g.gpmAt = time.Now()
		return
	}
	if time.Since(g.gpmAt) < p.cfg.GPMWindow {
		return
	}
	if r := g.dev.GpmSampleGet(g.gpm[1]); r != nvml.SUCCESS {
		p.callFailed(g, bundle.GPUKindGPM, "GpmSampleGet", r)
		return
	}
	at := time.Now()
	mg := nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: g.gpm[0], Sample2: g.gpm[1]}
	for i, id := range gpmMetrics {
		mg.Metrics[i].MetricId = uint32(id)
	}
	r := p.lib.GpmMetricsGet(&mg)
	window := at.Sub(g.gpmAt)
	g.gpm[0], g.gpm[1] = g.gpm[1], g.gpm[0]
	g.gpmAt = at
	if r != nvml.SUCCESS {
		p.callFailed(g, bundle.GPUKindGPM, "GpmMetricsGet", r)
		return
	}
	m := &bundle.GPUGPM{WindowS: window.Seconds()}
	dst := []**float64{&m.SMActivePct, &m.SMOccupancyPct, &m.TensorActivePct, &m.DRAMBWPct}
	for i, v := range mg.Metrics[:len(gpmMetrics)] {
		if nvml.Return(v.NvmlReturn) == nvml.SUCCESS {
			*dst[i] = &v.Value
		}
	}
	head := bundle.GPUHead{TS: at.UnixNano(), GPU: g.info.Index, Kind: bundle.GPUKindGPM}
	p.emit(&bundle.GPURecord{GPUHead: head, GPUGPM: m})
}
