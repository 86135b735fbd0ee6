// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// On-CPU stack sampling of a watched set of processes (tgids). A
// perf_event program runs on every CPU-clock sample of every CPU; for a
// watched process it takes the user stack (frame pointers, by the kernel's
// perf callchain walker) and the kernel stack into a stack-trace map and
// counts the sample in a hash map keyed by thread, stacks and comm.
//
// Double buffered: buffer 0 and buffer 1 each have their own counts and
// stacks map; control[0] says which one the program fills. User space
// flips it, then reads and clears the other one, so no sample is lost to
// the race between reading and deleting.
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
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_STACK_TRACE 7
#define BPF_NOEXIST 1
#define BPF_F_USER_STACK (1ULL << 8)

#define MAX_PROCS 1024
#define MAX_KEYS 16384
#define MAX_STACKS 16384
#define MAX_DEPTH 127 // the kernel's default perf_event_max_stack
#define TASK_COMM_LEN 16
#define EFAULT 14

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// skey identifies what a sample is counted under. A negative stack id is
// the error bpf_get_stackid returned (-EFAULT: no such stack, e.g. no
// kernel stack for a sample taken in user mode; -EEXIST: the stacks map
// had a different stack in that slot; -ENOMEM: it is full).
struct skey {
	__u32 tgid;
	__u32 tid;
	__s32 user_stack;
	__s32 kernel_stack;
	char comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__type(key, __u32);   // tgid
	__type(value, __u8);  // unused
} watch SEC(".maps");

struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct skey);
	__type(value, __u64);
};

struct stacks_map {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_DEPTH * sizeof(__u64));
};

struct counts_map counts0 SEC(".maps");
struct counts_map counts1 SEC(".maps");
struct stacks_map stacks0 SEC(".maps");
struct stacks_map stacks1 SEC(".maps");

// control[0] is the buffer being filled (0 or 1).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} control SEC(".maps");

// Per-CPU counters of samples: [0] watched samples counted, [1] samples
// lost because the counts map was full, [2] samples whose user stack was
// lost (stacks map full, or its slot held another stack: bpf_get_stackid
// keeps the first stack of a hash bucket).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Force the type into BTF so that bpf2go generates a Go struct for it.
const struct skey *unused_skey __attribute__((unused));

static __always_inline void bump(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &i);
	if (v)
		*v += 1;
}

static __always_inline void count(void *counts, struct skey *k)
{
	__u64 *v = bpf_map_lookup_elem(counts, k);
	if (v) {
		__sync_fetch_and_add(v, 1);
		bump(0);
		return;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(counts, k, &one, BPF_NOEXIST) == 0) {
		bump(0);
		return;
	}
	// Another CPU inserted it first, or the map is full.
	v = bpf_map_lookup_elem(counts, k);
	if (v) {
		__sync_fetch_and_add(v, 1);
		bump(0);
		return;
	}
	bump(1);
}

SEC("perf_event")
int on_sample(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!tgid || !bpf_map_lookup_elem(&watch, &tgid))
		return 0;

	__u32 zero = 0;
	__u32 *buf = bpf_map_lookup_elem(&control, &zero);
	__u32 b = buf ? *buf : 0;

	struct skey k;
	__builtin_memset(&k, 0, sizeof(k));
	k.tgid = tgid;
	k.tid = (__u32)id;
	bpf_get_current_comm(k.comm, sizeof(k.comm));
	if (b == 0) {
		k.user_stack = bpf_get_stackid(ctx, &stacks0, BPF_F_USER_STACK);
		k.kernel_stack = bpf_get_stackid(ctx, &stacks0, 0);
		count(&counts0, &k);
	} else {
		k.user_stack = bpf_get_stackid(ctx, &stacks1, BPF_F_USER_STACK);
		k.kernel_stack = bpf_get_stackid(ctx, &stacks1, 0);
		count(&counts1, &k);
	}
	if (k.user_stack < 0 && k.user_stack != -EFAULT)
		bump(2);
	return 0;
}
