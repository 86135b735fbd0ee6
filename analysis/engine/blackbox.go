package engine

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/stats"
)

// Black-box attribution: where each request's client latency went when the
// server says nothing about its stages (no events, no spans). It stands on
// what every capture has, the client's clock, and on what the host gives
// without the server's help: per-thread time bins (the sched probe's with
// eBPF, the proc probe's from /proc schedstat without root), time inside
// CUDA synchronize calls, NVML. docs/ANALYSIS.md ("Seen from outside")
// describes the rules.
//
// A request's latency splits into
//   - connect: sent → its new connection established (none on a reused
//     one);
//   - upload: → the body sent in full (client's clock);
//   - server time: upload done → the first byte of the answer;
//   - response delivery: first byte → end.
//
// Server time splits into the sample's own service (its server time when
// served alone: the median over the solo level's scored passes) and
// waiting behind other requests (the rest). The service, placed at the end
// of the server time (the request waits, then is served), splits by what
// the serving thread did over it: host work, GPU wait (inside a
// CUDA synchronize), runnable (CPU contention), off-CPU (asleep: the
// server is idle or waits on something the host does not see), or no
// thread data where no bins cover it.

// The black-box states, in the order the tables print them.
const (
	BBConnect  = "connect"
	BBUpload   = "upload"
	BBWait     = "waiting behind others"
	BBHost     = "service: host work"
	BBGPUWait  = "service: GPU wait"
	BBRunnable = "service: runnable"
	BBOffCPU   = "service: off-CPU"
	BBNoThread = "service: no thread data"
	BBDelivery = "response delivery"
)

// BlackBoxStates are the states in order; BlackBoxRequest.States and
// BlackBoxLevel.States are indexed like it.
var BlackBoxStates = []string{BBConnect, BBUpload, BBWait, BBHost, BBGPUWait, BBRunnable, BBOffCPU, BBNoThread, BBDelivery}

const (
	bConnect = iota
	bUpload
	bWait
	bHost
	bGPUWait
	bRunnable
	bOffCPU
	bNoThread
	bDelivery
	// NumBBStates is len(BlackBoxStates).
	NumBBStates
)

// The black box's thresholds.
const (
	// GroupGapMs: two answers whose first bytes lie this close are
	// one group (a batch answered at once shows as one).
	GroupGapMs = 10.0
	// SlowConnectS: a connection that took this long had a SYN dropped
	// and retried (Linux retries after 1 s), most often at a server's
	// full listen backlog; on loopback a connection takes well under a
	// millisecond.
	SlowConnectS = 0.95
	// candidateThreads is how many of a pass's busiest threads are tried
	// for each request's service.
	candidateThreads = 8
	// restMinNs: a thread's busy rate while no request was in the server
	// is taken from at least this much of its bins (five 10 ms bins; a
	// closed loop's passes leave a few ms between requests).
	restMinNs = 50e6
)

// Shapes of a level's concurrency seen from outside (BlackBoxLevel.Shape).
const (
	ShapeNone   = ""        // nothing waited: no limit reached at this level
	ShapeOne    = "one"     // one request in service at a time
	ShapeAtMost = "at most" // at most N in service at once
	ShapeBatch  = "batches" // batches of up to N, answered together
)

// Solo says where each sample's service alone came from.
const (
	SoloLevel    = "level"    // the solo level's scored passes (the sweep's c=1)
	SoloQuickest = "quickest" // no solo level: the sample's quickest server time in the capture
)

// BlackBoxInput is what BlackBox reads.
type BlackBoxInput struct {
	Reqs *columns.RequestCols
	// SampleID is each request's dataset sample (the same sample recurs
	// at every level); requests without one are their own sample.
	SampleID []string
	// Levels is the order of the level rows.
	Levels []string
	// Solo is the level whose scored requests give each sample's service
	// alone ("": none, then each sample's quickest server time).
	Solo string
	// Bins are per-thread time bins (sched_bins.jsonl, else
	// proc_bins.jsonl), CUDA the synchronize time (cuda_bins.jsonl),
	// GPU NVML's utilization samples; any may be empty.
	Bins, CUDA []bundle.ThreadBins
	GPU        []bundle.GPURecord
}

// BlackBoxRequest is one successful request seen from outside: States in
// seconds, indexed as BlackBoxStates, adding up to LatencyS.
type BlackBoxRequest struct {
	Index    int
	Level    string
	Repeat   int
	Warmup   bool
	LatencyS float64
	// ServiceAloneS is its sample's server time when served alone.
	ServiceAloneS float64
	States        [NumBBStates]float64
	// TID is the thread whose bins split its service (0: none).
	TID int64
	// Segments place the states in the request's time on the client's
	// clock (Segment.State indexes BlackBoxStates): the upload, the wait,
	// the service's parts laid in state order over it, the delivery. None
	// without a client clock.
	Segments []Segment
}

// Groups is how a level's answers clustered in time: Sizes[k] groups of k
// answers whose first bytes lay within the gap of each other;
// GroupedShare is the share of answers in groups of two or more. A group
// is a batch when its members' own services differ by more than two gaps
// (served apart, they would not end together). BatchShare is the share of
// answers in batches, BatchMax the largest batch.
type Groups struct {
	Sizes        map[int]int
	GroupedShare float64
	BatchShare   float64
	Batches      int // groups that are batches
	BatchMax     int
	BatchMode    int
}

// BlackBoxThread is a thread that served requests, seen from outside.
type BlackBoxThread struct {
	Name string
	TID  int64
}

// BlackBoxLevel is one level's black-box attribution over its measured
// (non-warmup, successful) requests.
type BlackBoxLevel struct {
	Level         string
	N             int
	LatencyMeanMs float64
	States        [NumBBStates]StateStat
	// ReqS is the level's throughput (mean over its passes);
	// ServiceAloneMs the mean service alone of its requests; InFlight the
	// mean number of requests in the system (summed latency / wall).
	ReqS, ServiceAloneMs, InFlight float64
	// Parallelism is the server's effective parallelism by Little's law
	// over the time it held requests: the services alone it completed per
	// second of that time, the union of its requests' server times (upload
	// done → first byte), which HeldShare is of the pass's wall. Time the
	// server held nothing (a request still connecting, an open loop's
	// gaps, the client's ramp) does not lower it, and a server that serves
	// one at a time cannot exceed 1. Mean over passes; Min and Max over
	// them.
	Parallelism, ParallelismMin, ParallelismMax float64
	HeldShare                                   float64
	Passes                                      int
	// Connects: requests that opened a connection of their own;
	// SlowConnects: those whose connection took SlowConnectS or more.
	Connects, SlowConnects int
	Groups                 Groups
	// Shape and ShapeN: the concurrency seen (ShapeNone when nothing
	// waited).
	Shape  string
	ShapeN int
	// ServiceBusy is the busiest thread's on-CPU share of the service
	// (host work and GPU wait spun on a CPU); GPUBusy NVML's
	// utilization over the time the server held requests, the union of
	// their server times (-1: no samples), on GPU.
	ServiceBusy float64
	GPUBusy     float64
	GPU         int
	// CoresHeld is the server's threads' on-CPU time over the time it
	// held requests, in cores; Overlap the share of that time that fell
	// in windows of OverlapWindowMs where together they ran more than a
	// core; BusyThreads the threads with BusyShare of it or more. Two or
	// more threads on about one core with next to no overlap take turns
	// (Python's GIL, a lock): a serving thread off-CPU then waits for its
	// turn, not for something outside the host.
	CoresHeld, Overlap float64
	BusyThreads        int
	// CPUPerRequestS is the server's threads' on-CPU time while it held
	// requests, per request (0 without bins); CPUVsSolo the same over the
	// solo level's (0 at the solo level, or where either is unknown).
	// Little's law here takes each sample's service alone from the solo
	// level: far from 1, that pass's services may not hold at this level
	// (the host ran at another speed, or requests shared work).
	CPUPerRequestS, CPUVsSolo float64
	// Threads are the threads that served, most service time first.
	Threads []BlackBoxThread
	// ServingRestShare is their busy rate while no request was in the
	// server as a share of their busy rate in this level's services
	// (over the requests each served; -1 where that rate is not known).
	// About 1 or more: the thread did as much with no request in the
	// server, a thread that spins while idle or one that does not serve;
	// bins alone cannot tell which.
	ServingRestShare float64
}

// BlackBoxResult is BlackBox's answer.
type BlackBoxResult struct {
	Solo     string // SoloLevel or SoloQuickest
	SoloFrom string // the solo level, when Solo is SoloLevel
	Requests []BlackBoxRequest
	Levels   []BlackBoxLevel
}

type bbReq struct {
	i          int
	pass       int
	server     int64 // server time (ns)
	conn       int64 // connect (ns; 0 on a reused connection)
	newConn    bool  // it opened a connection
	up, dl     int64 // upload and delivery (ns)
	answer     int64 // first byte (unix ns; end without one)
	sample     string
	alone      int64
	svcA, svcB int64
}

// connectedAt is when request i's new connection was established, on the
// client's clock, kept inside [start, up] (its latency's start, and the
// end of its upload or latency); ok is false on a reused connection or
// without the stamp. The black box and the stage attribution both take
// the connect state from it.
func connectedAt(rc *columns.RequestCols, i int, start, up int64) (int64, bool) {
	if len(rc.ConnectedUnixNs) != rc.N || rc.ConnectedUnixNs[i] <= 0 {
		return 0, false
	}
	return min(max(rc.ConnectedUnixNs[i], start), up), true
}

// slowConnect says whether a connection that took s seconds waited for a
// SYN's retry (SlowConnectS).
func slowConnect(s float64) bool { return s >= SlowConnectS }

// SoloOf says where BlackBox takes each sample's service alone from:
// SoloLevel and in.Solo when that level has a successful scored request,
// else SoloQuickest. It reads the columns only, without the attribution.
func (in BlackBoxInput) SoloOf() (string, string) {
	rc := in.Reqs
	if in.Solo == "" {
		return SoloQuickest, ""
	}
	lv, ok := rc.Level.Code(in.Solo), rc.Status.Code("ok")
	for i := 0; i < rc.N; i++ {
		if rc.Level.Codes[i] == lv && rc.Status.Codes[i] == ok && !rc.Warmup[i] && rc.LatencyS[i] > 0 {
			return SoloLevel, in.Solo
		}
	}
	return SoloQuickest, ""
}

// BlackBox attributes every successful request's latency to the black-box
// states, and infers each level's concurrency.
func BlackBox(in BlackBoxInput) *BlackBoxResult {
	rc := in.Reqs
	n := rc.N
	okCode := rc.Status.Code("ok")
	has := func(xs []int64, i int) bool { return len(xs) == n && xs[i] > 0 }
	out := &BlackBoxResult{}
	// 1. Each request's three client phases.
	passIx := map[passCode]int{}
	var rs []bbReq
	for i := 0; i < n; i++ {
		if rc.Status.Codes[i] != okCode || rc.LatencyS[i] <= 0 {
			continue
		}
		L := int64(math.Round(rc.LatencyS[i] * 1e9))
		r := bbReq{i: i, server: L}
		if has(rc.EndUnixNs, i) {
			end := rc.EndUnixNs[i]
			start := end - L
			conn, up, fb := start, start, end
			if has(rc.UploadDoneUnixNs, i) {
				up = min(max(rc.UploadDoneUnixNs[i], start), end)
			}
			if at, ok := connectedAt(rc, i, start, up); ok {
				conn, r.newConn = at, true
			}
			if has(rc.FirstByteUnixNs, i) {
				fb = min(max(rc.FirstByteUnixNs[i], up), end)
			}
			r.conn, r.up, r.dl, r.server, r.answer = conn-start, up-conn, end-fb, fb-up, fb
		}
		r.sample = "#" + strconv.Itoa(i)
		if i < len(in.SampleID) && in.SampleID[i] != "" {
			r.sample = in.SampleID[i]
		}
		r.pass = ordinal(passIx, passCodeOf(rc, i))
		rs = append(rs, r)
	}
	// 2. Each sample's service alone.
	solo := map[string][]float64{}
	quick := map[string]int64{}
	for _, r := range rs {
		if q, ok := quick[r.sample]; !ok || r.server < q {
			quick[r.sample] = r.server
		}
		if in.Solo != "" && !rc.Warmup[r.i] && rc.Level.At(r.i) == in.Solo {
			solo[r.sample] = append(solo[r.sample], float64(r.server))
		}
	}
	out.Solo, out.SoloFrom = in.SoloOf()
	for j := range rs {
		r := &rs[j]
		r.alone = quick[r.sample]
		if xs, ok := solo[r.sample]; ok {
			r.alone = int64(stats.Percentile(xs, 50))
		}
	}
	// A request waits behind others only while others are in the server:
	// its wait is at most the time another held the server beside it. At
	// c=1 none did, and a server time above the sample's median alone is
	// its own service, slower.
	shared := sharedTimes(rs)
	for j := range rs {
		r := &rs[j]
		svc := max(min(r.alone, r.server), r.server-shared[j])
		r.svcA, r.svcB = r.answer-svc, r.answer
	}
	// 3. Threads: per pass, the busiest over its requests' services.
	// A thread as busy while no request was in the server (a co-runner
	// in the server's tree) counts for less than one that follows the
	// requests: each is scored by its busy time plus what that exceeds
	// its own rate while none was, if anything. A serving thread that
	// spins while idle (SGLang's scheduler) keeps its busy time.
	ths := threads(in.Bins, in.CUDA)
	cands := make([][]*thread, len(passIx))
	svcs := make([][]interval, len(passIx))
	var inServer []interval
	for _, r := range rs {
		if r.answer > 0 && r.svcB > r.svcA {
			svcs[r.pass] = append(svcs[r.pass], interval{r.svcA, r.svcB})
		}
		if r.answer > 0 && r.server > 0 {
			inServer = append(inServer, interval{r.answer - r.server, r.answer})
		}
	}
	restOf := restRates(ths, merge(inServer))
	score := func(th *thread, s split) float64 {
		return s.busy() + max(0, s.busy()-restOf[th.tid]*s.cov)
	}
	for p := range cands {
		u := merge(svcs[p])
		over := map[*thread]split{}
		for _, th := range ths {
			for _, iv := range u {
				over[th] = over[th].plus(th.integrate(iv.a, iv.b))
			}
		}
		all := slices.DeleteFunc(slices.Clone(ths), func(th *thread) bool { return !(over[th].busy() > 0) })
		slices.SortFunc(all, func(x, y *thread) int {
			return cmp.Or(cmp.Compare(score(y, over[y]), score(x, over[x])), cmp.Compare(x.tid, y.tid))
		})
		cands[p] = all[:min(len(all), candidateThreads)]
		if len(cands[p]) == 0 && len(u) > 0 {
			// an idle server: its threads asleep through the service;
			// any thread whose bins cover the pass tells that.
			covering := func(th *thread) bool { return th.integrate(u[0].a, u[len(u)-1].b).cov > 0 }
			if i := slices.IndexFunc(ths, covering); i >= 0 {
				cands[p] = ths[i : i+1 : i+1]
			}
		}
	}
	// 4. Every request's states.
	out.Requests = make([]BlackBoxRequest, 0, len(rs))
	for _, r := range rs {
		q := BlackBoxRequest{Index: r.i, Level: rc.Level.At(r.i), Repeat: int(repeatOf(rc, r.i)), Warmup: rc.Warmup[r.i],
			LatencyS: rc.LatencyS[r.i], ServiceAloneS: float64(r.alone) / 1e9}
		svc := float64(r.svcB - r.svcA)
		q.States[bConnect] = float64(r.conn) / 1e9
		q.States[bUpload] = float64(r.up) / 1e9
		q.States[bDelivery] = float64(r.dl) / 1e9
		q.States[bWait] = float64(r.server-(r.svcB-r.svcA)) / 1e9
		var best *thread
		var bs split
		bb := math.Inf(-1)
		for _, th := range cands[r.pass] {
			s := th.integrate(r.svcA, r.svcB)
			if v := score(th, s); s.cov > 0 && v > bb {
				best, bs, bb = th, s, v
			}
		}
		if best == nil || svc <= 0 {
			q.States[bNoThread] = svc / 1e9
		} else {
			q.TID = best.tid
			q.States[bHost], q.States[bGPUWait], q.States[bRunnable] = bs.host/1e9, bs.gpu/1e9, bs.runq/1e9
			q.States[bOffCPU], q.States[bNoThread] = max(0, bs.cov-bs.host-bs.gpu-bs.runq)/1e9, max(0, svc-bs.cov)/1e9
		}
		if r.answer > 0 {
			q.Segments = bbSegments(&q, r)
		}
		out.Requests = append(out.Requests, q)
	}
	// 5. Per level.
	names := map[int64]string{}
	for _, th := range ths {
		names[th.tid] = th.name
	}
	for _, lv := range in.Levels {
		out.Levels = append(out.Levels, bbLevel(in, lv, rs, out.Requests, names, ths, restOf))
	}
	out.Levels = slices.DeleteFunc(out.Levels, func(l BlackBoxLevel) bool { return l.N == 0 })
	if out.Solo == SoloLevel {
		if i := slices.IndexFunc(out.Levels, func(l BlackBoxLevel) bool { return l.Level == out.SoloFrom }); i >= 0 && out.Levels[i].CPUPerRequestS > 0 {
			for j := range out.Levels {
				if l := &out.Levels[j]; j != i && l.CPUPerRequestS > 0 {
					l.CPUVsSolo = l.CPUPerRequestS / out.Levels[i].CPUPerRequestS
				}
			}
		}
	}
	return out
}

// restRates is, by tid, each thread's busy share (host work, GPU wait,
// runnable) of the time its bins cover outside u, the requests' server
// times (sorted, disjoint): while no request was in the server. None
// where under restMinNs of it is covered.
func restRates(ths []*thread, u []interval) map[int64]float64 {
	rates := map[int64]float64{}
	for _, th := range ths {
		if len(th.lines) == 0 {
			continue
		}
		rest := th.integrate(th.lines[0].start, th.lines[len(th.lines)-1].end())
		for _, iv := range u {
			rest = rest.minus(th.integrate(iv.a, iv.b))
		}
		if rest.cov >= restMinNs {
			rates[th.tid] = max(0, rest.busy()) / rest.cov
		}
	}
	return rates
}

// sharedTimes is, for each request of rs, how long another request of its
// pass was in the server (upload done → first byte) during its own server
// time: per pass, the steps of how many were in the server
// (occupancySteps) give S(t), the time up to t with two or more, and each
// request's S(end) − S(start).
func sharedTimes(rs []bbReq) []int64 {
	byPass := map[int][]interval{}
	for _, r := range rs {
		if r.answer > 0 && r.server > 0 {
			byPass[r.pass] = append(byPass[r.pass], interval{r.answer - r.server, r.answer})
		}
	}
	type point struct{ t, s int64 } // S at t
	curve := map[int][]point{}
	for p, ivs := range byPass {
		steps := occupancySteps(ivs)
		pts := make([]point, len(steps))
		var s int64
		for i, st := range steps {
			if i > 0 && steps[i-1].n >= 2 {
				s += st.t - steps[i-1].t
			}
			pts[i] = point{st.t, s}
		}
		curve[p] = pts
	}
	at := func(pts []point, t int64) int64 { // S(t): the last point at or before t
		i, _ := slices.BinarySearchFunc(pts, t, func(p point, t int64) int { return cmp.Compare(p.t, t+1) })
		if i == 0 {
			return 0
		}
		return pts[i-1].s
	}
	out := make([]int64, len(rs))
	for j, r := range rs {
		if pts := curve[r.pass]; r.answer > 0 && r.server > 0 {
			out[j] = at(pts, r.answer) - at(pts, r.answer-r.server)
		}
	}
	return out
}

// bbLevel is level lv's row.
func bbLevel(in BlackBoxInput, lv string, rs []bbReq, qs []BlackBoxRequest, names map[int64]string, ths []*thread, restOf map[int64]float64) BlackBoxLevel {
	const gap = int64(GroupGapMs * 1e6)
	l := BlackBoxLevel{Level: lv, GPUBusy: -1, ServingRestShare: -1}
	var inBusy, outBusy float64 // the serving threads' busy time in service, and at their rate outside
	var lat float64
	var states [][]float64 // each request's
	type pacc struct {
		n          int
		lo, hi     int64
		alone, lat float64
		ends       []bbReq
		held       []interval // its requests' server times
	}
	per := map[int]*pacc{}
	var held []interval // every pass's server times, for NVML
	byThread := map[int64]float64{}
	var busy, svcTot float64
	for j, r := range rs {
		q := &qs[j]
		if q.Level != lv || q.Warmup {
			continue
		}
		l.N++
		lat += q.LatencyS
		if r.newConn {
			l.Connects++
			if slowConnect(q.States[bConnect]) {
				l.SlowConnects++
			}
		}
		states = append(states, q.States[:])
		p := per[r.pass]
		if p == nil {
			p = &pacc{lo: math.MaxInt64, hi: math.MinInt64}
			per[r.pass] = p
		}
		p.n++
		p.alone += float64(r.alone) / 1e9
		p.lat += q.LatencyS
		if r.answer > 0 {
			end := r.answer + r.dl
			p.lo, p.hi = min(p.lo, end-int64(math.Round(q.LatencyS*1e9))), max(p.hi, end)
			p.ends = append(p.ends, r)
			p.held = append(p.held, interval{r.answer - r.server, r.answer})
			held = append(held, interval{r.answer - r.server, r.answer})
		}
		d := q.States[bHost] + q.States[bGPUWait] + q.States[bRunnable] + q.States[bOffCPU] + q.States[bNoThread]
		svcTot += d
		busy += q.States[bHost] + q.States[bGPUWait]
		if q.TID != 0 {
			byThread[q.TID] += d
			if rate, ok := restOf[q.TID]; ok {
				inBusy += q.States[bHost] + q.States[bGPUWait] + q.States[bRunnable]
				outBusy += rate * (d - q.States[bNoThread])
			}
		}
	}
	if inBusy > 0 {
		l.ServingRestShare = outBusy / inBusy
	}
	if l.N == 0 {
		return l
	}
	l.LatencyMeanMs = 1000 * lat / float64(l.N)
	stateStats(l.States[:], lat, states)
	if svcTot > 0 {
		l.ServiceBusy = busy / svcTot
	}
	// Throughput and Little's law per pass.
	var xs, ps, inflight, alones, helds []float64
	var batchReqs, inGroups, grouped int
	l.Groups.Sizes = map[int]int{}
	batchSizes := map[int]int{}
	for _, p := range per {
		if p.hi <= p.lo || p.n == 0 {
			continue
		}
		wall := float64(p.hi-p.lo) / 1e9
		var held float64
		for _, iv := range merge(p.held) {
			held += float64(iv.b-iv.a) / 1e9
		}
		if held <= 0 {
			continue
		}
		xs, ps = append(xs, float64(p.n)/wall), append(ps, p.alone/held)
		inflight = append(inflight, p.lat/wall)
		alones = append(alones, p.alone/float64(p.n))
		helds = append(helds, held/wall)
		// Groups of answers.
		ends := p.ends
		slices.SortFunc(ends, func(a, b bbReq) int { return cmp.Compare(a.answer, b.answer) })
		for a := 0; a < len(ends); {
			b := a + 1
			for b < len(ends) && ends[b].answer-ends[b-1].answer <= gap {
				b++
			}
			k := b - a
			l.Groups.Sizes[k]++
			grouped += k
			if k >= 2 {
				byAlone := func(x, y bbReq) int { return cmp.Compare(x.alone, y.alone) }
				lo, hi := slices.MinFunc(ends[a:b], byAlone).alone, slices.MaxFunc(ends[a:b], byAlone).alone
				inGroups += k
				// served apart, members whose own services differ by
				// more than two gaps would not end within one
				if hi-lo > 2*gap {
					batchReqs += k
					batchSizes[k]++
					l.Groups.Batches++
					l.Groups.BatchMax = max(l.Groups.BatchMax, k)
				}
			}
			a = b
		}
	}
	l.Passes = len(xs)
	if len(xs) > 0 {
		l.ReqS, l.Parallelism = stats.Mean(xs), stats.Mean(ps)
		l.ParallelismMin, l.ParallelismMax = slices.Min(ps), slices.Max(ps)
		l.InFlight, l.HeldShare = stats.Mean(inflight), stats.Mean(helds)
		l.ServiceAloneMs = 1000 * stats.Mean(alones)
	}
	if grouped > 0 {
		l.Groups.BatchShare = float64(batchReqs) / float64(grouped)
		l.Groups.GroupedShare = float64(inGroups) / float64(grouped)
	}
	l.Groups.BatchMode = mode(batchSizes, true)
	l.Shape, l.ShapeN = shapeOf(l)
	// GPU busy over the time the server held requests: a batch's GPU work
	// runs while its members wait, before any one's service alone begins.
	if len(in.GPU) > 0 && len(held) > 0 {
		l.GPU, l.GPUBusy = gpuOver(in.GPU, merge(held))
	}
	l.CoresHeld, l.Overlap, l.BusyThreads = cpuOver(ths, merge(held))
	if l.CoresHeld > 0 {
		var heldNs int64
		for _, iv := range merge(held) {
			heldNs += iv.b - iv.a
		}
		l.CPUPerRequestS = l.CoresHeld * float64(heldNs) / 1e9 / float64(l.N)
	}
	for _, t := range slices.SortedFunc(maps.Keys(byThread), func(a, b int64) int { return cmp.Compare(byThread[b], byThread[a]) }) {
		l.Threads = append(l.Threads, BlackBoxThread{names[t], t})
	}
	return l
}

// The rules that name a level's concurrency from outside
// (docs/ANALYSIS.md, "Seen from outside").
const (
	// ShapeMinWait: below this share of latency spent waiting behind
	// others, no limit was reached at the level.
	ShapeMinWait = 0.1
	// The server batches when this share of its answers came in groups
	// (ShapeGrouped) and this share in batches, groups whose members' own
	// services differ (ShapeBatchShare): a server that runs requests
	// apart ends them together only when their services match.
	ShapeGrouped    = 0.5
	ShapeBatchShare = 0.25
	// ShapeBatchGroups: and at least this many batches. Two can be
	// coincidences of two workers' ends (not of the client's clock: with
	// the kernel's receive times as often as with the reader's): a server known to
	// hold at most 2 in service (sleeping, 16 answers at c=8) was named
	// "batches of up to 2" from two such groups, in 2 of about 8 runs of
	// make test.
	ShapeBatchGroups = 3
	// ShapeOneMax: an effective parallelism below this is one at a time.
	ShapeOneMax = 1.5
)

// shapeOf names a level's concurrency: batches where most answers came in
// batches; else, where requests waited, one at a time or at most N by
// Little's law.
func shapeOf(l BlackBoxLevel) (string, int) {
	switch {
	case l.Groups.GroupedShare >= ShapeGrouped && l.Groups.BatchShare >= ShapeBatchShare && l.Groups.Batches >= ShapeBatchGroups:
		return ShapeBatch, l.Groups.BatchMax
	case l.States[bWait].Share < ShapeMinWait || l.Parallelism <= 0:
		return ShapeNone, 0
	case l.Parallelism < ShapeOneMax:
		return ShapeOne, 1
	}
	return ShapeAtMost, int(math.Round(l.Parallelism))
}

// OverlapWindowMs and BusyShare: see BlackBoxLevel.CoresHeld.
const (
	OverlapWindowMs = 20
	BusyShare       = 0.1
)

// cpuOver is the threads' on-CPU time over u (merged) in cores, the
// share of it in windows of OverlapWindowMs where together they ran more
// than one core, and the threads with BusyShare of it or more.
func cpuOver(ths []*thread, u []interval) (cores, overlap float64, busy int) {
	const w = OverlapWindowMs * int64(1e6)
	var held int64
	var wins []interval
	for _, iv := range u {
		held += iv.b - iv.a
		for a := iv.a; a < iv.b; a += w {
			wins = append(wins, interval{a, min(a+w, iv.b)})
		}
	}
	if held == 0 || len(ths) == 0 {
		return 0, 0, 0
	}
	sum := make([]float64, len(wins))
	per := make([]float64, len(ths))
	var tot float64
	for i, th := range ths {
		var all float64
		for _, iv := range u {
			all += th.integrate(iv.a, iv.b).on
		}
		if all <= 0 {
			continue // asleep throughout: no window to read
		}
		for k, iv := range wins {
			on := th.integrate(iv.a, iv.b).on
			sum[k] += on
			per[i] += on
		}
		tot += per[i]
	}
	if tot <= 0 {
		return 0, 0, 0
	}
	var over float64
	for k, iv := range wins {
		over += max(0, sum[k]-float64(iv.b-iv.a))
	}
	for _, x := range per {
		if x >= BusyShare*tot {
			busy++
		}
	}
	return tot / float64(held), over / tot, busy
}

// gpuOver is the busiest GPU's mean NVML utilization (0..1) over the
// samples whose periods end inside u (merged intervals; a window with no
// sample takes the first after it).
func gpuOver(samples []bundle.GPURecord, u []interval) (int, float64) {
	byGPU := map[int][]bundle.GPURecord{}
	for _, s := range samples {
		byGPU[s.GPU] = append(byGPU[s.GPU], s)
	}
	best, bv := 0, -1.0
	for g, ss := range byGPU {
		slices.SortFunc(ss, func(a, b bundle.GPURecord) int { return cmp.Compare(a.TS, b.TS) })
		var sum float64
		var n int
		for _, iv := range u {
			i := sort.Search(len(ss), func(i int) bool { return ss[i].TS > iv.a })
			from := i
			for ; i < len(ss) && ss[i].TS <= iv.b; i++ {
				sum += ss[i].UtilPct
				n++
			}
			if i == from && i < len(ss) { // none inside: the first after
				sum += ss[i].UtilPct
				n++
			}
		}
		if n > 0 && (sum/float64(n) > bv || sum/float64(n) == bv && g < best) {
			best, bv = g, sum/float64(n)
		}
	}
	if bv < 0 {
		return 0, -1
	}
	return best, bv / 100
}

// bbSegments lays request q's states over its client window: upload,
// wait, the service's parts in state order, delivery.
func bbSegments(q *BlackBoxRequest, r bbReq) []Segment {
	end := r.answer + r.dl
	t := end - int64(math.Round(q.LatencyS*1e9))
	out := make([]Segment, 0, 4)
	for s := 0; s < NumBBStates; s++ {
		d := int64(math.Round(q.States[s] * 1e9))
		if d <= 0 {
			continue
		}
		out = append(out, Segment{State: s, StartUnixNs: t, EndUnixNs: min(t+d, end)})
		t += d
	}
	if n := len(out); n > 0 {
		out[n-1].EndUnixNs = end // rounding: the last state ends with the request
	}
	return out
}
