// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Counts calls of CUDA driver API functions (cuLaunchKernel,
// cuLaunchKernelEx, cuGraphLaunch, ...) per thread of a watched set of
// processes. One program is attached as a uprobe at the entry of each
// function; the attach cookie is the function's index in user space's
// list. Counters are cumulative; user space diffs them.
//
// Times the driver's blocking calls (cuStreamSynchronize, cuCtxSynchronize,
// cuEventSynchronize, the synchronous device-to-host copies): sync_enter at
// their entry, sync_exit at their return (a uretprobe). The outermost call
// of a thread opens an interval (inflight, keyed by tid, with a depth so
// that a blocking call made inside another, cuMemcpy's own synchronize,
// counts once); its return streams {tid, tgid, start, end} through a ring
// buffer (struct sevent) and closes it.
//
// Built by bpf2go (see ../gen.go).

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

#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define BPF_NOEXIST 1

#define MAX_PROCS 1024
#define MAX_KEYS 16384
#define TASK_COMM_LEN 16
#define MAX_INFLIGHT 8192      // threads inside a blocking call at once
#define RING_BYTES (256 * 1024) // 6,553 events of 40 bytes
#define WAKE_BYTES (RING_BYTES / 4)

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct ckey {
	__u32 tgid;
	__u32 tid;
	__u32 sym; // index of the function in user space's list
	__u32 pad;
};

struct cval {
	__u64 calls;
	char comm[TASK_COMM_LEN]; // the thread's name at its first call
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__type(key, __u32);   // tgid
	__type(value, __u8);  // unused
} watch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct ckey);
	__type(value, struct cval);
} calls SEC(".maps");

// dropped counts calls lost because the calls map was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

// inflight is a thread's blocking call in progress: when its outermost
// call entered, and how deep it is.
struct open_call {
	__u64 start_ns; // CLOCK_MONOTONIC
	__u32 tgid;
	__u32 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, __u32); // tid
	__type(value, struct open_call);
} inflight SEC(".maps");

// sevent is one finished blocking call: [start_ns, end_ns) in
// CLOCK_MONOTONIC ns, and the thread's name at its return.
struct sevent {
	__u32 tid;
	__u32 tgid;
	__u64 start_ns;
	__u64 end_ns;
	char comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

// sync_stats: [0] outermost blocking calls entered by watched threads,
// [1] of them lost because inflight was full, [2] finished calls lost
// because the ring buffer was full. Cumulative; user space diffs them.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} sync_stats SEC(".maps");

// Force the types into BTF so that bpf2go generates Go structs for them.
const struct ckey *unused_ckey __attribute__((unused));
const struct cval *unused_cval __attribute__((unused));
const struct open_call *unused_inflight __attribute__((unused));
const struct sevent *unused_sevent __attribute__((unused));

static __always_inline void count(__u32 k)
{
	__u64 *v = bpf_map_lookup_elem(&sync_stats, &k);
	if (v)
		*v += 1;
}

SEC("uprobe")
int on_call(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!bpf_map_lookup_elem(&watch, &tgid))
		return 0;
	struct ckey k = {
		.tgid = tgid,
		.tid = (__u32)id,
		.sym = (__u32)bpf_get_attach_cookie(ctx),
	};
	struct cval *v = bpf_map_lookup_elem(&calls, &k);
	if (v) {
		__sync_fetch_and_add(&v->calls, 1);
		return 0;
	}
	struct cval n = {.calls = 1};
	bpf_get_current_comm(n.comm, sizeof(n.comm));
	if (bpf_map_update_elem(&calls, &k, &n, BPF_NOEXIST) == 0)
		return 0;
	v = bpf_map_lookup_elem(&calls, &k); // raced with another CPU
	if (v) {
		__sync_fetch_and_add(&v->calls, 1);
		return 0;
	}
	__u32 z = 0;
	__u64 *d = bpf_map_lookup_elem(&dropped, &z);
	if (d)
		*d += 1;
	return 0;
}

SEC("uprobe")
int sync_enter(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!bpf_map_lookup_elem(&watch, &tgid))
		return 0;
	struct open_call *f = bpf_map_lookup_elem(&inflight, &tid);
	if (f) {
		f->depth += 1; // a blocking call inside another: counted once
		return 0;
	}
	struct open_call n = {.start_ns = bpf_ktime_get_ns(), .tgid = tgid, .depth = 1};
	count(0);
	if (bpf_map_update_elem(&inflight, &tid, &n, BPF_NOEXIST) != 0)
		count(1);
	return 0;
}

SEC("uretprobe")
int sync_exit(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct open_call *f = bpf_map_lookup_elem(&inflight, &tid);
	if (!f)
		return 0; // entered before the probe, or not watched
	if (f->depth > 1) {
		f->depth -= 1;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	// The event is submitted before the entry is deleted: user space, which
	// reads inflight for the calls in progress at the end of a pass, sees a
	// finished call either there or in the ring buffer (or both, and keeps one).
	struct sevent *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->tid = tid;
		e->tgid = f->tgid;
		e->start_ns = f->start_ns;
		e->end_ns = now;
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		__u64 wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKE_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
		bpf_ringbuf_submit(e, wake);
	} else {
		count(2);
	}
	bpf_map_delete_elem(&inflight, &tid);
	return 0;
}
