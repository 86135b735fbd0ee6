// A stand-in for the CUDA driver: exports the launch functions the probe
// counts, with bodies that only count. The test compiles it as
// libcuda.so.1.
static volatile unsigned long calls;

int cuLaunchKernel(void) { calls++; return 0; }
int cuLaunchKernelEx(void) { calls++; return 0; }
int cuGraphLaunch(void) { calls++; return 0; }
