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
go build -ldflags='-s -w' -o bin/noopserver ./tools/noopserver
if [ ! -x "$CACHE/vegeta-v12.13.0" ]; then
  echo "== building vegeta v12.13.0 (once)"
  (cd tools/vegeta && go build -o "$CACHE/vegeta-v12.13.0" github.com/tsenart/vegeta/v12)
fi
VEGETA="$CACHE/vegeta-v12.13.0"

# One 100 KB WAV (16 kHz mono, ~3.2 s) used by both load generators.
W=runs/bench/data
rm -rf "$W"; mkdir -p "$W"
go run ./tools/benchdata -out "$W" -n "$N" -bytes 102400 -url "http://127.0.0.1:$PORT"

bin/noopserver -addr "127.0.0.1:$PORT" & SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for i in $(seq 1 50); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done

cpu_of() { awk '{print $1+$2}' "$1"; }

echo "== vegeta: closed loop, $CONC workers, $DUR, 100 KB multipart"
/usr/bin/time -f "%U %S" -o runs/bench/vegeta.time \
  "$VEGETA" attack -rate=0 -workers="$CONC" -max-workers="$CONC" -duration="$DUR" -keepalive=true \
    -targets="$W/vegeta.targets" > runs/bench/vegeta.bin
"$VEGETA" report -type=json runs/bench/vegeta.bin > runs/bench/vegeta.json
V_RPS=$(python3 -c "import json;d=json.load(open('runs/bench/vegeta.json'));print(round(d['throughput'],1))")
V_OK=$(python3 -c "import json;d=json.load(open('runs/bench/vegeta.json'));print(d['success'])")
V_N=$(python3 -c "import json;d=json.load(open('runs/bench/vegeta.json'));print(d['requests'])")
V_CPU=$(cpu_of runs/bench/vegeta.time)

echo "== asrprof capture: closed loop, concurrency $CONC, $REPEATS passes of $N requests, 100 KB multipart, probes off"
/usr/bin/time -f "%U %S" -o runs/bench/asrprof.time \
  bin/asrprof capture --target "http://127.0.0.1:$PORT" --dataset "$W/manifest.jsonl" \
    --concurrency "$CONC" --repeats "$REPEATS" --probes none --quiet --format json \
    --out runs/bench/capture --overwrite > runs/bench/asrprof.json
A_RPS=$(python3 -c "import json;d=json.load(open('runs/bench/capture/results.json'));p=d['results'][0]['per_repeat'];print(round(sum(x['requests_per_s'] for x in p)/len(p),1))")
A_N=$(python3 -c "import json;d=json.load(open('runs/bench/capture/results.json'));print(d['results'][0]['total'])")
A_CPU=$(cpu_of runs/bench/asrprof.time)

python3 - "$V_RPS" "$V_N" "$V_CPU" "$A_RPS" "$A_N" "$A_CPU" "$V_OK" <<'PY'
import sys
v_rps, v_n, v_cpu, a_rps, a_n, a_cpu, v_ok = map(float, sys.argv[1:])
print()
print("| load generator | req/s | requests | success | client CPU per request |")
print("|---|---|---|---|---|")
print(f"| vegeta v12.13.0 | {v_rps:.0f} | {v_n:.0f} | {v_ok*100:.1f} % | {v_cpu/v_n*1e6:.0f} µs |")
print(f"| asrprof capture | {a_rps:.0f} | {a_n:.0f} | | {a_cpu/a_n*1e6:.0f} µs (incl. preflight, hashing, bundle) |")
print(f"\nratio asrprof/vegeta: {a_rps/v_rps:.2f} (goal ≥ 0.90)")
PY
