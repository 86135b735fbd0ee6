#!/usr/bin/python3
"""Time the whisper engine's pieces outside the server.

    whisper_bench.py [--model tiny|large-v3] [--model-path DIR] [--device cpu|cuda]
                     [--dtype ...] [--batches 1,4] [--cuda-graphs] [--repeat N]

Prints one JSON object: model build (synthetic init, or --model-path load)
seconds, features (log-mel of 30 s, numpy), encoder forward (one 30 s
window), first forward (encoder + cross K/V + prompt), and the mean decode
step at each batch size (cache slots = the largest batch; positions 10..),
eager and, with --cuda-graphs, replayed.  Each timing is the mean of
--repeat runs after one untimed run; CUDA is synchronized around it.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whisper_engine  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, choices=whisper_engine.MODEL_CHOICES)
    p.add_argument("--model-path", default="")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"))
    p.add_argument("--dtype", default=None, choices=whisper_engine.DTYPES)
    p.add_argument("--batches", default="1,4")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--torch-threads", type=int, default=0)
    a = p.parse_args(argv)
    threads = whisper_engine.prepare_threads(a.torch_threads)
    import time
    import numpy as np
    import torch
    import whisper_model as wm
    torch.set_num_threads(threads)
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype_name = a.dtype or ("bfloat16" if dev == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    batches = sorted(int(b) for b in a.batches.split(","))
    res = {"device": dev, "dtype": dtype_name, "torch": torch.__version__, "threads": threads,
           "cpus": os.cpu_count()}
    if dev == "cuda":
        res["gpu"] = torch.cuda.get_device_name()
    t0 = time.perf_counter()
    if a.model_path:
        dims = wm.load_dims(a.model_path)
        model = wm.Whisper(dims, device=dev, dtype=dtype)
        res["weights"] = wm.load_weights(model, a.model_path)
    else:
        dims = wm.Dims.named(a.model or ("large-v3" if dev == "cuda" else "tiny"))
        model = wm.Whisper(dims, device=dev, dtype=dtype)
        wm.init_synthetic(model, 0)
        res["weights"] = "synthetic"
    wm.sync(dev)
    res["model"] = dims.name() or a.model_path
    res["build_s"] = time.perf_counter() - t0
    res["params_M"] = sum(q.numel() for q in model.parameters()) / 1e6
    specials = wm.Specials(dims.vocab)
    r = wm.Runner(model, specials, max(batches), suppress_eot=True)
    res["attention"] = "sdpa" if r.sdpa else "matmul"
    res["cache_MiB"] = r.cache_bytes / 2 ** 20
    feat = wm.Featurizer(dims.n_mels)
    audio = (0.1 * np.sin(2 * np.pi * 300 * np.arange(5 * 16000) / 16000)).astype(np.float32)
    feat(audio)
    t0 = time.perf_counter()
    for _ in range(3):
        mel = torch.from_numpy(feat(audio))
    res["features_ms"] = (time.perf_counter() - t0) / 3 * 1e3
    rep = a.repeat
    with torch.no_grad():
        r.encode(mel)
        res["encoder_ms"] = wm.timed(lambda: r.encode(mel), dev, max(2, rep // 3)) * 1e3
        r.prefill(0, mel)
        res["first_forward_ms"] = wm.timed(lambda: r.prefill(0, mel), dev, max(2, rep // 3)) * 1e3
        for s in range(1, max(batches)):
            r.prefill(s, mel)

        def steps(b):
            r.decode(b, [220] * b, [10] * b)
            return wm.timed(lambda: r.decode(b, [220] * b, [10] * b), dev, rep) * 1e3
        res["decode_step_ms"] = {str(b): round(steps(b), 3) for b in batches}
        if a.cuda_graphs:
            t0 = time.perf_counter()
            r.capture_graphs(batches)
            res["graph_capture_s"] = time.perf_counter() - t0
            res["decode_step_graph_ms"] = {str(b): round(steps(b), 3) for b in batches}
    if dev == "cuda":
        res["peak_GiB"] = torch.cuda.max_memory_allocated() / 2 ** 30
    for k, v in list(res.items()):
        if isinstance(v, float):
            res[k] = round(v, 3)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
