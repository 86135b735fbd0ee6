// A stand-in for a CUDA program, linked against the stub libcuda.so.1.
//
// usage: app N1 N2 N3 [bench]
//
// Prints "ready pid=P" and waits for a byte on stdin (the probe attaches
// meanwhile). Then a thread named "asrp-launch" calls cuLaunchKernel N1
// times and cuLaunchKernelEx N2 times while the main thread calls
// cuGraphLaunch N3 times; it prints "done main=TID launch=TID ns=X" (X:
// nanoseconds per cuLaunchKernel call in the thread) and waits for EOF on
// stdin before it exits.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int cuLaunchKernel(void);
int cuLaunchKernelEx(void);
int cuGraphLaunch(void);

static long n1, n2, n3;
static long launch_tid;
static double ns_per_call;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *launcher(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "asrp-launch", 0, 0, 0);
	launch_tid = syscall(SYS_gettid);
	double t0 = now_ns();
	for (long i = 0; i < n1; i++)
		cuLaunchKernel();
	if (n1 > 0)
		ns_per_call = (now_ns() - t0) / n1;
	for (long i = 0; i < n2; i++)
		cuLaunchKernelEx();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	n1 = atol(argv[1]);
	n2 = atol(argv[2]);
	n3 = atol(argv[3]);
	printf("ready pid=%d\n", getpid());
	fflush(stdout);
	char c;
	if (read(0, &c, 1) != 1)
		return 1;
	pthread_t th;
	if (pthread_create(&th, 0, launcher, 0))
		return 1;
	for (long i = 0; i < n3; i++)
		cuGraphLaunch();
	pthread_join(th, 0);
	printf("done main=%ld launch=%ld ns=%.1f\n", (long)syscall(SYS_gettid), launch_tid, ns_per_call);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
