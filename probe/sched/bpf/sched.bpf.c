// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Per-thread scheduler accounting for the threads of a watched set of
// processes (tgids). Aggregates in a hash map keyed by tid; user space reads
// the cumulative counters and diffs them. For the time bins
// (sched_bins.jsonl) the switch program also streams the threads' on-CPU
// and run-queue intervals through a ring buffer (struct event).
//
// Built by bpf2go (see ../gen.go). It needs no vmlinux.h: the few kernel
// structs it reads are declared below with preserve_access_index, so the
// loader relocates their fields against the running kernel's BTF (CO-RE).

typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_NOEXIST 1
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

#define MAX_PROCS 1024
#define MAX_THREADS 8192
#define NBUCKETS 32 // a power of two (the index is masked with NBUCKETS-1)
#define TASK_COMM_LEN 16
#define RING_BYTES (1 << 20)       // the events ring buffer (32,768 events)
#define WAKE_BYTES (RING_BYTES / 4) // wake the reader once this much is pending

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct sched_entity {
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

// sched_info exists with CONFIG_SCHED_INFO (schedstat, delay accounting).
struct sched_info {
	__u64 run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int __state;
	int on_cpu;
	int pid;
	int tgid;
	char comm[TASK_COMM_LEN];
	struct sched_entity se;
	struct sched_info sched_info;
	__u64 start_time;
} __attribute__((preserve_access_index));

// Before Linux 5.14 the state field was "long state".
struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

struct bpf_iter_meta;

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// tstat is one thread's cumulative counters. Times are bpf_ktime_get_ns
// (CLOCK_MONOTONIC) nanoseconds.
//
// On-CPU time and run-queue delay are the kernel's own cumulative counters
// (se.sum_exec_runtime, sched_info.run_delay), copied at each switch-out
// and at each run of the task iterator: a missed event leaves them right,
// where sums of intervals between events would lose the interval. The
// events add what the kernel does not keep per thread: the switch counts
// and the histogram of run-queue waits.
struct tstat {
	__u64 kern_cpu_ns;   // se.sum_exec_runtime
	__u64 kern_runq_ns;    // sched_info.run_delay (completed waits)
	__u64 start_ns;     // task start_time (CLOCK_MONOTONIC)
	__u64 seen_ns;      // last time the task iterator saw the thread
	__u64 voluntary;    // switch-outs while blocking
	__u64 involuntary;  // switch-outs while still runnable (preempted, yielded)
	__u64 runq_count;   // completed run-queue waits
	__u64 runq_ns;      // their total, as the events saw them
	__u64 last_out;     // time of the last switch-out, 0 if unknown
	__u64 enq_ts;       // time it became runnable and waits for a CPU, 0 if not waiting
	__u64 last_in;      // start of the on-CPU interval in progress (its switch-in), 0 when switched out
	__u64 exec_out;     // se.sum_exec_runtime at the last switch-out
	__u32 tgid;
	__u32 kflags;       // K_RUNQ, K_WAITING, K_ONCPU
	__u64 hist[NBUCKETS]; // run-queue waits: [0] < 1 us, [k] in [2^(k-1), 2^k) us
	char comm[TASK_COMM_LEN];
};

#define K_RUNQ 1    // kern_runq_ns is the kernel's (CONFIG_SCHED_INFO)
#define K_WAITING 2 // at seen_ns: runnable and not on a CPU
#define K_ONCPU 4   // at seen_ns: on a CPU

// event is one interval of a thread, streamed for the time bins: on-CPU
// from a switch-in to the switch-out, or waiting on the run queue from a
// wake-up (or preemption) to the switch-in. Times are bpf_ktime_get_ns.
// EV_MARK is written by the task iterator at the end of each run: user
// space has read every event before it once it reads the mark.
struct event {
	__u32 tid;
	__u8 kind; // EV_ONCPU, EV_RUNQ, EV_MARK
	__u8 pad[3];
	__u64 start_ns;
	__u64 end_ns;
};

#define EV_ONCPU 0
#define EV_RUNQ 1
#define EV_MARK 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__type(key, __u32);   // tgid
	__type(value, __u8);  // unused
} watch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);   // tid
	__type(value, struct tstat);
} stats SEC(".maps");

// scratch builds a new entry off the 512-byte stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tstat);
} scratch SEC(".maps");

// dropped counts events lost because stats was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

// ring_dropped counts events lost because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ring_dropped SEC(".maps");

// Force the types into BTF so that bpf2go generates Go structs for them.
const struct tstat *unused_tstat __attribute__((unused));
const struct event *unused_event __attribute__((unused));

static __always_inline bool watched(__u32 tgid)
{
	return bpf_map_lookup_elem(&watch, &tgid) != 0;
}

static __always_inline void count_drop(void)
{
	__u32 k = 0;
	__u64 *d = bpf_map_lookup_elem(&dropped, &k);
	if (d)
		*d += 1;
}

// emit streams one interval. The reader is woken only once a quarter of
// the ring is pending (and by the iterator's mark), not for every event.
static __always_inline void emit(__u32 tid, __u8 kind, __u64 start, __u64 end, bool wake)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 k = 0;
		__u64 *d = bpf_map_lookup_elem(&ring_dropped, &k);
		if (d)
			*d += 1;
		return;
	}
	e->tid = tid;
	e->kind = kind;
	e->pad[0] = 0;
	e->pad[1] = 0;
	e->pad[2] = 0;
	e->start_ns = start;
	e->end_ns = end;
	if (!wake && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKE_BYTES)
		wake = 1;
	bpf_ringbuf_submit(e, wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

// get_entry inserts a zeroed entry for tid unless one exists, then returns
// the entry in the map.
static __always_inline struct tstat *get_entry(__u32 tid, __u32 tgid)
{
	struct tstat *s = bpf_map_lookup_elem(&stats, &tid);
	if (s)
		return s;
	__u32 k = 0;
	struct tstat *n = bpf_map_lookup_elem(&scratch, &k);
	if (!n)
		return 0;
	__builtin_memset(n, 0, sizeof(*n));
	n->tgid = tgid;
	bpf_map_update_elem(&stats, &tid, n, BPF_NOEXIST); // EEXIST: raced, fine
	s = bpf_map_lookup_elem(&stats, &tid);
	if (!s)
		count_drop();
	return s;
}

// kernel_times copies t's cumulative on-CPU time and run-queue delay. They
// only grow; an older value read late never replaces a newer one.
static __always_inline void kernel_times(struct tstat *s, struct task_struct *t)
{
	__u64 run = t->se.sum_exec_runtime;
	if (run > s->kern_cpu_ns)
		s->kern_cpu_ns = run;
	if (bpf_core_field_exists(t->sched_info)) {
		__u64 d = t->sched_info.run_delay;
		if (d > s->kern_runq_ns)
			s->kern_runq_ns = d;
		s->kflags |= K_RUNQ;
	}
	s->start_ns = t->start_time;
}

// log2_bucket returns 0 for us == 0, else floor(log2(us)) + 1, capped.
static __always_inline __u32 log2_bucket(__u64 us)
{
	__u32 r = 0;
	if (us == 0)
		return 0;
	if (us >> 32) { us >>= 32; r += 32; }
	if (us >> 16) { us >>= 16; r += 16; }
	if (us >> 8) { us >>= 8; r += 8; }
	if (us >> 4) { us >>= 4; r += 4; }
	if (us >> 2) { us >>= 2; r += 2; }
	if (us >> 1) { r += 1; }
	r += 1;
	if (r > NBUCKETS - 1)
		r = NBUCKETS - 1;
	return r;
}

// missed_switch_in stands in for the intervals of a thread whose switch-in
// was not seen: the kernel does not always reach the sched_switch
// tracepoint (here: after a switch-out that the tracepoint did not see
// either), and runs are skipped at times (recursion_misses). The thread
// switched out at out and is on a CPU at now: it ran for exec (the growth
// of se.sum_exec_runtime since out; less than the time it ran by the time
// the hypervisor stole, and by up to a tick for a thread still running),
// taken as the end of the span, and before that waited on the run queue
// if it was runnable, from enq or out. Without it the whole span would
// read as off-CPU. It emits the wait and returns the estimated switch-in.
static __always_inline __u64 missed_switch_in(__u32 tid, __u64 now, __u64 out, __u64 enq, __u64 exec)
{
	if (now <= out)
		return now;
	if (exec > now - out)
		exec = now - out;
	__u64 in = now - exec;
	__u64 from = enq > out ? enq : out;
	if (enq && in > from)
		emit(tid, EV_RUNQ, from, in, 0);
	return in;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = prev->tgid;

	if (tgid && watched(tgid)) {
		struct tstat *s = get_entry(prev->pid, tgid);
		if (s) {
			__u64 in = s->last_in, out = s->last_out, enq = s->enq_ts;
			__u64 exec = prev->se.sum_exec_runtime, exec0 = s->exec_out;
			s->last_in = 0;
			s->last_out = now;
			s->exec_out = exec;
			s->tgid = tgid;
			if (preempt || prev_state == 0) {
				// Still runnable: it waits on the run queue from now.
				__sync_fetch_and_add(&s->involuntary, 1);
				s->enq_ts = now;
			} else {
				__sync_fetch_and_add(&s->voluntary, 1);
				s->enq_ts = 0;
			}
			// current is still prev inside the tracepoint.
			bpf_get_current_comm(s->comm, sizeof(s->comm));
			kernel_times(s, prev);
			// On a CPU since its switch-in (last_in, a flag as much as a
			// time: bpf_ktime_get_ns may read a little behind on the CPU
			// the thread moved to, so comparing times would lose the
			// interval of a thread that moved at once). The entry is
			// updated before the event is submitted: user space relies
			// on that order (End).
			if (in) {
				if (now > in)
					emit(prev->pid, EV_ONCPU, in, now, 0);
			} else if (out) {
				in = missed_switch_in(prev->pid, now, out, enq, exec > exec0 ? exec - exec0 : 0);
				if (now > in)
					emit(prev->pid, EV_ONCPU, in, now, 0);
			}
		}
	}

	tgid = next->tgid;
	if (tgid && watched(tgid)) {
		struct tstat *s = get_entry(next->pid, tgid);
		if (s) {
			__u64 enq = s->enq_ts;
			if (enq && now > enq) {
				__u64 d = now - enq;
				__u32 b = log2_bucket(d / 1000) & (NBUCKETS - 1);
				__sync_fetch_and_add(&s->runq_count, 1);
				__sync_fetch_and_add(&s->runq_ns, d);
				__sync_fetch_and_add(&s->hist[b], 1);
			}
			// Waited from the later of the wake-up and the switch-out, so
			// that the wait cannot overlap the previous on-CPU interval.
			__u64 out = s->last_out;
			__u64 from = enq > out ? enq : out;
			s->enq_ts = 0;
			// Not before the switch-out (a clock behind): the intervals
			// of a thread do not overlap.
			s->last_in = now > out ? now : out;
			if (enq && now > from)
				emit(next->pid, EV_RUNQ, from, now, 0);
		}
	}
	return 0;
}

static __always_inline int enqueue(struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (!tgid || !watched(tgid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct tstat *s = get_entry(p->pid, tgid);
	if (s)
		s->enq_ts = now;
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	return enqueue(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	return enqueue(p);
}

// on_fork watches a new process as soon as a watched process forks it, so
// that its first scheduling events are not lost before user space's next
// refresh of the watch set.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	if (ctgid == ptgid || !watched(ptgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&watch, &ctgid, &one, 0);
	return 0;
}

// seed visits every thread of the watched processes: it creates an entry
// for a thread that has none yet (one not switched since its process was
// watched; without it a thread spinning on a CPU of its own would never be
// seen), copies the kernel's counters and marks the thread seen, so that
// user space can tell the living from the exited. User space runs it
// before each read of the stats map.
SEC("iter/task")
int seed(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t) {
		// The last call of a run: mark the end of its events.
		__u64 now = bpf_ktime_get_ns();
		emit(0, EV_MARK, now, now, 1);
		return 0;
	}
	__u32 tgid = t->tgid;
	if (!tgid || !watched(tgid))
		return 0;
	__u32 tid = t->pid;
	__u64 now = bpf_ktime_get_ns();
	long state;
	if (bpf_core_field_exists(t->__state))
		state = t->__state;
	else
		state = ((struct task_struct___old *)t)->state;
	int on_cpu = t->on_cpu;
	struct tstat *s = get_entry(tid, tgid);
	if (!s)
		return 0;
	if (!s->comm[0])
		bpf_probe_read_kernel_str(s->comm, sizeof(s->comm), t->comm);
	kernel_times(s, t);
	if (!on_cpu && state == 0) {
		if (!s->enq_ts)
			s->enq_ts = now; // runnable: waiting for a CPU from now on
		s->kflags |= K_WAITING;
	} else {
		s->kflags &= ~K_WAITING;
	}
	if (on_cpu) {
		// Running since before it was watched (its on-CPU interval
		// starts now), or its switch-in was missed.
		if (!s->last_in) {
			__u64 out = s->last_out, exec = t->se.sum_exec_runtime;
			s->last_in = out ? missed_switch_in(tid, now, out, s->enq_ts, exec > s->exec_out ? exec - s->exec_out : 0) : now;
		}
		s->kflags |= K_ONCPU;
	} else {
		s->kflags &= ~K_ONCPU;
	}
	s->seen_ns = now;
	return 0;
}
