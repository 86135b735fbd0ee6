#!/usr/bin/python3
"""A concurrency-sweep ASR benchmark client in the style of SGLang-Omni's
benchmarks/eval/benchmark_asr_seedtts.py, for asrprof's proxy test.

Like that client it loads a sample list, and for each concurrency level
(one after another) and repeat it sends every sample once through an
aiohttp session under a semaphore: a multipart POST to
/v1/audio/transcriptions with model, language, response_format=json,
max_new_tokens and the file (audio/wav), no X-Request-Id and no
traceparent. It times each request with time.perf_counter() around the
post and the read of its JSON answer, prints one line per pass and a
summary table, and writes every request's latency to --output.

Written for asrprof's tests (not SGLang-Omni's code); needs only Debian's
python3-aiohttp.
"""

import argparse
import asyncio
import json
import os
import statistics
import time

import aiohttp


def load_manifest(path, max_samples):
    base = os.path.dirname(os.path.abspath(path))
    samples = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            audio = row["audio"]
            if not os.path.isabs(audio):
                audio = os.path.join(base, audio)
            samples.append({"id": row["id"], "audio": audio, "text": row.get("text", "")})
            if max_samples and len(samples) >= max_samples:
                break
    return samples


async def send_one(session, url, sample, args):
    with open(sample["audio"], "rb") as f:
        audio_bytes = f.read()
    form = aiohttp.FormData()
    form.add_field("model", args.model_path)
    form.add_field("language", args.lang)
    form.add_field("response_format", "json")
    form.add_field("max_new_tokens", "128")
    form.add_field("file", audio_bytes, filename=os.path.basename(sample["audio"]), content_type="audio/wav")
    out = {"sample_id": sample["id"], "ok": False, "text": ""}
    start = time.perf_counter()
    try:
        async with session.post(url, data=form) as resp:
            if resp.status != 200:
                out["error"] = "HTTP %d: %s" % (resp.status, await resp.text())
            else:
                payload = await resp.json()
                out["text"] = str(payload.get("text", ""))
                out["ok"] = True
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        out["error"] = str(exc)
    finally:
        out["latency_s"] = time.perf_counter() - start
    return out


async def run_pass(samples, args, concurrency):
    url = "http://%s:%d/v1/audio/transcriptions" % (args.host, args.port)
    sem = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def bounded(s):
            async with sem:
                return await send_one(session, url, s, args)

        t0 = time.perf_counter()
        outputs = await asyncio.gather(*(bounded(s) for s in samples))
        wall = time.perf_counter() - t0
    return outputs, wall


async def sweep(samples, args, concurrencies):
    rows, raw = [], []
    for conc in concurrencies:
        for rep in range(1, args.repeats + 1):
            outputs, wall = await run_pass(samples, args, conc)
            lats = [o["latency_s"] for o in outputs if o["ok"]]
            ok = len(lats)
            lat_mean = statistics.mean(lats) if lats else 0.0
            print(
                "[conc=%d rep=%d] wall=%.3fs thrpt=%.3f/s lat_mean=%.4fs ok=%d/%d"
                % (conc, rep, wall, ok / wall if wall else 0.0, lat_mean, ok, len(outputs)),
                flush=True,
            )
            rows.append({"concurrency": conc, "repeat": rep, "wall_clock_s": wall, "latency_mean_s": lat_mean,
                         "ok": ok, "total": len(outputs)})
            for o in outputs:
                o.update(concurrency=conc, repeat=rep)
                raw.append(o)
    return rows, raw


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--meta", required=True, help="a JSONL manifest: {id, audio, text}")
    p.add_argument("--lang", default="en")
    p.add_argument("--max-samples", type=int, default=0)
    p.add_argument("--concurrencies", default="1,4")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--model-path", default="refserver")
    p.add_argument("--output", default="asr_sweep_results.json")
    args = p.parse_args()
    concurrencies = [int(c) for c in args.concurrencies.split(",") if c.strip()]
    samples = load_manifest(args.meta, args.max_samples)
    print("Loaded %d samples; sweeping concurrency=%s x %d repeats against %s:%d"
          % (len(samples), concurrencies, args.repeats, args.host, args.port), flush=True)
    rows, raw = asyncio.run(sweep(samples, args, concurrencies))
    print("\n| conc | rep | wall(s) | lat mean(s) | ok |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %d | %.3f | %.4f | %d/%d |" % (r["concurrency"], r["repeat"], r["wall_clock_s"], r["latency_mean_s"], r["ok"], r["total"]))
    with open(args.output, "w") as f:
        json.dump({"results": rows, "requests": raw}, f, indent=1)
    failed = sum(r["total"] - r["ok"] for r in rows)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
