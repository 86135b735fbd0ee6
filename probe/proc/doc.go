// Package proc is the scheduler probe for machines where eBPF is not
// permitted: it samples /proc for every thread of the target's process
// tree and writes, per thread and period, one line of sched.jsonl with
// "source":"proc".
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
// Permissions: reading /proc of processes of the same user; root for
// others. Cost: three small file reads per thread per sample, ~18 µs of
// CPU per thread on this 2-core VM under load (BenchmarkSample), so ~1 %
// of a core for 50 threads at the default 10 Hz; plus the process tree
// every 500 ms and at Begin and End, from the /proc walk the probes share
// (watch.Pids; ~0.6 ms a walk here, see proctree's BenchmarkDescendants).
package proc
