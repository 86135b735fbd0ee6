// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Per-thread scheduler accounting for the threads of a watched set of
// processes (tgids). Aggregates in a hash map keyed by tid; user space reads
// the cumulative counters and diffs them. No events are streamed.
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
#define BPF_NOEXIST 1

#define MAX_PROCS 1024
#define MAX_THREADS 8192
#define NBUCKETS 32 // a power of two (the index is masked with NBUCKETS-1)
#define TASK_COMM_LEN 16

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct task_struct {
	unsigned int __state;
	int on_cpu;
	int pid;
	int tgid;
	char comm[TASK_COMM_LEN];
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
struct tstat {
	__u64 oncpu_ns;     // sum of completed on-CPU slices
	__u64 offcpu_ns;    // sum of completed off-CPU intervals
	__u64 voluntary;    // switch-outs while blocking
	__u64 involuntary;  // switch-outs while still runnable (preempted, yielded)
	__u64 runq_count;   // completed run-queue waits
	__u64 runq_ns;      // their total
	__u64 last_in;      // time of the last switch-in, 0 if unknown
	__u64 last_out;     // time of the last switch-out, 0 if unknown
	__u64 enq_ts;       // time it became runnable and waits for a CPU, 0 if not waiting
	__u32 tgid;
	__u32 running;      // 1 between switch-in and switch-out
	__u64 hist[NBUCKETS]; // run-queue waits: [0] < 1 us, [k] in [2^(k-1), 2^k) us
	char comm[TASK_COMM_LEN];
};

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

// Force the type into BTF so that bpf2go generates a Go struct for it.
const struct tstat *unused_tstat __attribute__((unused));

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

// new_entry inserts a zeroed entry for tid unless one exists, then returns
// the entry in the map. It fills in last_in/last_out/running from the
// arguments only when it creates the entry.
static __always_inline struct tstat *get_entry(__u32 tid, __u32 tgid, __u64 now, __u32 running)
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
	n->running = running;
	if (running)
		n->last_in = now;
	else
		n->last_out = now;
	bpf_map_update_elem(&stats, &tid, n, BPF_NOEXIST); // EEXIST: raced, fine
	s = bpf_map_lookup_elem(&stats, &tid);
	if (!s)
		count_drop();
	return s;
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

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = prev->tgid;

	if (tgid && watched(tgid)) {
		struct tstat *s = get_entry(prev->pid, tgid, now, 1);
		if (s) {
			if (s->running && s->last_in && now > s->last_in)
				__sync_fetch_and_add(&s->oncpu_ns, now - s->last_in);
			s->running = 0;
			s->last_out = now;
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
		}
	}

	tgid = next->tgid;
	if (tgid && watched(tgid)) {
		struct tstat *s = get_entry(next->pid, tgid, now, 0);
		if (s) {
			if (!s->running && s->last_out && now > s->last_out)
				__sync_fetch_and_add(&s->offcpu_ns, now - s->last_out);
			__u64 enq = s->enq_ts;
			if (enq && now > enq) {
				__u64 d = now - enq;
				__u32 b = log2_bucket(d / 1000) & (NBUCKETS - 1);
				__sync_fetch_and_add(&s->runq_count, 1);
				__sync_fetch_and_add(&s->runq_ns, d);
				__sync_fetch_and_add(&s->hist[b], 1);
			}
			s->enq_ts = 0;
			s->running = 1;
			s->last_in = now;
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
	struct tstat *s = get_entry(p->pid, tgid, now, 0);
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

// seed creates an entry for every thread of a watched process that has
// none yet (a thread that has not been switched since the process was
// watched), with on_cpu deciding whether it is running now. Without it a
// thread spinning on a CPU of its own would never be seen. User space runs
// it by reading the iterator after each change of the watch set.
SEC("iter/task")
int seed(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;
	__u32 tgid = t->tgid;
	if (!tgid || !watched(tgid))
		return 0;
	__u32 tid = t->pid;
	if (bpf_map_lookup_elem(&stats, &tid))
		return 0;
	__u32 k = 0;
	struct tstat *n = bpf_map_lookup_elem(&scratch, &k);
	if (!n)
		return 0;
	__builtin_memset(n, 0, sizeof(*n));
	__u64 now = bpf_ktime_get_ns();
	n->tgid = tgid;
	if (t->on_cpu) {
		n->running = 1;
		n->last_in = now;
	} else {
		n->last_out = now;
		long state;
		if (bpf_core_field_exists(t->__state))
			state = t->__state;
		else
			state = ((struct task_struct___old *)t)->state;
		if (state == 0)
			n->enq_ts = now; // runnable: waiting for a CPU from now on
	}
	bpf_probe_read_kernel_str(n->comm, sizeof(n->comm), t->comm);
	if (bpf_map_update_elem(&stats, &tid, n, BPF_NOEXIST) && !bpf_map_lookup_elem(&stats, &tid))
		count_drop();
	return 0;
}
