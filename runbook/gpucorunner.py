#!/usr/bin/env python3
"""asrprof's GPU co-runner (runbook/gpucorunner.go embeds it; docs/CAPACITY.md).

Keeps a share of one GPU's time busy with its own kernels, beside the server
under test (the GPU time-slices between the two processes' contexts): a loop
of chunks of float16 matmuls, each chunk timed with CUDA events, each
followed by a sleep of busy * (1 - share) / share, so that the stream is busy
`share` of the wall time. It reports what it achieved, measured the same way:

  {"ready": true, ...}            once calibrated (stdout, one line)
  {"t": ..., "share": ..., ...}   a sample a second (stdout)
  the report                      at the end (stdout, and --json PATH)

The report's achieved_share is the events' busy time over the wall time
(a duty cycle of its stream); tflops is the matmul rate while busy,
calibrated_tflops the same at the start (alone, where the GPU was otherwise
idle then); work_share = achieved_share * tflops / calibrated_tflops is the
share of the GPU's matmul work it took: time-slicing with a busy server
stretches its kernels, so that is less than the duty cycle.

--check only says whether torch with CUDA is there (exit 0) or why not
(exit 3, {"error": ...}). SIGTERM or SIGINT ends the loop and writes the
report. Needs only torch.
"""

import argparse
import json
import signal
import sys
import time


def emit(obj):
    print(json.dumps(obj), flush=True)


def main(argv):
    p = argparse.ArgumentParser(description="asrprof GPU co-runner: keep a share of the GPU busy")
    p.add_argument("--share", type=float, default=0.5, help="share of wall time the GPU runs our kernels (0 < share <= 1)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--size", type=int, default=4096, help="matmul size n (n x n float16)")
    p.add_argument("--chunk-ms", type=float, default=5.0, help="GPU time of one busy chunk, calibrated")
    p.add_argument("--duration", type=float, default=0, help="seconds to run (0: until SIGTERM)")
    p.add_argument("--json", default="", help="write the report here too")
    p.add_argument("--check", action="store_true", help="only check for torch with CUDA")
    a = p.parse_args(argv)
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        emit({"error": "%s cannot import torch: %s" % (sys.executable, e)})
        return 3
    if not torch.cuda.is_available():
        emit({"error": "%s has torch %s (CUDA %s) but torch.cuda.is_available() is False: built without CUDA, or no GPU visible"
              % (sys.executable, torch.__version__, torch.version.cuda)})
        return 3
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev)
    if a.check:
        emit({"ok": True, "torch": torch.__version__, "cuda": torch.version.cuda, "device": name})
        return 0
    if not 0 < a.share <= 1:
        emit({"error": "--share %g: want 0 < share <= 1" % a.share})
        return 2

    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(True))

    torch.cuda.set_device(dev)
    n = a.size
    x = torch.randn(n, n, device=dev, dtype=torch.float16)
    y = torch.randn(n, n, device=dev, dtype=torch.float16)
    z = torch.empty(n, n, device=dev, dtype=torch.float16)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def chunk(k):
        e0.record()
        for _ in range(k):
            torch.mm(x, y, out=z)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)  # ms

    chunk(10)  # warm-up: cuBLAS picks its kernel
    one = chunk(20) / 20
    k = max(1, round(a.chunk_ms / one))
    flop = 2.0 * n ** 3
    calibrated = flop / (one / 1e3) / 1e12
    emit({"ready": True, "device": name, "torch": torch.__version__, "matmul_n": n, "matmuls_per_chunk": k,
          "matmul_ms": one, "calibrated_tflops": calibrated, "target_share": a.share})

    start = time.monotonic()
    busy_ms, kernels = 0.0, 0
    win_start, win_busy, win_k = start, 0.0, 0
    samples = []
    while not stop:
        if a.duration and time.monotonic() - start >= a.duration:
            break
        b = chunk(k)
        busy_ms += b
        win_busy += b
        kernels += k
        win_k += k
        if a.share < 1:
            time.sleep(b * (1 - a.share) / a.share / 1e3)
        now = time.monotonic()
        if now - win_start >= 1.0:
            s = {"t": round(now - start, 3), "share": win_busy / ((now - win_start) * 1e3),
                 "tflops": flop * win_k / (win_busy / 1e3) / 1e12 if win_busy > 0 else 0.0}
            samples.append(s)
            emit(s)
            win_start, win_busy, win_k = now, 0.0, 0
    wall_ms = (time.monotonic() - start) * 1e3
    rep = {
        "target_share": a.share,
        "achieved_share": busy_ms / wall_ms if wall_ms > 0 else 0.0,
        "busy_ms": busy_ms,
        "wall_ms": wall_ms,
        "matmuls": kernels,
        "matmul_n": n,
        "tflops": flop * kernels / (busy_ms / 1e3) / 1e12 if busy_ms > 0 else 0.0,
        "calibrated_tflops": calibrated,
        # The share of the GPU's matmul work it took: the duty cycle times
        # the rate while busy over the rate alone (calibrated at the start,
        # valid where the GPU was otherwise idle then).
        "work_share": (busy_ms / wall_ms) * (flop * kernels / (busy_ms / 1e3) / 1e12) / calibrated if busy_ms > 0 and wall_ms > 0 else 0.0,
        "device": name,
        "torch": torch.__version__,
        "samples": samples,
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=2)
    emit(rep)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
