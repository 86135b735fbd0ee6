#!/usr/bin/env bash
# make bench: the figures of docs/PERFORMANCE.md, each beside its anchor
# measured in the same run. Loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin runs/bench
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/asrprof
mkdir -p "$CACHE"
PORT=${BENCH_PORT:-18099}
CONC=${BENCH_CONC:-64}
N=${BENCH_N:-4000}
REPEATS=${BENCH_REPEATS:-5}
DUR=${BENCH_DURATION:-10s}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
# BENCH_ONLY=driver,otlp,cuda,proc,analysis,tables,probes runs only the sections named.
want() { [ -z "${BENCH_ONLY:-}" ] || [[ ",$BENCH_ONLY," == *",$1,"* ]]; }

if want driver; then
# Issue 14: asrprof capture with default flags at one closed-loop level
# against vegeta, alternating pairs (asrprof, vegeta) so both sides see the
# same machine; client CPU per request is /usr/bin/time user+sys over the
# completed requests (whole commands: asrprof's preflight, fingerprint,
# probes, receiver, bundle and tables included), req/s is vegeta's
# throughput and the mean of asrprof's passes.
DCONC=${BENCH_DRIVER_CONC:-32}
DPAIRS=${BENCH_DRIVER_PAIRS:-3}
DDUR=${BENCH_DRIVER_DURATION:-8s}
# BENCH_ASRPROF=path runs another asrprof binary (an older build, for a
# before/after) in the same protocol.
ASRPROF=${BENCH_ASRPROF:-bin/asrprof}
go build -ldflags='-s -w' -o bin/noopserver ./internal/fakeasr/cmd/noopserver
if [ ! -x "$CACHE/vegeta-v12.13.0" ]; then
  echo "== building vegeta v12.13.0 (once)"
  (cd tools/vegeta && go build -o "$CACHE/vegeta-v12.13.0" github.com/tsenart/vegeta/v12)
fi
VEGETA="$CACHE/vegeta-v12.13.0"
# The default OTLP receiver listens on 4317/4318; when another program
# holds them, the receiver (still on) moves to other ports, and says so.
OTLPFLAGS=()
for p in 4317 4318; do
  if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
    OTLPFLAGS=(--otlp-grpc "127.0.0.1:${BENCH_OTLP_GRPC:-14317}" --otlp-http "127.0.0.1:${BENCH_OTLP_HTTP:-14318}")
  fi
done
[ ${#OTLPFLAGS[@]} -gt 0 ] && echo "== note: 127.0.0.1:4317/4318 taken by another program; asrprof's receiver listens on ${OTLPFLAGS[1]} and ${OTLPFLAGS[3]} instead"
bin/noopserver -addr "127.0.0.1:$PORT" & SRV=$!
trap 'kill ${SRV:-} 2>/dev/null || true' EXIT
for i in $(seq 1 50); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
W=runs/refserver/data
# One 100 KB WAV (16 kHz mono, ~3.2 s) used by both load generators; the
# manifest lists it so that asrprof's three passes (the default --repeats)
# last about as long as one vegeta attack: sized from a short vegeta probe.
rm -rf "$W"; mkdir -p "$W"
go run ./tools/benchdata -out "$W" -n 1 -bytes 102400 -url "http://127.0.0.1:$PORT" >/dev/null
"$VEGETA" attack -rate=0 -workers="$DCONC" -max-workers="$DCONC" -duration=2s -keepalive=true \
  -targets="$W/vegeta.targets" | "$VEGETA" report -type=json > runs/bench/vegeta-probe.json
DN=$(python3 -c "import json,sys,re;d=json.load(open('runs/bench/vegeta-probe.json'));s=float(re.sub('s$','','$DDUR'));print(max(1000,int(d['throughput']*s/3)))")
go run ./tools/benchdata -out "$W" -n "$DN" -bytes 102400 -url "http://127.0.0.1:$PORT" >/dev/null
echo "== driver cost ($ASRPROF): closed loop c=$DCONC, 100 KB multipart, $DPAIRS alternating pairs; vegeta -duration=$DDUR; asrprof capture with default flags over $DN entries (3 passes)"
srv_cpu() { awk '{print $14+$15}' "/proc/$SRV/stat"; }  # the no-op server's CPU, clock ticks
for pair in $(seq 1 "$DPAIRS"); do
  srv_cpu > "runs/bench/driver-asrprof-$pair.srv"
  /usr/bin/time -f "%U %S %e" -o "runs/bench/driver-asrprof-$pair.time" \
    "$ASRPROF" capture --target "http://127.0.0.1:$PORT" --dataset "$W/manifest.jsonl" \
      --concurrency "$DCONC" "${OTLPFLAGS[@]}" --out "runs/bench/driver-asrprof-$pair" --overwrite \
      > "runs/bench/driver-asrprof-$pair.stdout" 2> "runs/bench/driver-asrprof-$pair.stderr"
  srv_cpu >> "runs/bench/driver-asrprof-$pair.srv"
  srv_cpu > "runs/bench/driver-vegeta-$pair.srv"
  /usr/bin/time -f "%U %S %e" -o "runs/bench/driver-vegeta-$pair.time" \
    "$VEGETA" attack -rate=0 -workers="$DCONC" -max-workers="$DCONC" -duration="$DDUR" -keepalive=true \
      -targets="$W/vegeta.targets" > "runs/bench/driver-vegeta-$pair.bin"
  srv_cpu >> "runs/bench/driver-vegeta-$pair.srv"
  "$VEGETA" report -type=json "runs/bench/driver-vegeta-$pair.bin" > "runs/bench/driver-vegeta-$pair.json"
done
python3 - "$DPAIRS" <<'PY'
import json, os, sys
pairs = int(sys.argv[1])
def cpu(name):
    u, s, e = map(float, open(f"runs/bench/{name}.time").read().split())
    return u + s
def srv(name, n):  # the server's CPU per completed request while name ran
    a, b = map(float, open(f"runs/bench/{name}.srv").read().split())
    return (b - a) / os.sysconf("SC_CLK_TCK") / n
rows, rr, cr = [], [], []
print("| pair | vegeta req/s | asrprof req/s | asrprof/vegeta req/s | vegeta CPU/request | asrprof CPU/request | asrprof/vegeta CPU | server CPU/request beside vegeta | beside asrprof | vegeta requests | asrprof requests |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for i in range(1, pairs + 1):
    v = json.load(open(f"runs/bench/driver-vegeta-{i}.json"))
    v_ok = v["requests"] * v["success"]
    v_rps, v_cpu = v["throughput"], cpu(f"driver-vegeta-{i}") / v_ok
    r = json.load(open(f"runs/bench/driver-asrprof-{i}/results.json"))["results"][0]
    a_ok = r["total"] - r.get("failed", 0)
    a_rps = sum(x["requests_per_s"] for x in r["per_repeat"]) / len(r["per_repeat"])
    a_cpu = cpu(f"driver-asrprof-{i}") / a_ok
    rr.append(a_rps / v_rps); cr.append(a_cpu / v_cpu)
    vs, as_ = srv(f"driver-vegeta-{i}", v_ok), srv(f"driver-asrprof-{i}", a_ok)
    print(f"| {i} | {v_rps:,.0f} | {a_rps:,.0f} | {a_rps/v_rps:.2f} | {v_cpu*1e6:.0f} µs | {a_cpu*1e6:.0f} µs | {a_cpu/v_cpu:.2f} | {vs*1e6:.0f} µs | {as_*1e6:.0f} µs | {v_ok:,.0f} | {a_ok:,.0f} |")
print(f"\nasrprof/vegeta req/s: {min(rr):.2f}–{max(rr):.2f} (goal ≥ 1.2); CPU per request: {min(cr):.2f}–{max(cr):.2f}× vegeta's (goal ≤ 1)")
PY
fi

# --- OTLP ingest: spans per second decoded and stored on one core ---------
if want otlp; then
echo
echo "== OTLP ingest (trace/otlp BenchmarkReceiverHTTPProto, GOMAXPROCS=1, 512-span protobuf batches into spans.otlp)"
go test -run '^$' -bench 'BenchmarkReceiverHTTPProto$' -benchtime 3s -cpu 1 ./trace/otlp | grep -E 'Benchmark|spans/s'
fi

# --- The cuda probe's timing of a blocking call: the uprobe + uretprobe pair
# on the stand-in libcuda's cuStreamSynchronize, 1e6 immediate calls and 1e5
# after 10 µs of work, probe off and on, five alternating pairs (root).
if want cuda; then
echo
echo "== cuda probe: a timed blocking call (probe/cuda BenchmarkSyncCost, 5 alternating pairs)"
go test -run '^$' -bench 'BenchmarkSyncCost$' -benchtime 1x -v ./probe/cuda 2>&1 | grep -E 'pair [0-9]|BenchmarkSyncCost-|SKIP|FAIL'
fi

# --- The proc probe's time bins: the probe on a child of 50 sleeping
# threads for 1 s a run, bins on against bins off (the anchor, same run).
if want proc; then
echo
echo "== proc probe: time bins of 51 threads (probe/proc BenchmarkProbe50Threads, bins on vs off)"
go test -run '^$' -bench 'Probe50Threads|Sweep50Threads' -benchtime 10x ./probe/proc/ 2>&1 | grep -E 'Benchmark|SKIP|FAIL'
fi

# --- Analysis: stages.star + sweep.star over 100k requests / 1M spans ------
if want analysis; then
echo
echo "== analysis over a generated bundle of 100,000 requests and 1,000,000 spans"
/usr/bin/time -f "peak RSS %M KiB, %e s wall" go test -run '^$' -bench 'BenchmarkLarge$' -benchtime 1x ./analysis/ 2>&1 | grep -E 'Benchmark|peak RSS|ns/op'
fi

# --- Tables and the engine: the seed study's stage table over 100k requests
# and 1M SGLang-Omni events, beside a plain-Python pass (tools/stages_anchor.py)
if want tables; then
echo
echo "== stage table over 100,000 requests / 1,000,000 SGLang-Omni events: asrprof (tables present; JSONL only; default analyze) vs plain Python"
B=runs/bench/sglang-100k
if [ ! -f "$B/manifest.json" ]; then
  go run ./tools/benchdata -bundle "$B" >/dev/null
fi
ls -l "$B/requests.jsonl" "$B/events.jsonl" | awk '{printf "  %s %.0f MB\n", $9, $5/1e6}'
ROUNDS=${BENCH_TABLES_ROUNDS:-3}
T=runs/bench/tables.times
# BENCH_DUCKDB=1 also times the same stage table as SQL in embedded DuckDB
# (tools/duckdbcmp, its own module: ~35 MB of modules the first time).
DDB=""
if [ "${BENCH_DUCKDB:-0}" = 1 ]; then
  DDB="$CACHE/duckdbcmp-v2.10506.0"
  [ -x "$DDB" ] || (cd tools/duckdbcmp && go build -ldflags='-s -w' -o "$DDB" .)
  "$DDB" -mode convert -out runs/bench/duckdb "$B"
fi
: > "$T"
tm() { # name command...: appends "name wall_s peak_kib" to $T
  local name=$1; shift
  /usr/bin/time -f "$name %e %M" -a -o "$T" "$@" > /dev/null
}
# BENCH_OLD=BINARY times another asrprof (an earlier build) the same way,
# interleaved, on its own copy of the bundle; its rows are named "old".
OLD=${BENCH_OLD:-}
[ -z "$OLD" ] || { rm -rf "$B-old"; cp -r "$B" "$B-old"; "$OLD" analyze "$B-old" stages >/dev/null; }
rows() { # PREFIX BINARY BUNDLE: one round of the asrprof rows
  tm "$1tables" "$2" analyze "$3" stages
  tm "$1validity" "$2" analyze "$3" validity
  rm -rf "$3/tables"
  tm "$1jsonl" "$2" analyze "$3" stages
  tm "$1default" "$2" analyze "$3"       # the first default analyze: per-pass metrics computed
  tm "$1default-warm" "$2" analyze "$3"  # the next ones: tables/passes.json
}
bin/asrprof analyze "$B" stages > runs/bench/stages-asrprof.txt  # tables built, outside the timings
/usr/bin/python3 tools/stages_anchor.py "$B" > runs/bench/stages-python.txt
for r in $(seq 1 "$ROUNDS"); do
  tm python /usr/bin/python3 tools/stages_anchor.py "$B"
  rows "" bin/asrprof "$B"
  [ -z "$OLD" ] || rows old- "$OLD" "$B-old"
  if [ -n "$DDB" ]; then
    tm duckdb-json "$DDB" -mode json "$B"
    tm duckdb-parquet "$DDB" -mode parquet -out runs/bench/duckdb "$B"
    rm -rf runs/bench/duckdb-b
    tm duckdb-convert "$DDB" -mode convert -out runs/bench/duckdb-b "$B"
  fi
done
python3 - "$T" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    name, wall, kib = line.split()
    t.setdefault(name, []).append((float(wall), int(kib)))
def med(n): return statistics.median(w for w, _ in t[n])
def rss(n): return max(k for _, k in t[n]) / 1024
py = med("python")
print("| what | wall (median of %d) | peak RSS (max) | vs plain Python | goal |" % len(t["python"]))
print("|---|---|---|---|---|")
print(f"| plain Python, stdlib (tools/stages_anchor.py) | {py:.2f} s | {rss('python'):.0f} MB | 1 | anchor |")
for who in ("", "old-") if "old-tables" in t else ("",):
    b = "asrprof" if not who else "BENCH_OLD"
    print(f"| {b} analyze DIR stages, tables present | {med(who+'tables'):.2f} s | {rss(who+'tables'):.0f} MB | {py/med(who+'tables'):.1f}× faster | ≥ 20×, ≤ 300 MB |")
    print(f"| {b} analyze DIR validity, tables present | {med(who+'validity'):.2f} s | {rss(who+'validity'):.0f} MB | {py/med(who+'validity'):.1f}× faster | |")
    print(f"| {b} analyze DIR stages, JSONL only (tables built) | {med(who+'jsonl'):.2f} s | {rss(who+'jsonl'):.0f} MB | {py/med(who+'jsonl'):.1f}× faster | ≥ 5×, ≤ 300 MB |")
    print(f"| {b} analyze DIR (the default analyses), tables present, first time (per-pass metrics computed) | {med(who+'default'):.2f} s | {rss(who+'default'):.0f} MB | {med(who+'default')/med(who+'tables'):.2f}× the stage table | |")
    print(f"| {b} analyze DIR, tables present, again (per-pass metrics from tables/passes.json) | {med(who+'default-warm'):.2f} s | {rss(who+'default-warm'):.0f} MB | {med(who+'default-warm')/med(who+'tables'):.2f}× the stage table | |")
if "duckdb-json" in t:
    conv = med("duckdb-convert") + med("duckdb-parquet")
    print(f"| DuckDB (duckdb-go, tools/duckdbcmp): the same table as SQL straight over the JSONL | {med('duckdb-json'):.2f} s | {rss('duckdb-json'):.0f} MB | {py/med('duckdb-json'):.1f}× faster | |")
    print(f"| DuckDB: the same SQL over its own Parquet files | {med('duckdb-parquet'):.2f} s | {rss('duckdb-parquet'):.0f} MB | {py/med('duckdb-parquet'):.1f}× faster | |")
    print(f"| DuckDB: JSONL → Parquet, then the SQL (two processes) | {conv:.2f} s | {max(rss('duckdb-convert'), rss('duckdb-parquet')):.0f} MB | {py/conv:.1f}× faster | |")
print("all walls:", {k: [w for w, _ in v] for k, v in t.items()})
PY
fi

# --- Probes: reference server throughput at c=8, all probes vs none --------
if [ "${BENCH_PROBES:-1}" = 1 ] && want probes; then
  echo
  echo "== probes on vs off: reference server, concurrency 8, alternating pairs"
  PAIRS=${BENCH_PAIRS:-3}
  RPORT=${BENCH_REF_PORT:-18098}
  refserver/data/make_refset.sh >/dev/null
  grep -- '-en-us-160"' refserver/data/refset/manifest.jsonl | head -n "${BENCH_REF_N:-40}" \
    | sed "s|\"audio\":\"audio/|\"audio\":\"$PWD/refserver/data/refset/audio/|" > runs/bench/ref.jsonl
  setsid /usr/bin/python3 refserver/refserver.py --port "$RPORT" > runs/refserver.log 2>&1 & REF=$!
  trap 'kill ${SRV:-} 2>/dev/null || true; kill -- -$REF 2>/dev/null || true' EXIT
  for i in $(seq 1 600); do curl -fsS "http://127.0.0.1:$RPORT/health" >/dev/null 2>&1 && break; sleep 0.2; done
  for pair in $(seq 1 "$PAIRS"); do
    order="none auto"; [ $((pair % 2)) = 0 ] && order="auto none"
    for probes in $order; do
      # The server's own CPU (all threads, clock ticks) around the capture:
      # the probes' BPF programs run in its threads, so their cost shows
      # here, and CPU per request moves less than req/s on a shared VM.
      awk '{print $14+$15}' /proc/$REF/stat > "runs/bench/probes-$probes-$pair.srv"
      /usr/bin/time -f "%U %S %e" -o "runs/bench/probes-$probes-$pair.time" \
        bin/asrprof capture --target "http://127.0.0.1:$RPORT" --dataset runs/bench/ref.jsonl \
          --concurrency 8 --repeats 1 --probes "$probes" --otlp-http off --otlp-grpc off --quiet --format json \
          --out "runs/bench/probes-$probes-$pair" --overwrite > /dev/null
      awk '{print $14+$15}' /proc/$REF/stat >> "runs/bench/probes-$probes-$pair.srv"
    done
  done
  python3 - "$PAIRS" <<'PY'
import json, os, sys
pairs = int(sys.argv[1])
def rps(p): return json.load(open(f"runs/bench/{p}/results.json"))["results"][0]["per_repeat"][0]["requests_per_s"]
def cpu(p):
    u, s, e = map(float, open(f"runs/bench/{p}.time").read().split())
    return u + s, e
def srv_ms_per_req(p):
    # The server's CPU over the capture (clock ticks) per completed request.
    a, b = map(float, open(f"runs/bench/{p}.srv").read().split())
    r = json.load(open(f"runs/bench/{p}/results.json"))["results"][0]
    n = r["total"] - r.get("failed", 0)
    return 1000 * (b - a) / os.sysconf("SC_CLK_TCK") / n
print("| pair | req/s probes off | req/s probes on | change | server CPU ms/request off | on | change | asrprof CPU off | asrprof CPU on |")
print("|---|---|---|---|---|---|---|---|---|")
ch, extra, sch = [], [], []
for i in range(1, pairs + 1):
    off, on = rps(f"probes-none-{i}"), rps(f"probes-auto-{i}")
    (coff, eoff), (con, eon) = cpu(f"probes-none-{i}"), cpu(f"probes-auto-{i}")
    soff, son = srv_ms_per_req(f"probes-none-{i}"), srv_ms_per_req(f"probes-auto-{i}")
    ch.append(on / off - 1)
    sch.append(son / soff - 1)
    extra.append(con / eon - coff / eoff)
    print(f"| {i} | {off:.3f} | {on:.3f} | {100*(on/off-1):+.1f} % | {soff:.0f} | {son:.0f} | {100*(son/soff-1):+.1f} % | {100*coff/eoff:.2f} % of a core | {100*con/eon:.2f} % of a core |")
print(f"\nmean throughput change with all probes on: {100*sum(ch)/len(ch):+.1f} % (goal: within noise and ≤ 2 %)")
print(f"mean change of the server's CPU per request with all probes on: {100*sum(sch)/len(sch):+.1f} % (spread {100*min(sch):+.1f} to {100*max(sch):+.1f} %)")
print(f"asrprof's own CPU added by the probes: {100*sum(extra)/len(extra):.2f} % of one core, whole captures with start-up (goal ≤ 1 %; BPF time is charged to the traced threads and shows in the throughput change)")
PY
  # Steady state: asrprof's CPU over 30 s in the middle of a capture, after
  # the probes have started (BPF load and verification excluded).
  for probes in auto none; do
    bin/asrprof capture --target "http://127.0.0.1:$RPORT" --dataset runs/bench/ref.jsonl \
      --concurrency 8 --repeats 1 --probes "$probes" --otlp-http off --otlp-grpc off --quiet --format json \
      --out "runs/bench/steady-$probes" --overwrite > /dev/null 2>&1 & AP=$!
    sleep 12
    a=$(awk '{print $14+$15}' /proc/$AP/stat); t0=$(date +%s.%N)
    sleep 30
    b=$(awk '{print $14+$15}' /proc/$AP/stat); t1=$(date +%s.%N)
    wait $AP || true
    python3 -c "import os; print(f'steady state, probes $probes: asrprof at {100*(($b-$a)/os.sysconf(\"SC_CLK_TCK\"))/($t1-$t0):.2f} % of one core')"
  done
  # The probes' in-kernel cost, measured: one more capture with the
  # kernel's BPF run-time statistics on, beside the server's own CPU.
  s0=$(awk '{print $14+$15}' /proc/$REF/stat)
  bin/asrprof capture --target "http://127.0.0.1:$RPORT" --dataset runs/bench/ref.jsonl \
    --concurrency 8 --repeats 1 --probes auto --bpf-stats --otlp-http off --otlp-grpc off --quiet --format json \
    --out runs/bench/bpf-stats --overwrite > /dev/null 2>&1
  s1=$(awk '{print $14+$15}' /proc/$REF/stat)
  python3 - "$s0" "$s1" <<'PY'
import json, os, sys
s0, s1 = map(float, sys.argv[1:])
srv = (s1 - s0) / os.sysconf("SC_CLK_TCK")
bpf = json.load(open("runs/bench/bpf-stats/manifest.json"))["extra"].get("probe_bpf") or {}
if not bpf:
    print("BPF statistics: not available (see runs/bench/bpf-stats)")
else:
    tot = sum(v["runtime_s"] for v in bpf.values())
    wall = max(v["wall_s"] for v in bpf.values())
    per = ", ".join(f"{k} {v['runtime_s']:.3f} s ({v['ns_per_run']:.0f} ns a run)" for k, v in sorted(bpf.items()))
    print(f"probes' BPF programs (--bpf-stats): {per}; {tot:.3f} s in a {wall:.0f} s capture = {100*tot/wall:.2f} % of one CPU")
    print(f"the server used {srv:.1f} s of CPU in that capture: the BPF time is {100*tot/srv:.2f} % of it (an upper bound of the probes' cost to it; the programs also run for other processes' events)")
PY
fi

# --- Proxy: what `capture --proxy` adds to a request's latency and CPU -------
# vegeta sends the same 100 KB multipart upload to the noop server directly
# and through the proxy (vegeta is the command after --, so the capture
# lasts as long as it runs), closed loop at 1 and at $CONC workers. The
# proxy's CPU is asrprof's own (utime+stime of its process) over vegeta's
# run only, divided by the requests; --dataset is given, so every upload is
# parsed, hashed, matched and scored as in a real proxy capture.
if want proxy; then
  go build -ldflags='-s -w' -o bin/noopserver ./internal/fakeasr/cmd/noopserver
  VEGETA="$CACHE/vegeta-v12.13.0"
  [ -x "$VEGETA" ] || (cd tools/vegeta && go build -o "$VEGETA" github.com/tsenart/vegeta/v12)
  [ -x bin/asrprof ] || make build >/dev/null
  NPORT=${BENCH_NOOP_PORT:-18097}; PPORT=${BENCH_PROXY_PORT:-18096}
  PDUR=${BENCH_PROXY_DURATION:-5s}
  PD=runs/bench/proxy; rm -rf "$PD"; mkdir -p "$PD"
  go run ./tools/benchdata -out "$PD/direct" -n 1 -bytes 102400 -url "http://127.0.0.1:$NPORT"
  go run ./tools/benchdata -out "$PD/proxied" -n 1 -bytes 102400 -url "http://127.0.0.1:$PPORT"
  BPORT=${BENCH_BARE_PORT:-18095}
  go run ./tools/benchdata -out "$PD/bare" -n 1 -bytes 102400 -url "http://127.0.0.1:$BPORT"
  go build -ldflags='-s -w' -o bin/bareproxy ./tools/bareproxy
  bin/noopserver -addr "127.0.0.1:$NPORT" & NSRV=$!
  trap 'kill ${SRV:-} ${NSRV:-} 2>/dev/null || true; [ -n "${REF:-}" ] && kill -- -$REF 2>/dev/null || true' EXIT
  for i in $(seq 1 50); do curl -fsS "http://127.0.0.1:$NPORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  for w in 1 "$CONC"; do
    echo "== proxy: vegeta, $w workers, $PDUR, 100 KB multipart: direct, then through asrprof capture --proxy"
    "$VEGETA" attack -rate=0 -workers="$w" -max-workers="$w" -duration="$PDUR" -keepalive=true \
      -targets="$PD/direct/vegeta.targets" > "$PD/direct-$w.bin"
    "$VEGETA" report -type=json "$PD/direct-$w.bin" > "$PD/direct-$w.json"
    bin/asrprof capture --proxy "127.0.0.1:$PPORT" --target "http://127.0.0.1:$NPORT" \
      --dataset "$PD/proxied/manifest.jsonl" --probes none --otlp-http off --otlp-grpc off --quiet --format json \
      --out "$PD/capture-$w" --overwrite -- bash -c '
        a=$(awk "{print \$14+\$15}" /proc/$PPID/stat)
        "$0" attack -rate=0 -workers="$1" -max-workers="$1" -duration="$2" -keepalive=true -targets="$3" > "$4"
        b=$(awk "{print \$14+\$15}" /proc/$PPID/stat)
        echo "$a $b" > "$5"' \
      "$VEGETA" "$w" "$PDUR" "$PD/proxied/vegeta.targets" "$PD/proxied-$w.bin" "$PD/cpu-$w.txt" > /dev/null 2> "$PD/capture-$w.log"
    "$VEGETA" report -type=json "$PD/proxied-$w.bin" > "$PD/proxied-$w.json"
    # The anchor: a bare httputil.ReverseProxy on the same path.
    bin/bareproxy -addr "127.0.0.1:$BPORT" -target "http://127.0.0.1:$NPORT" & BP=$!
    for i in $(seq 1 50); do curl -fsS "http://127.0.0.1:$BPORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
    awk '{print $14+$15}' /proc/$BP/stat > "$PD/bare-cpu-$w.txt"
    "$VEGETA" attack -rate=0 -workers="$w" -max-workers="$w" -duration="$PDUR" -keepalive=true \
      -targets="$PD/bare/vegeta.targets" > "$PD/bare-$w.bin"
    awk '{print $14+$15}' /proc/$BP/stat >> "$PD/bare-cpu-$w.txt"
    kill "$BP"; wait "$BP" 2>/dev/null || true
    "$VEGETA" report -type=json "$PD/bare-$w.bin" > "$PD/bare-$w.json"
  done
  kill "$NSRV" 2>/dev/null || true
  echo "load average after the runs (other work on this machine): $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$CONC" <<'PY'
import json, os, sys
conc = sys.argv[1]
tck = os.sysconf("SC_CLK_TCK")
us = lambda ns: ns / 1e3
def lat(name, w):
    d = json.load(open(f"runs/bench/proxy/{name}-{w}.json"))
    return d["latencies"]["mean"], d["latencies"]["50th"], d["requests"], d["success"]
def cpu(name, w, n):
    a, b = map(float, open(f"runs/bench/proxy/{name}-{w}.txt").read().split())
    return 1e6 * (b - a) / tck / n
print()
print("| workers | path | latency mean | p50 | added mean | added p50 | proxy CPU per request | requests (recorded) |")
print("|---|---|---|---|---|---|---|---|")
for w in ["1", conc]:
    dm, dp, dn, _ = lat("direct", w)
    print(f"| {w} | direct | {us(dm):.0f} µs | {us(dp):.0f} µs | | | | {dn} |")
    bm, bp, bn, _ = lat("bare", w)
    print(f"| {w} | bare httputil.ReverseProxy | {us(bm):.0f} µs | {us(bp):.0f} µs | {us(bm-dm):+.0f} µs | {us(bp-dp):+.0f} µs | {cpu('bare-cpu', w, bn):.0f} µs | {bn} |")
    pm, pp, pn, ps = lat("proxied", w)
    rec = json.load(open(f"runs/bench/proxy/capture-{w}/manifest.json"))["extra"]["proxy"]["stats"]["recorded"]
    print(f"| {w} | asrprof capture --proxy | {us(pm):.0f} µs | {us(pp):.0f} µs | {us(pm-dm):+.0f} µs | {us(pp-dp):+.0f} µs | {cpu('cpu', w, pn):.0f} µs | {pn} ({rec}, success {100*ps:.1f} %) |")
print("\ngoal: ≤ 100 µs added latency and ≤ 50 µs of proxy CPU per 100 KB request")
PY
fi

# --- The HTML report of a 100k-request capture (asrprof report) -------------
# Goal (issue 15): written in < 2 s, < 3 MB. The bundle is the tables
# section's (tools/benchdata: 100,000 requests, 1,000,000 SGLang-Omni events).
if want report; then
echo
echo "== asrprof report over 100,000 requests / 1,000,000 events (tables present)"
B=runs/bench/sglang-100k
if [ ! -f "$B/manifest.json" ]; then
  go run ./tools/benchdata -bundle "$B" >/dev/null
fi
[ -x bin/asrprof ] || go build -o bin/asrprof ./cmd/asrprof
bin/asrprof analyze "$B" >/dev/null  # tables and passes.json built, outside the timings
T=runs/bench/report.times
: > "$T"
for r in $(seq 1 "${BENCH_REPORT_ROUNDS:-5}"); do
  /usr/bin/time -f "%e %M %U %S" -a -o "$T" bin/asrprof report "$B" --out runs/bench/report-100k.html >/dev/null
done
python3 - "$T" runs/bench/report-100k.html <<'PY'
import os, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
walls = [float(r[0]) for r in rows]
cpus = [float(r[2]) + float(r[3]) for r in rows]
rss = max(int(r[1]) for r in rows) / 1024
size = os.path.getsize(sys.argv[2]) / 1e6
med = statistics.median(walls)
load = open("/proc/loadavg").read().split()[0]
print("| what | wall (median of %d) | CPU user+sys (median) | peak RSS | file | goal |" % len(walls))
print("|---|---|---|---|---|---|")
print(f"| asrprof report DIR, 100k requests | {med:.2f} s | {statistics.median(cpus):.2f} s | {rss:.0f} MB | {size:.2f} MB | < 2 s, < 3 MB: {'met' if med < 2 and size < 3 else 'MISSED'} |")
print(f"all walls: {walls}; CPU: {cpus}; load average at the end: {load} on {os.cpu_count()} cores")
PY
fi
