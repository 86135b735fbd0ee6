package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// Per-request attribution: every nanosecond of a request's client latency
// is assigned to exactly one state, from the stage boundaries a preset
// derives (server clock), the client's own timestamps (client clock) and,
// for the time the request spends in the running batch, what the serving
// thread was doing then (the sched probe's per-thread time bins, and the
// cuda probe's time inside synchronize calls where a capture has them).
// docs/ANALYSIS.md ("Where the time went") describes the rules.

// The states, in the order the tables print them.
const (
	StateConnect      = "connect"
	StateUpload       = "upload"
	StateBuildWait    = "build wait"
	StateBuild        = "build"
	StateAdmission    = "admission wait"
	StateHost         = "running: host work"
	StateGPUWait      = "running: GPU wait"
	StateRunnable     = "running: runnable"
	StateOffCPU       = "running: off-CPU"
	StateNoThread     = "running: no thread data"
	StateStall        = "first-forward stall"
	StateDelivery     = "response delivery"
	StateUnattributed = Unattributed
)

// AttributionStates are the states in order; RequestStates.States and
// LevelStates.States are indexed like it.
var AttributionStates = []string{StateConnect, StateUpload, StateBuildWait, StateBuild, StateAdmission,
	StateHost, StateGPUWait, StateRunnable, StateOffCPU, StateNoThread,
	StateStall, StateDelivery, StateUnattributed}

const (
	sConnect = iota
	sUpload
	sBuildWait
	sBuild
	sAdmission
	sHost
	sGPUWait
	sRunnable
	sOffCPU
	sNoThread
	sStall
	sDelivery
	sUnattributed
	// NumStates is len(AttributionStates).
	NumStates
)

// DefaultServingThread is the name of the thread that runs the batch when
// no span or event names it: the reference server's scheduler (its whisper
// engine's too).
const DefaultServingThread = "asr-sched"

// binsLine is a bundle.ThreadBins line as read: the arrays are parsed
// apart, faster than encoding/json parses numbers.
type binsLine struct {
	bundle.ThreadBins
	OnCPU json.RawMessage `json:"oncpu_us"`
	Runq  json.RawMessage `json:"runq_us"`
	Sync  json.RawMessage `json:"sync_us"`
}

// numbers parses a JSON array of numbers.
func numbers(raw json.RawMessage) ([]int, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	if b[0] != '[' || b[len(b)-1] != ']' {
		return nil, fmt.Errorf("want an array of numbers, got %.20s", b)
	}
	b = b[1 : len(b)-1]
	out := make([]int, 0, bytes.Count(b, []byte{','})+1)
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	for tok := range bytes.SplitSeq(b, []byte{','}) {
		tok = bytes.TrimSpace(tok)
		v, ok := int64(0), len(tok) > 0
		for _, c := range tok {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = 10*v + int64(c-'0')
		}
		if ok {
			out = append(out, int(v))
			continue
		}
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return nil, fmt.Errorf("want an array of numbers: %w", err)
		}
		out = append(out, int(math.Round(f)))
	}
	return out, nil
}

// ReadThreadBins reads the bundle's per-thread time bins: sched_bins.jsonl
// (eBPF), else proc_bins.jsonl (the proc probe's, unprivileged), and
// cuda_bins.jsonl (any may be absent: none), dropping a truncated last
// line. source is the file the thread bins came from ("" for none).
func ReadThreadBins(dir string) (sched, cuda []bundle.ThreadBins, source string, err error) {
	read := func(name string) ([]bundle.ThreadBins, error) {
		var out []bundle.ThreadBins
		_, err := bundle.ReadJSONL(filepath.Join(dir, name), func(l binsLine) error {
			b := l.ThreadBins
			var errs [3]error
			b.OnCPUUs, errs[0] = numbers(l.OnCPU)
			b.RunqUs, errs[1] = numbers(l.Runq)
			b.SyncUs, errs[2] = numbers(l.Sync)
			out = append(out, b)
			return cmp.Or(errs[:]...)
		})
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return out, err
	}
	for _, name := range []string{bundle.SchedBinsFile, bundle.ProcBinsFile} {
		if sched, err = read(name); err != nil {
			return nil, nil, "", err
		}
		if len(sched) > 0 {
			source = name
			break
		}
	}
	cuda, err = read(bundle.CUDABinsFile)
	return sched, cuda, source, err
}

// ReadGPU reads the gpu.jsonl at path (absent: none) once: its util
// samples (the share of each sample period, ending at TS, during which a
// kernel ran) and its per-process samples (kind proc).
func ReadGPU(path string) (util, procs []bundle.GPURecord, err error) {
	all, err := bundle.ReadAll[bundle.GPURecord](path)
	util = slices.DeleteFunc(slices.Clone(all), func(r bundle.GPURecord) bool { return r.GPUUtil == nil })
	return util, slices.DeleteFunc(all, func(r bundle.GPURecord) bool { return r.GPUProc == nil }), err
}

// AttributionInput is what Attribute reads.
type AttributionInput struct {
	Reqs *columns.RequestCols
	Rows *columns.StageRows // the preset's stage boundaries (Derive's)
	// Levels is the order of the level rows (levels without measured
	// requests are left out).
	Levels      []string
	Sched, CUDA []bundle.ThreadBins
	GPU         []bundle.GPURecord
	// Worker is each request's worker behind a router (nil: one server):
	// first forwards stall the requests of their own worker only.
	Worker []string
	// Thread is the serving thread's name ("": DefaultServingThread).
	Thread string
	// Segments asks for each request's states placed in time too
	// (RequestStates.Segments): about twice Attribute's time and memory.
	Segments bool
	// RequestTID is, per request, the thread a span of its running stage
	// names (0: none); RequestPID the process its running stage's events
	// name (0: none). Either may be nil.
	RequestTID, RequestPID []int64
}

// RequestStates is one request's attribution: States in seconds, indexed
// as AttributionStates, adding up to LatencyS.
type RequestStates struct {
	Index     int
	Level     string
	Repeat    int
	Warmup    bool
	LatencyS  float64
	Telemetry bool // the preset found the request's stages
	States    [NumStates]float64
	// AdmissionAtCapS is the part of its admission wait during which its
	// running batch was at the capture's cap (Attribution.RunCap).
	AdmissionAtCapS float64
	// AdmissionInFFS is the part of its admission wait during which a
	// first forward (another request's, on its pass and worker) ran.
	AdmissionInFFS float64
	// Segments place the states in the request's time, on the client's
	// clock: they tile [end − latency, end) in order, their lengths per
	// state adding up to States. A phase of the request (the upload, a
	// stage, a gap between stages, the delivery) is one segment per state
	// it holds; within a running stage, whose states interleave bin by
	// bin (and with other requests' first forwards), they are laid in
	// AttributionStates order. None without a client clock, or unless
	// AttributionInput.Segments asked for them.
	Segments []Segment
}

// Segment is a stretch of one request's latency in one state
// (AttributionStates[State]), in unix ns on the client's clock.
type Segment struct {
	State       int
	StartUnixNs int64
	EndUnixNs   int64
}

// StateStat is one state over a level's measured requests: its share of
// their summed client latency, and its mean and p95 per request (ms).
type StateStat struct {
	Share, MeanMs, P95Ms float64
}

// PassThread is the serving thread of one pass, how it was found (How:
// "span thread.id", "named NAME", "busiest while running"), and its on-CPU
// share over the bins in which a request was running (RunningUtil, over
// RunningBins bins) and over the whole pass (PassUtil, over Bins).
type PassThread struct {
	Level                 string
	Repeat                int
	Warmup                bool `star:"-"`
	PID, TID              int64
	Name, How             string
	RunningUtil, PassUtil float64
	RunningBins, Bins     int
}

// GPUBreakdown is a level's GPU time over the running bins, seen from the
// serving thread: Busy is NVML's utilization; the idle rest is split by
// what the thread did in the same bins (host work, waiting in a CUDA
// synchronize, runnable, off-CPU). The five add up to 1.
type GPUBreakdown struct {
	GPU                                                int
	Bins                                               int
	Busy, IdleHost, IdleGPUWait, IdleRunnable, IdleOff float64
}

// LevelStates is one level's attribution over its measured (non-warmup,
// successful) requests.
type LevelStates struct {
	Level         string
	N, Missing    int // measured requests; those without the preset's telemetry
	LatencyMeanMs float64
	States        [NumStates]StateStat
	// Threads are the serving threads of the level's scored passes (none
	// without sched bins). RunningUtil and PassUtil pool their bins.
	Threads               []PassThread
	RunningUtil, PassUtil float64
	GPU                   *GPUBreakdown // nil without util samples or thread bins
	// AdmissionAtCap is the share of the level's admission wait during
	// which the request's running batch (its pass's, its worker's) held
	// RunCap requests or more; RunCap is the most that batch ever held in
	// the capture (per worker: the largest). 0 without admission waits.
	AdmissionAtCap float64
	RunCap         int
	// AdmissionInFF is the share of the level's admission wait during
	// which another request's first forward ran on the request's pass and
	// worker: a scheduler that admits between first forwards, or runs
	// them one after another, keeps the queue waiting behind them.
	AdmissionInFF float64
	// Connects: the level's measured requests that opened a connection of
	// their own (a connect state); SlowConnects: those whose connection
	// took SlowConnectS or more (a SYN sent again).
	Connects, SlowConnects int
}

// Attribution is Attribute's answer.
type Attribution struct {
	// ClockOffsetNs is the server's clock minus the client's that placed
	// the server's stages inside the client's latency; ClockHow says how
	// it was found.
	ClockOffsetNs int64
	ClockHow      string
	Requests      []RequestStates // every successful request, warmup included, in order
	Levels        []LevelStates
	Passes        []PassThread // every pass's serving thread, in run order
	// RunCap is the most requests any running batch held (per pass and
	// worker) in the capture.
	RunCap int
}

// occStep is the running batch's size n from time t on (until the next).
type occStep struct {
	t int64
	n int
}

// occupancySteps is how many of the spans were open, as steps in time (a
// span of no length makes a step of no change).
func occupancySteps(spans []interval) []occStep {
	es := make([]occStep, 0, 2*len(spans)) // each span's start (n +1) and end (n −1)
	for _, v := range spans {
		if v.b >= v.a {
			es = append(es, occStep{v.a, 1}, occStep{v.b, -1})
		}
	}
	slices.SortFunc(es, func(x, y occStep) int { return cmp.Compare(x.t, y.t) })
	out := make([]occStep, 0, len(es))
	n := 0
	for _, e := range es {
		n += e.n
		if k := len(out); k > 0 && out[k-1].t == e.t {
			out[k-1].n = n
			continue
		}
		out = append(out, occStep{e.t, n})
	}
	return out
}

// atCap is how much of iv (ns) the steps stood at cap or more.
func atCap(steps []occStep, cap int, iv interval) float64 {
	if cap < 1 || iv.b <= iv.a {
		return 0
	}
	i, _ := slices.BinarySearchFunc(steps, iv.a, func(s occStep, t int64) int { return cmp.Compare(s.t, t) })
	if i > 0 && (i == len(steps) || steps[i].t > iv.a) {
		i--
	}
	var d int64
	for ; i < len(steps) && steps[i].t < iv.b; i++ {
		end := iv.b
		if i+1 < len(steps) {
			end = min(end, steps[i+1].t)
		}
		if steps[i].n >= cap {
			d += max(0, end-max(steps[i].t, iv.a))
		}
	}
	return float64(d)
}

// interval is [a, b) in unix ns.
type interval struct{ a, b int64 }

// the stage kinds that attribution reads
const (
	kReceive = iota
	kBuildWait
	kBuild
	kBuildToQueued
	kQueued
	kFirstForward
	kDecode
	kTotal
	nKinds
)

// kindOf maps a preset's stage names to what attribution makes of them.
var kindOf = map[string]int{
	"receive": kReceive, "build wait": kBuildWait, "build": kBuild, "build→queued": kBuildToQueued,
	"queued→scheduled": kQueued, "first forward": kFirstForward, "decode tail": kDecode, Total: kTotal,
}

// segState is the state of each segment kind (the running ones are split).
var segState = [nKinds]int{kReceive: sUpload, kBuildWait: sBuildWait, kBuild: sBuild,
	kBuildToQueued: sAdmission, kQueued: sAdmission}

type reqBounds struct {
	iv  [nKinds]interval
	has uint16 // bit k: kind k has bounds
}

func (r *reqBounds) ok(k int) bool { return r.has&(1<<k) != 0 }

// binLine is one bundle.ThreadBins record made ready for integration: per bin
// (ns) host work, GPU wait, runnable and on-CPU, as prefix sums.
type binLine struct {
	start, bin int64
	n          int
	p          [][4]float64 // len n+1: p[k] sums bins 0..k-1
}

const (
	cHost = iota
	cGPU
	cRunq
	cOn
)

func (l *binLine) end() int64 { return l.start + int64(l.n)*l.bin }

// cum returns the prefix sums at t (linear inside a bin), t clamped to
// the line.
func (l *binLine) cum(t int64) [4]float64 {
	if t <= l.start {
		return [4]float64{}
	}
	if t >= l.end() {
		return l.p[l.n]
	}
	off := t - l.start
	k := int(off / l.bin)
	f := float64(off-int64(k)*l.bin) / float64(l.bin)
	a, b := &l.p[k], &l.p[k+1]
	return [4]float64{a[0] + f*(b[0]-a[0]), a[1] + f*(b[1]-a[1]), a[2] + f*(b[2]-a[2]), a[3] + f*(b[3]-a[3])}
}

// thread is one thread's bins over the capture, records in time order.
type thread struct {
	pid, tid int64
	name     string
	lines    []*binLine
}

type split struct{ host, gpu, runq, on, cov float64 }

// integrate sums the thread's bins over [a, b): cov is the part of it that
// bins cover (none of a nil thread).
func (th *thread) integrate(a, b int64) (s split) {
	if th == nil || b <= a {
		return s
	}
	i := sort.Search(len(th.lines), func(i int) bool { return th.lines[i].end() > a })
	for ; i < len(th.lines) && th.lines[i].start < b; i++ {
		l := th.lines[i]
		lo, hi := max(a, l.start), min(b, l.end())
		if hi <= lo {
			continue
		}
		x, y := l.cum(lo), l.cum(hi)
		s = s.plus(split{y[cHost] - x[cHost], y[cGPU] - x[cGPU], y[cRunq] - x[cRunq], y[cOn] - x[cOn], float64(hi - lo)})
	}
	return s
}

// concentrate rewrites the thread's host work, GPU wait and runnable time
// in every bin that run (merged) covers only in part, so that
// integrating over the covered part gives what the thread did in the bin
// up to the covered length, the rest of it off-CPU: the serving thread
// works for the running batch, and sleeps when it has none. The values
// then hold only over run. On-CPU (cOn) stays as measured.
func (th *thread) concentrate(run []interval) {
	for _, l := range th.lines {
		j := sort.Search(len(run), func(j int) bool { return run[j].b > l.start })
		var acc, prev [4]float64 // the new prefix; the old one at k
		B := float64(l.bin)
		for k := 0; k < l.n; k++ {
			var v [4]float64
			for c := range v {
				v[c] = l.p[k+1][c] - prev[c]
			}
			prev = l.p[k+1]
			t0 := l.start + int64(k)*l.bin
			t1 := t0 + l.bin
			cov := covers(run, &j, t0, t1)
			if busy := v[cHost] + v[cGPU] + v[cRunq]; cov > 0 && cov < l.bin && busy > 0 {
				c := float64(cov)
				f := min(busy, c) / busy * B / c
				v[cHost], v[cGPU], v[cRunq] = v[cHost]*f, v[cGPU]*f, v[cRunq]*f
			}
			for c := range acc {
				acc[c] += v[c]
				l.p[k+1][c] = acc[c]
			}
		}
	}
}

// covers is how much of [t0, t1) run (merged) covers; *j, where to
// start in run, moves past what ends by t0 (call it in time order).
func covers(run []interval, j *int, t0, t1 int64) int64 {
	for *j < len(run) && run[*j].b <= t0 {
		*j++
	}
	cov := int64(0)
	for m := *j; m < len(run) && run[m].a < t1; m++ {
		cov += min(run[m].b, t1) - max(run[m].a, t0)
	}
	return cov
}

// newBinLine is a line of n of r's bins, all 0.
func newBinLine(r *bundle.ThreadBins, n int) *binLine {
	return &binLine{start: r.StartUnixNs, bin: int64(r.BinMs) * 1e6, n: n, p: make([][4]float64, n+1)}
}

// threads builds the thread lines: sched records per (pid, tid), with the
// cuda records' sync time of the same thread resampled onto their bins.
func threads(sched, cuda []bundle.ThreadBins) []*thread {
	type key struct{ pid, tid int64 }
	syncs := map[key][]*binLine{} // each thread's cuda records, their sync time as on-CPU
	for i := range cuda {
		r := &cuda[i]
		if r.BinMs <= 0 || len(r.SyncUs) == 0 {
			continue
		}
		l := newBinLine(r, len(r.SyncUs))
		for k, x := range r.SyncUs {
			l.p[k+1][cOn] = l.p[k][cOn] + float64(max(0, x))*1e3
		}
		k := key{int64(r.PID), int64(r.TID)}
		syncs[k] = append(syncs[k], l)
	}
	for _, ls := range syncs {
		slices.SortFunc(ls, func(a, b *binLine) int { return cmp.Compare(a.start, b.start) })
	}
	byKey := map[key]*thread{}
	var out []*thread
	for i := range sched {
		r := &sched[i]
		if r.BinMs <= 0 || len(r.OnCPUUs) == 0 {
			continue
		}
		k := key{int64(r.PID), int64(r.TID)}
		th := byKey[k]
		if th == nil {
			th = &thread{pid: k.pid, tid: k.tid, name: r.Name}
			byKey[k] = th
			out = append(out, th)
		}
		sy := &thread{lines: syncs[k]} // its sync time as on-CPU
		l := newBinLine(r, len(r.OnCPUUs))
		B := float64(l.bin)
		for j := 0; j < l.n; j++ {
			on := min(max(0, float64(r.OnCPUUs[j])*1e3), B)
			rq := 0.0
			if j < len(r.RunqUs) {
				rq = min(max(0, float64(r.RunqUs[j])*1e3), B-on)
			}
			t0 := l.start + int64(j)*l.bin
			g := min(max(0, sy.integrate(t0, t0+l.bin).on), B-rq) // time in sync: on-CPU first, then off-CPU
			gOn := min(g, on)
			a, b := &l.p[j], &l.p[j+1]
			b[cHost], b[cGPU], b[cRunq], b[cOn] = a[cHost]+on-gOn, a[cGPU]+g, a[cRunq]+rq, a[cOn]+on
		}
		th.lines = append(th.lines, l)
	}
	for _, th := range out {
		slices.SortFunc(th.lines, func(a, b *binLine) int { return cmp.Compare(a.start, b.start) })
	}
	return out
}

// merge sorts ivs and merges the overlapping ones.
func merge(ivs []interval) []interval {
	slices.SortFunc(ivs, func(x, y interval) int { return cmp.Compare(x.a, y.a) })
	out := ivs[:0]
	for _, v := range ivs {
		if v.b <= v.a {
			continue
		}
		if n := len(out); n > 0 && v.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, v.b)
			continue
		}
		out = append(out, v)
	}
	return out
}

type passInfo struct {
	running     []interval // union of its requests' running batch time
	lo, hi      int64      // its requests' server window
	th          *thread
	pt          PassThread
	runBins     []runBin
	runOn, runB float64 // the running bins' on-CPU time and length (ns)
	tidVotes    map[int64]int
	pidVotes    map[int64]int
}

// runBin is a bin of the serving thread in which requests were running.
type runBin struct {
	t0, t1               int64
	host, gpu, runq, off float64 // shares of the bin
}

// Attribute assigns every request's client latency to the states.
func Attribute(in AttributionInput) *Attribution {
	rc, rows := in.Reqs, in.Rows
	n := rc.N
	okCode := rc.Status.Code(model.StatusOK)
	// 1. Each request's stage boundaries, one pass over the rows (which
	// are in request order, and in the preset's stage order within one).
	kinds := make([]int, len(rows.Stage.Dict))
	for c, name := range rows.Stage.Dict {
		kinds[c] = -1
		if k, ok := kindOf[name]; ok {
			kinds[c] = k
		}
	}
	// A stage that has durations but never boundaries is a rest() or a
	// gap(): what the telemetry leaves unexplained, or outside the total.
	bounded := make([]bool, len(rows.Stage.Dict))
	for j := 0; j < rows.Len(); j++ {
		bounded[rows.Stage.Codes[j]] = bounded[rows.Stage.Codes[j]] || rows.HasBounds[j]
	}
	bounds := make([]reqBounds, n)
	tele := make([]bool, n)
	for j := 0; j < rows.Len(); {
		i := int(rows.RequestIndex[j])
		from := j
		for j < rows.Len() && int(rows.RequestIndex[j]) == i {
			j++
		}
		if i < 0 || i >= n {
			continue
		}
		tele[i] = true
		b := &bounds[i]
		relay := false
		for r := from; r < j; r++ {
			k := kinds[rows.Stage.Codes[r]]
			if !rows.HasBounds[r] || k < 0 {
				continue
			}
			b.iv[k] = interval{rows.StartUnixNs[r], rows.EndUnixNs[r]}
			b.has |= 1 << k
			if d := b.iv[k].b - b.iv[k].a; k != kTotal && rows.HasDuration[r] && math.Abs(rows.DurationS[r]*1e9-float64(d)) > 1e3 {
				relay = true
			}
		}
		if relay && b.ok(kTotal) {
			// Durations that are not their boundaries' (vLLM's attributes
			// summed over chunks): the stages laid back to back from the
			// total's start, in order.
			t := b.iv[kTotal].a
			b.has &= 1 << kTotal
			for r := from; r < j; r++ {
				c := rows.Stage.Codes[r]
				k := kinds[c]
				if k == kTotal || !rows.HasDuration[r] || rows.Stage.Dict[c] == Router {
					continue
				}
				d := int64(math.Round(max(rows.DurationS[r], 0) * 1e9))
				if k >= 0 && bounded[c] {
					b.iv[k] = interval{t, t + d}
					b.has |= 1 << k
				}
				t += d
			}
		}
	}
	// The server window of each request: its total, else its stages' span.
	window := func(i int) (interval, bool) {
		b := &bounds[i]
		if b.ok(kTotal) {
			return b.iv[kTotal], true
		}
		w := interval{math.MaxInt64, math.MinInt64}
		for k := 0; k < kTotal; k++ {
			if b.ok(k) {
				w.a, w.b = min(w.a, b.iv[k].a), max(w.b, b.iv[k].b)
			}
		}
		return w, b.has&(1<<kTotal-1) != 0 // a stage before the total
	}
	hasClock := len(rc.EndUnixNs) == n
	// The client's window of each request, when it has a clock.
	clientEnd := func(i int) (c0, c1 int64, ok bool) {
		if !hasClock {
			return 0, 0, false
		}
		c1 = rc.EndUnixNs[i]
		l := int64(math.Round(rc.LatencyS[i] * 1e9))
		return c1 - l, c1, c1 > 0 && l > 0
	}
	// 2. The clock offset (server − client).
	out := &Attribution{}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	seen := false
	for i := 0; i < n && hasClock; i++ {
		if rc.Status.Codes[i] != okCode || !tele[i] {
			continue
		}
		w, ok := window(i)
		c0, c1, cok := clientEnd(i)
		if !ok || !cok {
			continue
		}
		seen = true
		hi = min(hi, w.a-c0) // the server cannot start before the client sent
		lo = max(lo, w.b-c1) // nor end after the client had the answer
	}
	const tol = int64(1e6)
	switch {
	case !seen:
		out.ClockHow = "no request has both clocks"
	case lo <= hi && lo-tol <= 0 && 0 <= hi+tol:
		out.ClockOffsetNs = min(max(0, lo), hi)
		out.ClockHow = "the server's and client's clocks agree"
	case lo <= hi:
		out.ClockOffsetNs = hi
		out.ClockHow = "the server's clock differs: placed so that the quickest request reached the server at once"
	case lo-tol <= 0 && 0 <= hi+tol:
		out.ClockHow = "the server's and client's clocks agree"
	default:
		out.ClockOffsetNs = lo + (hi-lo)/2
		out.ClockHow = "the clocks disagree between requests: midway"
	}
	theta := out.ClockOffsetNs
	// 3. Passes; first-forward unions per pass and worker; running unions.
	passOf := make([]int32, n)
	passIx := map[passCode]int{}
	var passes []*passInfo
	type ffKey struct {
		pass   int32
		worker string
	}
	keyOf := func(i int) ffKey { // request i's pass and worker
		k := ffKey{passOf[i], ""}
		if i < len(in.Worker) {
			k.worker = in.Worker[i]
		}
		return k
	}
	ffs := map[ffKey][]interval{}
	batches := map[ffKey][]interval{} // each request's running span, by pass and worker
	for i := 0; i < n; i++ {
		passOf[i] = -1
		if rc.Status.Codes[i] != okCode {
			continue
		}
		pc := passCodeOf(rc, i)
		p := int32(ordinal(passIx, pc))
		if int(p) == len(passes) {
			passes = append(passes, &passInfo{pt: PassThread{Level: rc.Level.At(i), Repeat: int(pc.repeat), Warmup: pc.warmup},
				lo: math.MaxInt64, hi: math.MinInt64, tidVotes: map[int64]int{}, pidVotes: map[int64]int{}})
		}
		passOf[i] = p
		pi := passes[p]
		if w, ok := window(i); ok {
			pi.lo, pi.hi = min(pi.lo, w.a), max(pi.hi, w.b)
		}
		b, k := &bounds[i], keyOf(i)
		if b.ok(kFirstForward) {
			ffs[k] = append(ffs[k], b.iv[kFirstForward])
		}
		if r, ok := runningSpan(b); ok {
			pi.running = append(pi.running, r)
			batches[k] = append(batches[k], r)
		}
		if i < len(in.RequestTID) && in.RequestTID[i] != 0 {
			pi.tidVotes[in.RequestTID[i]]++
		}
		if i < len(in.RequestPID) && in.RequestPID[i] != 0 {
			pi.pidVotes[in.RequestPID[i]]++
		}
	}
	for _, p := range passes {
		p.running = merge(p.running)
	}
	// 4. Each pass's serving thread; the first-forward unions on it.
	ths := threads(in.Sched, in.CUDA)
	want := cmp.Or(in.Thread, DefaultServingThread)
	byThread := map[*thread][]interval{}
	for _, p := range passes {
		choose(p, ths, want)
		out.Passes = append(out.Passes, p.pt)
		if p.th != nil {
			byThread[p.th] = append(byThread[p.th], p.running...)
		}
	}
	// What a thread does in a bin that requests ran in only part of, it
	// did for them: its busy time goes to the running part first.
	for th, run := range byThread {
		th.concentrate(merge(run))
	}
	// When the running batch held the capture's cap (per worker: the most
	// it ever held), for the admission waits.
	capOf := map[string]int{}
	occ := make(map[ffKey][]occStep, len(batches))
	for k, v := range batches {
		occ[k] = occupancySteps(v)
		for _, st := range occ[k] {
			capOf[k.worker] = max(capOf[k.worker], st.n)
			out.RunCap = max(out.RunCap, st.n)
		}
	}
	unions := make(map[ffKey]*ffUnion, len(ffs))
	for k, v := range ffs {
		unions[k] = newFFUnion(merge(v), passes[k.pass].th)
	}
	// 5. Every request. Their segments share one array (a request's is
	// a full slice of it).
	out.Requests = make([]RequestStates, 0, n)
	var seg *segmenter
	if in.Segments {
		seg = &segmenter{out: make([]Segment, 0, 8*n)}
	}
	for i := 0; i < n; i++ {
		if passOf[i] < 0 {
			continue
		}
		rs := RequestStates{Index: i, Level: rc.Level.At(i), Repeat: int(repeatOf(rc, i)), Warmup: rc.Warmup[i], LatencyS: rc.LatencyS[i], Telemetry: tele[i]}
		L := int64(math.Round(rc.LatencyS[i] * 1e9))
		var ns [NumStates]float64
		var segs *segmenter
		if seg != nil {
			seg.from = len(seg.out)
		}
		w, hasW := window(i)
		if !tele[i] || !hasW || L <= 0 {
			ns[sUnattributed] = float64(max(L, 0))
			if c0, c1, ok := clientEnd(i); seg != nil && ok {
				seg.out = append(seg.out, Segment{sUnattributed, c0, c1})
			}
		} else {
			c0, c1, cok := clientEnd(i)
			th := theta
			if !cok { // no client clock: the server's window at the start
				c0, c1, th = 0, L, w.a
			} else if w.b-c1 <= w.a-c0 {
				th = min(max(theta, w.b-c1), w.a-c0)
			} else {
				th = (w.b - c1 + w.a - c0) / 2
			}
			k := keyOf(i)
			if cok && seg != nil {
				segs = seg
				seg.off, seg.prev = th, [NumStates]float64{}
			}
			var cn int64 // the new connection's time from the latency's start
			if at, ok := connectedAt(rc, i, c0, c1); ok && cok {
				cn = at - c0
			}
			attributeOne(&ns, &bounds[i], w, c0+th, c1+th, cn, unions[k], passes[passOf[i]].th, segs)
			if b := &bounds[i]; ns[sAdmission] > 0 && (b.ok(kBuildToQueued) || b.ok(kQueued)) {
				iv := b.iv[kQueued]
				if b.ok(kBuildToQueued) {
					iv.a = b.iv[kBuildToQueued].a
					if !b.ok(kQueued) {
						iv.b = b.iv[kBuildToQueued].b
					}
				}
				rs.AdmissionAtCapS = min(atCap(occ[k], capOf[k.worker], iv), ns[sAdmission]) / 1e9
				rs.AdmissionInFFS = min(float64(unions[k].covered(iv)), ns[sAdmission]) / 1e9
			}
		}
		if seg != nil && len(seg.out) > seg.from {
			rs.Segments = seg.out[seg.from:len(seg.out):len(seg.out)]
		}
		for s := range ns {
			rs.States[s] = ns[s] / 1e9
		}
		out.Requests = append(out.Requests, rs)
	}
	// 6. Per level.
	out.Levels = levelStates(in, out, passes)
	return out
}

// runningSpan is the request's time in the running batch: from its first
// forward's start (its decode's, without one) to its decode's end.
func runningSpan(b *reqBounds) (interval, bool) {
	switch {
	case b.ok(kFirstForward) && b.ok(kDecode):
		return interval{b.iv[kFirstForward].a, max(b.iv[kDecode].b, b.iv[kFirstForward].b)}, true
	case b.ok(kDecode):
		return b.iv[kDecode], true
	case b.ok(kFirstForward):
		return b.iv[kFirstForward], true
	}
	return interval{}, false
}

// segmenter records where in time attributeOne put each state: phase by
// phase, the states a phase added, laid in state order over it.
type segmenter struct {
	off  int64 // server clock − client clock
	prev [NumStates]float64
	out  []Segment
	from int // the current request's first segment in out
}

// phase records [a, z) (server clock), which added ns − prev.
func (g *segmenter) phase(ns *[NumStates]float64, a, z int64) {
	if g == nil {
		return
	}
	var d [NumStates]float64
	total, last := 0.0, -1
	for s := range ns {
		d[s] = max(ns[s]-g.prev[s], 0)
		total += d[s]
		if d[s] > 0 {
			last = s
		}
	}
	g.prev = *ns
	if z <= a || !(total > 0) {
		return
	}
	cum, t := 0.0, a
	for s := range d {
		if !(d[s] > 0) {
			continue
		}
		cum += d[s]
		end := a + int64(math.Round(cum/total*float64(z-a)))
		if s == last {
			end = z
		}
		if end > t {
			if n := len(g.out); n > g.from && g.out[n-1].State == s && g.out[n-1].EndUnixNs == t-g.off {
				g.out[n-1].EndUnixNs = end - g.off
			} else {
				g.out = append(g.out, Segment{s, t - g.off, end - g.off})
			}
		}
		t = end
	}
}

// attributeOne assigns [x0, x1) (the client's latency on the server's
// clock) of one request, in ns, to ns; segs (nil: none) records where. cn
// is the time its new connection took from x0 (0: none).
func attributeOne(ns *[NumStates]float64, b *reqBounds, w interval, x0, x1, cn int64, ff *ffUnion, th *thread, segs *segmenter) {
	clamp := func(t int64) int64 { return min(max(t, x0), x1) }
	// Response delivery starts where the request left the running batch
	// (its decode's end), else at the server's end.
	e := w.b
	if b.ok(kDecode) {
		e = b.iv[kDecode].b
	}
	w0 := clamp(w.a)
	e = max(clamp(e), w0)
	t := x0
	// The connection first, up to the server's start at most: the server
	// cannot begin before the request reached it.
	if c := min(x0+cn, w0); c > t {
		ns[sConnect] += float64(c - t)
		segs.phase(ns, t, c)
		t = c
	}
	ns[sUpload] += float64(w0 - t)
	segs.phase(ns, t, w0)
	t = w0
	for k := 0; k < kTotal; k++ {
		if !b.ok(k) {
			continue
		}
		a, z := max(b.iv[k].a, t), min(b.iv[k].b, e)
		if a > t { // a gap before the stage
			g := min(a, e)
			ns[sUnattributed] += float64(g - t)
			segs.phase(ns, t, g)
			t = g
		}
		if z <= a {
			continue
		}
		switch k {
		case kFirstForward: // split by the serving thread's bins
			addSplit(ns, float64(z-a), th.integrate(a, z))
		case kDecode: // the parts another request's first forward ran in are stalls, the rest is running
			la, sa := ff.upTo(a)
			lz, sz := ff.upTo(z)
			ns[sStall] += float64(lz - la)
			addSplit(ns, float64(z-a-(lz-la)), th.integrate(a, z).minus(sz.minus(sa)))
		default:
			ns[segState[k]] += float64(z - a)
		}
		segs.phase(ns, a, z)
		t = z
	}
	ns[sUnattributed] += float64(e - t)
	segs.phase(ns, t, e)
	t = max(t, e)
	ns[sDelivery] += float64(x1 - t)
	segs.phase(ns, t, x1)
}

// ffUnion is the merged first forwards of a pass (and worker), with
// prefix sums of their lengths and of the serving thread over them, so
// that the part of any interval they cover, and what the thread did in
// the rest of it, take two binary searches.
type ffUnion struct {
	iv  []interval
	len []int64 // len[j]: total length of iv[:j]
	th  *thread
	sp  []split // sp[j]: the thread over iv[:j]
}

func newFFUnion(iv []interval, th *thread) *ffUnion {
	u := &ffUnion{iv: iv, len: make([]int64, len(iv)+1), th: th, sp: make([]split, len(iv)+1)}
	for j, v := range iv {
		u.len[j+1] = u.len[j] + v.b - v.a
		u.sp[j+1] = u.sp[j].plus(th.integrate(v.a, v.b)) // zero for a nil thread
	}
	return u
}

// upTo returns how much of (-∞, t) the union covers, and the thread's
// split over that part.
func (u *ffUnion) upTo(t int64) (int64, split) {
	if u == nil {
		return 0, split{}
	}
	j := sort.Search(len(u.iv), func(j int) bool { return u.iv[j].b > t })
	l, s := u.len[j], u.sp[j]
	if j < len(u.iv) && t > u.iv[j].a {
		l, s = l+t-u.iv[j].a, s.plus(u.th.integrate(u.iv[j].a, t))
	}
	return l, s
}

// covered is how much of iv the union covers (ns).
func (u *ffUnion) covered(iv interval) int64 {
	if u == nil || iv.b <= iv.a {
		return 0
	}
	b, _ := u.upTo(iv.b)
	a, _ := u.upTo(iv.a)
	return b - a
}

func (s split) plus(o split) split {
	return split{s.host + o.host, s.gpu + o.gpu, s.runq + o.runq, s.on + o.on, s.cov + o.cov}
}

func (s split) minus(o split) split {
	return split{s.host - o.host, s.gpu - o.gpu, s.runq - o.runq, s.on - o.on, s.cov - o.cov}
}

// busy is the time the thread worked or wanted to: host work, GPU wait
// and runnable.
func (s split) busy() float64 { return s.host + s.gpu + s.runq }

// addSplit adds d ns of running time that the thread's bins split as s
// (the part they do not cover is no thread data: all of it without a
// thread, whose split is zero).
func addSplit(ns *[NumStates]float64, d float64, s split) {
	cov := min(max(s.cov, 0), d)
	host, gpu, runq := max(s.host, 0), max(s.gpu, 0), max(s.runq, 0)
	ns[sNoThread] += d - cov
	ns[sHost] += host
	ns[sGPUWait] += gpu
	ns[sRunnable] += runq
	ns[sOffCPU] += max(0, cov-host-gpu-runq)
}

// choose picks a pass's serving thread and measures it.
func choose(p *passInfo, ths []*thread, want string) {
	if len(p.running) == 0 || len(ths) == 0 {
		return
	}
	lo, hi := p.running[0].a, p.running[len(p.running)-1].b
	cands := slices.DeleteFunc(slices.Clone(ths), func(th *thread) bool {
		return len(th.lines) == 0 || th.lines[0].start >= hi || th.lines[len(th.lines)-1].end() <= lo
	})
	if pid := mode(p.pidVotes, false); pid != 0 {
		if same := slices.DeleteFunc(slices.Clone(cands), func(th *thread) bool { return th.pid != pid }); len(same) > 0 {
			cands = same
		}
	}
	best := func(ts []*thread) *thread { // the most on-CPU while running
		var b *thread
		bv := -1.0
		for _, th := range ts {
			v := 0.0
			for _, r := range p.running {
				v += th.integrate(r.a, r.b).on
			}
			if v > bv {
				b, bv = th, v
			}
		}
		return b
	}
	var th *thread
	if tid := mode(p.tidVotes, false); tid != 0 {
		for _, c := range cands {
			if c.tid == tid {
				th, p.pt.How = c, "span thread.id"
			}
		}
	}
	if th == nil {
		if th = best(slices.DeleteFunc(slices.Clone(cands), func(c *thread) bool { return c.name != want })); th != nil {
			p.pt.How = "named " + want
		}
	}
	if th == nil {
		if th = best(cands); th != nil {
			p.pt.How = "busiest while running"
		}
	}
	if th == nil {
		return
	}
	p.th = th
	p.pt.PID, p.pt.TID, p.pt.Name = th.pid, th.tid, th.name
	// Its bins: those at least half covered by the running union are the
	// running bins; those inside the pass's server window count for the
	// pass.
	var on, bins float64
	for _, l := range th.lines {
		j := sort.Search(len(p.running), func(j int) bool { return p.running[j].b > l.start })
		for k := 0; k < l.n; k++ {
			t0 := l.start + int64(k)*l.bin
			t1 := t0 + l.bin
			B := float64(l.bin)
			if mid := t0 + l.bin/2; mid >= p.lo && mid < p.hi {
				on += l.p[k+1][cOn] - l.p[k][cOn]
				bins += B
				p.pt.Bins++
			}
			cov := covers(p.running, &j, t0, t1)
			if 2*cov < l.bin {
				continue
			}
			a, b := &l.p[k], &l.p[k+1]
			h, g, q, o := b[cHost]-a[cHost], b[cGPU]-a[cGPU], b[cRunq]-a[cRunq], b[cOn]-a[cOn]
			p.runOn, p.runB = p.runOn+o, p.runB+B
			p.pt.RunningBins++
			p.runBins = append(p.runBins, runBin{t0: t0, t1: t1, host: h / B, gpu: g / B, runq: q / B, off: max(0, 1-(h+g+q)/B)})
		}
	}
	if p.pt.Bins > 0 {
		p.pt.PassUtil = on / bins
	}
	if p.pt.RunningBins > 0 {
		p.pt.RunningUtil = p.runOn / p.runB
	}
}

// mode is the most frequent key (among ties the smallest, with largest
// the largest); 0 for none.
func mode[K int | int64](votes map[K]int, largest bool) K {
	var best K
	bn := 0
	for k, v := range votes {
		if v > bn || v == bn && (k > best) == largest {
			best, bn = k, v
		}
	}
	return best
}

func levelStates(in AttributionInput, a *Attribution, passes []*passInfo) []LevelStates {
	type acc struct {
		n, missing, connects, slow int
		lat, atCap, inFF, adm      float64
		states                     [][]float64 // each request's
		passes                     []*passInfo
	}
	by := map[string]*acc{}
	for i := range a.Requests {
		r := &a.Requests[i]
		if r.Warmup {
			continue
		}
		x := entry(by, r.Level)
		if !r.Telemetry {
			x.missing++
		}
		x.n++
		x.lat += r.LatencyS
		x.atCap += r.AdmissionAtCapS
		x.inFF += r.AdmissionInFFS
		x.adm += r.States[sAdmission]
		x.states = append(x.states, r.States[:])
		if r.States[sConnect] > 0 {
			x.connects++
			if slowConnect(r.States[sConnect]) {
				x.slow++
			}
		}
	}
	for _, p := range passes {
		if !p.pt.Warmup {
			x := entry(by, p.pt.Level)
			x.passes = append(x.passes, p)
		}
	}
	gpus := map[int][]bundle.GPURecord{}
	for _, s := range in.GPU {
		gpus[s.GPU] = append(gpus[s.GPU], s)
	}
	for _, ss := range gpus {
		slices.SortFunc(ss, func(x, y bundle.GPURecord) int { return cmp.Compare(x.TS, y.TS) })
	}
	var out []LevelStates
	for _, lv := range in.Levels {
		x := by[lv]
		if x == nil || x.n == 0 {
			continue
		}
		l := LevelStates{Level: lv, N: x.n, Missing: x.missing, LatencyMeanMs: 1000 * x.lat / float64(x.n), Connects: x.connects, SlowConnects: x.slow}
		stateStats(l.States[:], x.lat, x.states)
		var runOn, runB, passOn, passB float64
		for _, p := range x.passes {
			if p.th == nil {
				continue
			}
			l.Threads = append(l.Threads, p.pt)
			runB += p.runB
			runOn += p.runOn
			passOn += p.pt.PassUtil * float64(p.pt.Bins)
			passB += float64(p.pt.Bins)
		}
		if runB > 0 {
			l.RunningUtil = runOn / runB
		}
		if passB > 0 {
			l.PassUtil = passOn / passB
		}
		l.GPU = gpuBreakdown(x.passes, gpus)
		l.RunCap = a.RunCap
		if x.adm > 0 {
			l.AdmissionAtCap = min(x.atCap/x.adm, 1)
			l.AdmissionInFF = min(x.inFF/x.adm, 1)
		}
		out = append(out, l)
	}
	return out
}

// stateStats fills out, a level's states, from its requests' summed
// latency lat and their states (seconds).
func stateStats(out []StateStat, lat float64, states [][]float64) {
	ms := make([]float64, len(states)) // one state's, per request
	for s := range out {
		sum := 0.0
		for r, st := range states {
			sum += st[s]
			ms[r] = 1000 * st[s]
		}
		if lat > 0 {
			out[s].Share = sum / lat
		}
		out[s].MeanMs, out[s].P95Ms = stats.Mean(ms), stats.PercentileInPlace(ms, 95) // (the mean first)
	}
}

// maxSampleGap is how far after a bin a util sample may be and still
// stand for it (NVML's sample periods are 1/6 s to 1 s).
const maxSampleGap = int64(2e9)

// gpuBreakdown is the level's GPU time over its passes' running bins, on
// the GPU busiest in them.
func gpuBreakdown(passes []*passInfo, gpus map[int][]bundle.GPURecord) *GPUBreakdown {
	var best *GPUBreakdown
	for _, id := range slices.Sorted(maps.Keys(gpus)) {
		ss := gpus[id]
		g := &GPUBreakdown{GPU: id}
		var W float64
		for _, p := range passes {
			for _, rb := range p.runBins {
				mid := rb.t0 + (rb.t1-rb.t0)/2
				j := sort.Search(len(ss), func(j int) bool { return ss[j].TS >= mid })
				if j == len(ss) || ss[j].TS-mid > maxSampleGap {
					continue
				}
				u := min(max(ss[j].UtilPct/100, 0), 1)
				w := float64(rb.t1 - rb.t0)
				W += w
				g.Bins++
				g.Busy += w * u
				g.IdleHost += w * (1 - u) * rb.host
				g.IdleGPUWait += w * (1 - u) * rb.gpu
				g.IdleRunnable += w * (1 - u) * rb.runq
				g.IdleOff += w * (1 - u) * rb.off
			}
		}
		if W == 0 {
			continue
		}
		g.Busy, g.IdleHost, g.IdleGPUWait, g.IdleRunnable, g.IdleOff = g.Busy/W, g.IdleHost/W, g.IdleGPUWait/W, g.IdleRunnable/W, g.IdleOff/W
		if best == nil || g.Busy > best.Busy {
			best = g
		}
	}
	return best
}
