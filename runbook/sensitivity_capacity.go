package runbook

// What 100 % is: the cores the server could use, from its threads in the
// cycle's unrestricted run (docs/CAPACITY.md, "What 100 % means").

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
)

// A thread is busy, over the scored passes of the unrestricted run, when
// it ran BusyThreadCores of a core or more, or ran half that and was
// runnable (on a CPU or waiting on a run queue) BusyRunnable of the time
// or more: one core of 100 % is given for each busy thread. (Runnable
// time alone would count a thread that barely runs but waits long for
// each wakeup on a loaded host.)
const (
	BusyThreadCores = 0.2
	BusyRunnable    = 0.5
)

// capacity is what 100 % is in one cycle.
type capacity struct {
	cores float64 // whole cores (or --cpu-base)
	why   string  // "1 busy thread", ...
	// ran is the share of their runnable time the busy threads spent on
	// a CPU in the unrestricted run: below 1 where the host's other load
	// took CPU from them (1 where none is busy).
	ran float64
}

func (c capacity) String() string {
	return fmt.Sprintf("%s: %s", coresText(c.cores), c.why)
}

func coresText(c float64) string {
	if c == 1 {
		return "1 core"
	}
	return fmt.Sprintf("%g cores", math.Round(c*1000)/1000)
}

// busyThreads are the busy threads, busiest first.
func busyThreads(threads []bundle.ThreadUse) []bundle.ThreadUse {
	var out []bundle.ThreadUse
	for _, t := range threads {
		if t.Cores >= BusyThreadCores || t.Cores >= BusyThreadCores/2 && t.Cores+t.WaitCores >= BusyRunnable {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Cores > out[j].Cores })
	return out
}

// capacityOf is what the server could use: whole cores, one per busy
// thread, at least one and at least the cores it used (rounded up), at
// most the CPUs it may run on (ncpu).
func capacityOf(used float64, threads []bundle.ThreadUse, ncpu int) capacity {
	busy := busyThreads(threads)
	n := len(busy)
	k := max(1, n, int(math.Ceil(used-0.05))) // 1.02 cores measured is one core
	why := countOf(n, "busy thread")
	if n == 0 {
		why = fmt.Sprintf("no busy thread (none ran %g of a core), so one core", BusyThreadCores)
	}
	if k > max(1, n) {
		why += fmt.Sprintf(", and it used %.2f cores", used)
	}
	if ncpu > 0 && k > ncpu {
		k = ncpu
		why += fmt.Sprintf(", capped by the %d CPUs it may run on", ncpu)
	}
	return capacity{cores: float64(k), why: why, ran: ranShare(busy, k)}
}

// ranShare is the share of their runnable time that the busy threads
// spent on a CPU, counting busy threads that shared k cores among
// themselves as not held back. 1 where none is busy: a thread that runs
// for microseconds between sleeps waits as long for its wakeup, which says
// nothing about the CPU it could get.
func ranShare(busy []bundle.ThreadUse, k int) float64 {
	var run, want float64
	for _, t := range busy {
		run += t.Cores
		want += t.Cores + t.WaitCores
	}
	if want <= 0 {
		return 1
	}
	r := run / want
	if len(busy) > k { // more busy threads than cores: they wait for each other
		r *= float64(len(busy)) / float64(k)
	}
	return min(1, r)
}

// threadKey is a thread of the tree.
type threadKey struct{ pid, tid int }

type threadSample struct{ run, wait uint64 } // ns

// cpuSample is the server tree's CPU at a moment.
type cpuSample struct {
	at      time.Time
	cpu     float64 // CPU seconds of the live threads
	threads map[threadKey]threadSample
}

type sampler struct {
	stopc chan struct{}
	done  chan []cpuSample
	comm  map[threadKey]string
}

// startSampler reads every thread's schedstat (run and run-queue wait
// time) every 100 ms until stop.
func startSampler(pid int) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan []cpuSample, 1), comm: map[threadKey]string{}}
	go func() {
		var out []cpuSample
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			out = append(out, s.sample(pid))
			select {
			case <-s.stopc:
				s.done <- out
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample(pid int) cpuSample {
	cs := cpuSample{at: time.Now(), threads: map[threadKey]threadSample{}}
	var ns uint64
	for _, p := range proctree.Descendants(pid) {
		for _, tid := range proctree.Threads(p) {
			st, err := proctree.ReadSchedstat(p, tid)
			if err != nil {
				continue
			}
			k := threadKey{p, tid}
			cs.threads[k] = threadSample{st.RunNs, st.WaitNs}
			ns += st.RunNs
			if _, ok := s.comm[k]; !ok {
				s.comm[k] = proctree.Comm(p, tid)
			}
		}
	}
	if len(cs.threads) == 0 { // no schedstat here: /proc's ticks
		cs.cpu = cpulimit.TreeCPUSeconds(pid)
	} else {
		cs.cpu = float64(ns) / 1e9
	}
	return cs
}

func (s *sampler) stop() []cpuSample {
	close(s.stopc)
	return <-s.done
}

// interp is a series' value at t: linear between the samples around it,
// its first value before them and its last after (a thread seen late was
// born then; one gone early had exited and keeps what it used).
func interp(ts []time.Time, vs []float64, t time.Time) float64 {
	i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(t) })
	switch {
	case i == 0:
		return vs[0]
	case i == len(ts):
		return vs[len(vs)-1]
	}
	f := float64(t.Sub(ts[i-1])) / float64(ts[i].Sub(ts[i-1]))
	return vs[i-1] + f*(vs[i]-vs[i-1])
}

// passUse is the tree's CPU use over the scored passes of the bundle in
// dir, in cores: in all, and per thread (busiest first), from the samples.
func passUse(dir string, samples []cpuSample, comm map[threadKey]string) (float64, []bundle.ThreadUse) {
	b, err := bundle.Open(dir)
	if err != nil || len(samples) < 2 {
		return 0, nil
	}
	var wins [][2]int64 // the scored passes, Unix ns
	var wall float64
	for _, l := range b.Manifest.Levels {
		if !l.Warmup && l.EndUnixNs > l.StartUnixNs {
			wins = append(wins, [2]int64{l.StartUnixNs, l.EndUnixNs})
			wall += float64(l.EndUnixNs-l.StartUnixNs) / 1e9
		}
	}
	if len(wins) == 0 {
		return 0, nil
	}
	over := func(ts []time.Time, vs []float64) float64 {
		var s float64
		for _, w := range wins {
			s += interp(ts, vs, time.Unix(0, w[1])) - interp(ts, vs, time.Unix(0, w[0]))
		}
		return s / wall
	}
	type series struct {
		ts        []time.Time
		run, wait []float64
	}
	per := map[threadKey]*series{}
	var ats []time.Time
	var tot []float64
	for _, s := range samples {
		ats = append(ats, s.at)
		tot = append(tot, s.cpu)
		for k, v := range s.threads {
			sr := per[k]
			if sr == nil {
				sr = &series{}
				per[k] = sr
			}
			sr.ts = append(sr.ts, s.at)
			sr.run = append(sr.run, float64(v.run)/1e9)
			sr.wait = append(sr.wait, float64(v.wait)/1e9)
		}
	}
	if len(per) == 0 {
		return over(ats, tot), nil
	}
	var used float64
	var out []bundle.ThreadUse
	for k, sr := range per {
		u := bundle.ThreadUse{PID: k.pid, TID: k.tid, Comm: comm[k], Cores: over(sr.ts, sr.run), WaitCores: over(sr.ts, sr.wait)}
		used += u.Cores
		if u.Cores > 0 || u.WaitCores > 0 {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b bundle.ThreadUse) int {
		return cmp.Or(cmp.Compare(b.Cores, a.Cores), cmp.Compare(a.TID, b.TID))
	})
	return used, out
}
