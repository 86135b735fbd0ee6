// A stand-in for a CUDA program that waits on the GPU, linked against the
// stub libcuda.so.1.
//
// usage: syncapp N MS
//
// Prints "ready pid=P" and waits for commands on stdin (the probe attaches
// meanwhile), one byte each:
//
//	r  the thread "asrp-sync" calls cuStreamSynchronize, cuEventSynchronize,
//	   cuCtxSynchronize and cuMemcpyDtoH_v2 N times each, every call
//	   waiting MS ms (cuMemcpyDtoH_v2 2·MS: its own wait, then a
//	   cuStreamSynchronize inside it), while the thread "asrp-work" works
//	   (1 ms on, 4 ms asleep) without a blocking call; then prints "done sync=TID
//	   work=TID ns=X", X the nanoseconds the sync thread spent in the calls,
//	   timed around each;
//	l  the sync thread makes one cuStreamSynchronize of 10·MS ms: it
//	   prints "long sync=TID" before the call and "long done ns=X" after.
//
// usage: syncapp bench N WORKNS
//
// calls cuStreamSynchronize (returning at once) N times, each after
// WORKNS ns of work (spinning until the thread's CPU clock has advanced as
// much), and prints "bench ns=X cpu_ns=Y": wall and thread CPU (user and
// system, the uprobe traps and BPF programs included) nanoseconds a round.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int cuStreamSynchronize(void *stream);
int cuEventSynchronize(void *event);
int cuCtxSynchronize(void);
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n);
void cuStubSetSync(long ns);

static long n, ms;
static long sync_tid, work_tid;
static long in_calls_ns;
static volatile int working;

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void *syncer(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "asrp-sync", 0, 0, 0);
	sync_tid = syscall(SYS_gettid);
	char buf[8];
	for (long i = 0; i < n; i++) {
		long t0 = now_ns();
		cuStreamSynchronize(0);
		cuEventSynchronize(0);
		cuCtxSynchronize();
		cuMemcpyDtoH_v2(buf, 0, sizeof buf);
		in_calls_ns += now_ns() - t0;
	}
	return 0;
}

static void *worker(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "asrp-work", 0, 0, 0);
	work_tid = syscall(SYS_gettid);
	while (working) { // 1 ms of work, 4 ms asleep
		long until = now_ns() + 1000000;
		while (now_ns() < until)
			;
		struct timespec ts = {0, 4000000};
		nanosleep(&ts, 0);
	}
	return 0;
}

static void *longsync(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "asrp-sync", 0, 0, 0);
	cuStubSetSync(10 * ms * 1000000L);
	printf("long sync=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	long t0 = now_ns();
	cuStreamSynchronize(0);
	printf("long done ns=%ld\n", now_ns() - t0);
	fflush(stdout);
	cuStubSetSync(ms * 1000000L);
	return 0;
}

static long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int bench(long rounds, long work)
{
	cuStubSetSync(0);
	long t0 = now_ns(), c0 = cpu_ns();
	for (long i = 0; i < rounds; i++) {
		long until = cpu_ns() + work;
		while (work > 0 && cpu_ns() < until)
			;
		cuStreamSynchronize(0);
	}
	long c1 = cpu_ns(), t1 = now_ns();
	printf("bench ns=%.1f cpu_ns=%.1f\n", (double)(t1 - t0) / rounds, (double)(c1 - c0) / rounds);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "bench") == 0) {
		printf("ready pid=%d\n", getpid());
		fflush(stdout);
		char c;
		if (read(0, &c, 1) != 1)
			return 1;
		return bench(atol(argv[2]), atol(argv[3]));
	}
	if (argc < 3)
		return 2;
	n = atol(argv[1]);
	ms = atol(argv[2]);
	cuStubSetSync(ms * 1000000L);
	printf("ready pid=%d\n", getpid());
	fflush(stdout);
	char c;
	while (read(0, &c, 1) == 1) {
		pthread_t a, b;
		if (c == 'r') {
			in_calls_ns = 0;
			working = 1;
			if (pthread_create(&b, 0, worker, 0) || pthread_create(&a, 0, syncer, 0))
				return 1;
			pthread_join(a, 0);
			working = 0;
			pthread_join(b, 0);
			printf("done sync=%ld work=%ld ns=%ld\n", sync_tid, work_tid, in_calls_ns);
			fflush(stdout);
		} else if (c == 'l') {
			if (pthread_create(&a, 0, longsync, 0))
				return 1;
			pthread_detach(a);
		}
	}
	return 0;
}
