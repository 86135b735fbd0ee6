// A stand-in for the CUDA driver: exports the launch functions the probe
// counts, with bodies that only count, and the blocking calls it times,
// which wait for the time set with cuStubSetSync: cuStreamSynchronize and
// cuEventSynchronize asleep (nanosleep), cuCtxSynchronize spinning on the
// clock, cuMemcpyDtoH_v2 asleep for the same time and then inside a
// cuStreamSynchronize of its own (a blocking call inside another, as the
// real driver's copies synchronize). The test compiles it as libcuda.so.1.
#define _GNU_SOURCE
#include <stddef.h>
#include <time.h>

static volatile unsigned long calls;
static volatile long sync_ns;

int cuLaunchKernel(void) { calls++; return 0; }
int cuLaunchKernelEx(void) { calls++; return 0; }
int cuGraphLaunch(void) { calls++; return 0; }

// cuStubSetSync sets how long each blocking call waits (0: it returns at
// once). Not a CUDA function.
void cuStubSetSync(long ns) { sync_ns = ns; }

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void nap(long ns)
{
	if (ns <= 0)
		return;
	long until = now_ns() + ns;
	for (long left = ns; left > 0; left = until - now_ns()) {
		struct timespec ts = {left / 1000000000L, left % 1000000000L};
		nanosleep(&ts, 0);
	}
}

static void spin(long ns)
{
	if (ns <= 0)
		return;
	long until = now_ns() + ns;
	while (now_ns() < until)
		;
}

int cuStreamSynchronize(void *stream) { (void)stream; calls++; nap(sync_ns); return 0; }
int cuEventSynchronize(void *event) { (void)event; calls++; nap(sync_ns); return 0; }
int cuCtxSynchronize(void) { calls++; spin(sync_ns); return 0; }
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n)
{
	(void)dst; (void)src; (void)n;
	nap(sync_ns);
	return cuStreamSynchronize(0);
}
