#!/usr/bin/python3
# The plain-Python anchor of docs/PERFORMANCE.md section 3: the seed study's
# stage table (SGLang-Omni events preset) over a bundle's requests.jsonl and
# events.jsonl, stdlib only: per level, mean / p95 (ms) of each stage.
import json, sys
d = sys.argv[1]
ev = {}  # server request id -> {event name: first timestamp}, scheduler stage, stage_complete by stage
for line in open(d + "/events.jsonl"):
    e = json.loads(line)
    r = ev.setdefault(e["request_id"], [{}, None, {}, None])
    r[0].setdefault(e["event_name"], e["timestamp_ns"])
    if e["event_name"] == "scheduler_prefill_start" and r[1] is None:
        r[1] = e["stage"]
    if e["event_name"] == "stage_complete":
        r[2][e["stage"]] = e["timestamp_ns"]; r[3] = e["timestamp_ns"]
P = [("build", "scheduler_request_build_start", "scheduler_request_build_end"),
     ("build→queued", "scheduler_request_build_end", "scheduler_queue_enter"),
     ("queued→scheduled", "scheduler_queue_enter", "scheduler_prefill_start"),
     ("first forward", "scheduler_prefill_start", "scheduler_prefill_end")]
levels = {}
for line in open(d + "/requests.jsonl"):
    q = json.loads(line)
    if q.get("warmup") or q.get("status") != "ok":
        continue
    lv = levels.setdefault(q["level"], {})
    r = ev.get(q.get("server_request_id"))
    if r is None:
        continue
    f, done = r[0], r[2].get(r[1], r[3])
    st = {s: (f[b] - f[a]) / 1e9 for s, a, b in P if a in f and b in f}
    if "scheduler_prefill_end" in f and done is not None:
        st["decode tail"] = (done - f["scheduler_prefill_end"]) / 1e9
    if "stage_input_received" in f and r[3] is not None:
        st["total"] = (r[3] - f["stage_input_received"]) / 1e9
        st["client overhead"] = q["latency_s"] - st["total"]
    for s, v in st.items():
        lv.setdefault(s, []).append(v)
def p95(xs):
    xs = sorted(xs); k = (len(xs) - 1) * 0.95; i = int(k)
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * (k - i)
names = [p[0] for p in P] + ["decode tail", "total", "client overhead"]
print("level\t" + "\t".join(names))
for lv, st in levels.items():
    print(lv + "\t" + "\t".join("%.2f / %.2f" % (1e3 * sum(st[s]) / len(st[s]), 1e3 * p95(st[s])) if st.get(s) else "-" for s in names))
