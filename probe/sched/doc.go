// Package sched is the scheduler probe: per-thread CPU accounting of the
// target's process tree from the kernel's scheduler tracepoints, with
// eBPF. For each thread and period it appends one line to sched.jsonl:
//
//	{"level","repeat","warmup","pid","tid","name","cpu_s","wall_s",
//	 "utilization","offcpu_s","runq_p50_us","runq_p99_us","runq_count",
//	 "runq_wait_s","voluntary_switches","involuntary_switches","source":"ebpf"}
//
// How: BPF programs on the BTF tracepoints sched_switch, sched_wakeup,
// sched_wakeup_new and sched_process_fork (tp_btf, attached without
// tracefs) aggregate in a hash map keyed by tid, for the processes (tgids)
// in a second map, the watch set. User space fills the watch set from
// watch.Pids (one /proc walk shared by the probes, at most 400 ms old)
// every DefaultRefresh (500 ms);
// the fork program adds a watched process's children at once. The
// counters are not streamed: Begin and End read the cumulative counters
// and End writes the differences.
//
//   - cpu_s and runq_wait_s: the kernel's cumulative se.sum_exec_runtime
//     and sched_info.run_delay (the first two fields of
//     /proc/PID/task/TID/schedstat), copied by the switch program at each
//     switch-out and by a task iterator (iter/task) at each read, which
//     also creates entries for threads not switched since they were
//     watched (a thread spinning on a CPU of its own). Cumulative counters
//     stay right when the kernel skips an event (recursion_misses); sums of
//     intervals between events did not (they lost 12 % of a busy thread's
//     CPU time in CI). A wait in progress at a read is added from the
//     events' wake-up time. They leave out stolen and interrupt time.
//   - offcpu_s: the part of the period the thread was alive and not on a
//     CPU (alive: from its start_time, to the read or its last switch-out
//     when the iterator no longer sees it).
//   - voluntary/involuntary: a switch-out while blocking is voluntary; one
//     while still runnable (preempted, or prev_state TASK_RUNNING) is
//     involuntary, as the kernel's nvcsw/nivcsw count them.
//   - run-queue latency: from wake-up (or involuntary switch-out) to the
//     next switch-in, counted in a log2 histogram of microseconds (bucket
//     0: < 1 µs; bucket k: [2^(k-1), 2^k) µs). runq_p50_us and
//     runq_p99_us are interpolated linearly inside the bucket that holds
//     the rank, so they are exact at bucket edges and within a factor of
//     two inside. The tracepoints time a little more than the kernel's
//     run_delay (it stops the clock when __schedule starts).
//   - wall_s is the time between the Begin and End reads; utilization is
//     cpu_s/wall_s (1.0 = one core).
//
// Time bins: End also appends to sched_bins.jsonl (BinsFile) one
// bundle.ThreadBins per thread that ran or waited for a CPU in the pass:
//
//	{"level","repeat","warmup","pid","tid","name","start_unix_ns",
//	 "bin_ms":10,"oncpu_us":[...],"runq_us":[...],"dropped_events"}
//
// Bin i covers [start_unix_ns + i·10 ms, +10 ms), for ceil(pass / 10 ms)
// bins, all whole (the last one ends up to 10 ms after the pass, so two
// passes back to back share that stretch); off-CPU is 10,000 − oncpu −
// runq µs. The switch program streams each watched thread's intervals
// through a 1 MiB ring buffer (24-byte events: tid, kind 0 on-CPU from
// switch-in to switch-out, kind 1 run-queue from wake-up or preemption to
// switch-in, start and end in CLOCK_MONOTONIC ns); a goroutine splits
// them into the bins of the open pass, on the unix clock by an offset
// taken at Start. End closes the pass: it waits for the last bin to be
// over, runs the task iterator, whose last call writes a mark into the
// ring buffer, and once the reader has read the mark adds the intervals
// still in progress (a thread on a CPU, or waiting for one) from the stats
// map, without counting one twice whose event came meanwhile. The kernel
// does not always reach the sched_switch tracepoint (on the test VM, ftrace
// missed it as well for about 1 switch-in of the busy thread in 200: those
// that followed a thread of the sandbox's agent, none of whose switch-outs
// was traced), so a switch-in can go unseen: the program then takes the
// growth of se.sum_exec_runtime since the last switch-out as the run that
// ended at the next switch-out, and the rest of the span as the wait
// before it. Bounded: bins.MaxBinThreads (256)
// threads and bins.MaxPassBins (30 min) of bins a pass (4 bytes a bin, kept in
// chunks of 10 s per thread that ran in them: 176 MiB at worst, 256 threads
// busy through a 30-minute pass); intervals beyond the bounds or lost to
// a full ring buffer are counted in dropped_events and Losses. The bins'
// on-CPU time is the intervals between tracepoints, whose boundaries are
// not the kernel's (and which include stolen time): on the test VM it
// reads 7-11 µs a switch more than cpu_s, and the run-queue wait as much
// less; their sum agrees with cpu_s + runq_wait_s within -0.011..+0.019 s
// over 1.5 s passes.
//
// Permissions: root (CAP_BPF and CAP_PERFMON) and a kernel with BTF
// (/sys/kernel/btf/vmlinux, 5.8 or later for tp_btf and task iterators).
// Start returns an error wrapping probe.ErrNotSupported otherwise.
//
// Cost: the switch and wake-up programs run for every event on the
// machine and filter by tgid: ~300-360 ns a run measured here (~0.5-0.8 %
// of one CPU at 17,000-30,000 events/s, see TestOverhead), more for
// watched threads. The time bins add, per switch of a watched thread
// (BenchmarkSwitchCost, a ping-pong at 200,000-900,000 switches/s):
// ~80 ns of BPF time (the switch program's ring-buffer events; 180 →
// 260 ns a switch of the target, median of 7 alternating runs) and ~165
// ns of the reader goroutine's CPU, and End waits up to 10 ms for the
// last bin. User space reads the shared process tree every DefaultRefresh
// and reads the map at Begin and End. Memory: ~3 MiB of maps (8,192
// threads, 1,024 processes); events of threads beyond that are dropped and
// counted (Overhead).
//
// The BPF object is generated by bpf2go from bpf/sched.bpf.c (go generate;
// needs clang and libbpf-dev) and committed.
package sched
