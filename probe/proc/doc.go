// Package proc is the scheduler probe for machines where eBPF is not
// permitted: it samples /proc for every thread of the target's process
// tree and writes, per thread and period, one line of sched.jsonl with
// "source":"proc", and its time bins, one line of proc_bins.jsonl.
//
// What it records, per thread: cpu_s (on-CPU time, from
// /proc/PID/task/TID/schedstat's first field in ns; from utime+stime of
// task/TID/stat, 10 ms ticks, where schedstat reads zeros), wall_s,
// utilization (cpu_s/wall_s), runq_wait_s (time runnable but waiting for a
// CPU, schedstat's second field; 0 where schedstat is off) and
// voluntary/involuntary context switches (task/TID/status). It gives no
// run-queue latency histogram and no off-CPU time; use probe/sched for
// those.
//
// Counters are cumulative in the kernel, so a period is the difference of
// a read at Begin and one at End; the samples in between (Config.Hz) only
// keep the last values of threads that exit during the period. A thread
// that lives less than one sampling interval inside a period is missed.
//
// Time bins (BinsFile, proc_bins.jsonl, in the format of sched_bins.jsonl
// and read by the same reader): besides the totals, a goroutine locked to
// a thread of its own reads every thread's /proc/PID/task/TID/schedstat
// every DefaultBinMs (20 ms), with pread at offset 0 on a
// file kept open (a /proc file regenerates its text on a read from there,
// so the fast loop makes one system call a thread), and spreads what the
// on-CPU and run-queue counters grew by between two reads evenly over
// that interval, split across the bins it overlaps in whole µs that add up
// (spread). The kernel adds a run-queue wait to its counter when the wait
// ends, and a running thread's time at its ticks, so a growth longer than
// the interval is spread over as long a time before the read
// (creditSpan). The tree refresh above hands the sampler its threads (new
// ones opened, exited ones closed, names); a thread started since about
// the previous refresh has its counters binned from its start, so a
// process found late by the tree walk keeps its time (spread evenly up to
// when it was found). A thread's last growth before it exits is lost.
// Where schedstat reads zeros there are no bins, and Detail says so.
// Bounded at MaxBinThreads threads and MaxPassDuration a pass, and
// MaxSampledThreads files open; what is beyond is counted in
// dropped_events and Losses.
//
// Permissions: reading /proc of processes of the same user; root for
// others. Cost: three small file reads per thread per sample, ~18 µs of
// CPU per thread on this 2-core VM under load (BenchmarkSample), so ~1 %
// of a core for 50 threads at the default 10 Hz; plus the process tree
// every 500 ms and at Begin and End, from the /proc walk the probes share
// (watch.Pids; ~0.6 ms a walk here, see proctree's BenchmarkDescendants).
// The time bins add ~2 µs of CPU a thread a read in a tight loop
// (BenchmarkSweep50Threads), more when the loop wakes every 20 ms: 0.75-1.3
// % of a core on its thread for 50 threads, 0.9-2.7 % (median 1.3) for the
// whole process (BenchmarkProbe50Threads; docs/PROBES.md).
package proc
