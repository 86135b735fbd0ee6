// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Counts calls of CUDA driver API functions (cuLaunchKernel,
// cuLaunchKernelEx, cuGraphLaunch, ...) per thread of a watched set of
// processes. One program is attached as a uprobe at the entry of each
// function; the attach cookie is the function's index in user space's
// list. Counters are cumulative; user space diffs them.
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
#define BPF_NOEXIST 1

#define MAX_PROCS 1024
#define MAX_KEYS 16384
#define TASK_COMM_LEN 16

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

// Force the types into BTF so that bpf2go generates Go structs for them.
const struct ckey *unused_ckey __attribute__((unused));
const struct cval *unused_cval __attribute__((unused));

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
