package sched

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

const pingPongEnv = "ASRPROF_SCHED_PINGPONG"

// runPingPongIfChild runs the ping-pong workload and exits when this
// process was started by BenchmarkSwitchCost; otherwise it returns at once.
func runPingPongIfChild() {
	if os.Getenv(pingPongEnv) != "1" {
		return
	}
	if err := runPingPong(); err != nil {
		fmt.Fprintln(os.Stderr, "ping-pong:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runPingPong passes a byte back and forth between two threads over two
// pipes, each blocking in read(2) until the other writes: two voluntary
// switches (and two wake-ups) a round, as fast as the scheduler goes. It
// returns when stdin reaches EOF.
func runPingPong() error {
	var ping, pong [2]int
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	tids := make(chan int, 2)
	bounce := func(in, out int, first bool) {
		runtime.LockOSThread()
		tids <- unix.Gettid()
		b := []byte{0}
		if first {
			_, _ = unix.Write(out, b)
		}
		for {
			if _, err := unix.Read(in, b); err != nil {
				return
			}
			if _, err := unix.Write(out, b); err != nil {
				return
			}
		}
	}
	go bounce(pong[0], ping[1], true)
	go bounce(ping[0], pong[1], false)
	if _, err := fmt.Printf("ping=%d pong=%d\n", <-tids, <-tids); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// switches returns the context switches of all of pid's threads so far.
func switches(pid int) uint64 {
	var n uint64
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += x
			} else if v, ok := strings.CutPrefix(l, "nonvoluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

func selfCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSwitchCost measures what the probe costs a switch-heavy target:
// a two-thread ping-pong over pipes, in alternating phases without and
// with the probe (a pass with Begin and End). It reports the ping-pong's
// switches/s in each, and per switch of the target the BPF programs' run
// time (they also run for every other switch on the machine, counted in
// bpf-ns/run) and the CPU time of this process, the probe's user space
// (less what it uses without the probe). Run with -benchtime=1x: the
// phases last phase (1 s) each, rounds times.
//
//	go test -run '^$' -bench SwitchCost -benchtime=1x ./probe/sched/
func BenchmarkSwitchCost(b *testing.B) {
	need.Root(b, "to load BPF programs and read their run time")
	probetest.EnableStats(b)
	pid, _ := probetest.StartChild(b, pingPongEnv+"=1", "GOMAXPROCS=4")
	const (
		phase  = time.Second
		rounds = 4
	)
	var (
		offSw, onSw, onRuns             uint64
		onBPF, onUser, offUser, endTime time.Duration
		offWall, onWall                 time.Duration
	)
	for range b.N {
		for range rounds {
			s0, c0, t0 := switches(pid), selfCPU(), time.Now()
			time.Sleep(phase)
			offSw += switches(pid) - s0
			offUser += selfCPU() - c0
			offWall += time.Since(t0)

			p := New()
			if err := p.Start(context.Background(), probe.Target{PID: pid}, &probetest.Sink{Dir: b.TempDir()}); err != nil {
				b.Fatalf("Start: %v", err)
			}
			o0, err := p.Overhead()
			if err != nil {
				b.Fatal(err)
			}
			s0, c0, t0 = switches(pid), selfCPU(), time.Now()
			per := probe.Period{Level: "bench", Repeat: 1, StartUnixNs: t0.UnixNano()}
			p.Begin(per)
			time.Sleep(phase)
			per.EndUnixNs = time.Now().UnixNano()
			e0 := time.Now()
			if err := p.End(context.Background(), per); err != nil {
				b.Fatalf("End: %v", err)
			}
			endTime += time.Since(e0)
			onSw += switches(pid) - s0
			onUser += selfCPU() - c0
			onWall += time.Since(t0)
			o1, err := p.Overhead()
			if err != nil {
				b.Fatal(err)
			}
			onBPF += o1.Runtime - o0.Runtime
			onRuns += o1.Runs - o0.Runs
			if l := p.Losses(); l != "" {
				b.Logf("losses: %s", l)
			}
			if err := p.Stop(context.Background()); err != nil {
				b.Fatalf("Stop: %v", err)
			}
		}
	}
	offRate := float64(offSw) / offWall.Seconds()
	onRate := float64(onSw) / onWall.Seconds()
	bpfPerSw := float64(onBPF) / float64(onSw)
	userPerSw := (float64(onUser) - float64(offUser)*onWall.Seconds()/offWall.Seconds()) / float64(onSw)
	b.ReportMetric(offRate, "sw/s-off")
	b.ReportMetric(onRate, "sw/s-on")
	b.ReportMetric(float64(onBPF)/float64(onRuns), "bpf-ns/run")
	b.ReportMetric(bpfPerSw, "bpf-ns/sw")
	b.ReportMetric(userPerSw, "user-ns/sw")
	b.ReportMetric(float64(endTime.Milliseconds())/float64(rounds*b.N), "end-ms")
	b.Logf("ping-pong %.0f switches/s without the probe, %.0f with (%.1f%%); per switch of the target: BPF %.0f ns (%.0f ns a run, %.0f runs/s machine-wide), user space %.0f ns; End %v a pass",
		offRate, onRate, 100*(onRate/offRate-1), bpfPerSw, float64(onBPF)/float64(onRuns), float64(onRuns)/onWall.Seconds(), userPerSw,
		endTime/time.Duration(rounds*b.N))
}
