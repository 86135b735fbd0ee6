package cpu

// The OpenTelemetry eBPF profiler (go.opentelemetry.io/ebpf-profiler,
// version v0.0.202633, used as a library) is the preferred engine for this
// probe: it unwinds without frame pointers (from .eh_frame), names Python
// frames (function, file, line) by reading CPython's own data structures,
// and names kernel and Go frames. It would plug in behind Adapter: Start
// would build tracer.NewTracer with a reporter.TraceReporter, then call
// StartPIDEventProcessor, AttachTracer, EnableProfiling, AttachSchedMonitor
// and StartMapMonitors; Watch would set the tgids that the reporter keeps
// (the library samples every process and has no PID filter of its own);
// Collect would hand over what the reporter aggregated since the last call.
//
// It is NOT wired into this build, and the module is not a dependency.
// At start the library raises RLIMIT_MEMLOCK to unlimited and aborts when
// it cannot, which is the case in the sandbox where this project is built
// and tested (hard limit 8 MiB, no CAP_SYS_RESOURCE), although kernels
// from 5.11 account BPF memory to the cgroup and need no rlimit. Where the
// limit can be raised (root on the GPU hosts, `ulimit -l unlimited`), it
// works. Until it is wired in, the frame-pointer Sampler is the engine in
// force everywhere, with the limits that package cpu's documentation
// lists (no Python frames; stacks stop at code without frame pointers).
