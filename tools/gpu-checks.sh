#!/usr/bin/env bash
# The run's own checks and the hot-code view on a GPU machine
# (docs/VALIDITY.md "Co-tenants on the GPU", docs/GPU.md), through the CLI
# as users type it, on the whisper engine (refserver.py --engine whisper,
# large-v3's shape, random weights) with the default probes.
#
#   tools/gpu-checks.sh PART...          (default: cotenant hotcode)
#
#   cotenant   the engine captured at LEVELS twice: alone, then beside a
#              second process running kernels on the same GPU
#              (runbook/gpucorunner.py --share SHARE, started by this
#              script: outside the server's process tree and asrprof's),
#              each followed by `asrprof analyze DIR validity`. The
#              co-tenant check must name the second process, and stay
#              silent alone.
#   hotcode    the engine at c=8 with --cpu-engine otel and again with
#              --cpu-engine fp; `asrprof analyze DIR bottleneck` on each,
#              with this binary and, where OLD names one (e.g. an asrprof
#              built before the first-contact work, gzipped or not), with
#              that one too: the "stacks truncated" and "hottest code"
#              lines of each.
#   guard      the engine captured at c=4 by `asrprof capture --server-cmd`,
#              asrprof killed with SIGKILL once requests flow: the server's
#              guard must stop the server and free the GPU (nvidia-smi lists
#              no process), say so in server.log, and the bundle must load.
#
# Environment: OUT (runs/gpu-checks), SAMPLES (24), LEVELS (1,4), SHARE
# (0.5), MODEL (large-v3), PORT (18170), OLD, PYTHON, ASRPROF, DATASET
# (tools/gpu-env.sh). About 3 minutes on an H200 or H100.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
MODEL=${MODEL:-large-v3}
OUTROOT=${OUT:-runs/gpu-checks}
SAMPLES=${SAMPLES:-24}
LEVELS=${LEVELS:-1,4}
SHARE=${SHARE:-0.5}
PORT=${PORT:-18170}
mkdir -p "$OUTROOT"
if [ -n "${OLD:-}" ] && [ -f "$OLD.gz" ] && [ ! -x "$OLD" ]; then gzip -dc "$OLD.gz" >"$OLD" && chmod +x "$OLD"; fi

capture() { # NAME LEVELS CAPTURE-FLAGS...
  local name=$1 levels=$2; shift 2
  local t0=$SECONDS
  "$ASRPROF" capture --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $PORT" --runs 1 \
    --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
    --dataset "$DATASET" --max-samples "$SAMPLES" --concurrency "$levels" --repeats 1 \
    --out "$OUTROOT/$name" --overwrite "$@" >"$OUTROOT/$name.log" 2>&1 || echo "capture $name: exit $?"
  echo "== $name: capture took $((SECONDS - t0)) s"
}

[ $# -gt 0 ] || set -- cotenant hotcode
for what in "$@"; do
  case $what in
    cotenant)
      capture alone "$LEVELS"
      echo "== alone: validity"; "$ASRPROF" analyze "$OUTROOT/alone/run-1" validity 2>&1 | tee "$OUTROOT/alone.validity.txt" || true
      "$PYTHON" runbook/gpucorunner.py --share "$SHARE" --duration 0 --json "$OUTROOT/corunner.json" >"$OUTROOT/corunner.log" 2>&1 &
      co=$!
      sleep 8
      kill -0 "$co" 2>/dev/null || { echo "the co-tenant did not start:"; cat "$OUTROOT/corunner.log"; }
      echo "== the co-tenant: pid $co"
      # --gpu-free-mib: the runbook waits before a server's start until the
      # GPU's memory is free (1024 MiB by default), and the co-tenant holds
      # about 1.2 GiB: without it the capture waits 2 minutes and fails
      # (seen on an H100, 2026-12-05).
      capture cotenant "$LEVELS" --gpu-free-mib 16384
      kill -TERM "$co" 2>/dev/null; wait "$co" 2>/dev/null || true
      echo "== cotenant: validity"; "$ASRPROF" analyze "$OUTROOT/cotenant/run-1" validity 2>&1 | tee "$OUTROOT/cotenant.validity.txt" || true
      cat "$OUTROOT/corunner.json" 2>/dev/null; echo ;;
    hotcode)
      for eng in otel fp; do
        capture "hot-$eng" 8 --cpu-engine "$eng"
        for bin in "$ASRPROF" ${OLD:+"$OLD"}; do
          echo "== hot-$eng, analyzed by $bin"
          "$bin" analyze "$OUTROOT/hot-$eng/run-1" bottleneck >"$OUTROOT/hot-$eng.$(basename "$bin").txt" 2>&1 || echo "analyze: exit $?"
          grep -E -i "hottest|truncated|no mapping" "$OUTROOT/hot-$eng.$(basename "$bin").txt" | cut -c1-400 || echo "(no hottest-code or truncated line)"
        done
        grep -E -i "cpu probe|engine" "$OUTROOT/hot-$eng.log" | head -5 || true
      done ;;
    guard)
      out="$OUTROOT/guard"
      rm -rf "$out"
      "$ASRPROF" capture --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $PORT" --runs 1 \
        --target "http://127.0.0.1:$PORT" --dataset "$DATASET" --concurrency 4 --repeats 50 --otlp-http off --otlp-grpc off \
        --out "$out" >"$OUTROOT/guard.log" 2>&1 &
      cap=$!
      for _ in $(seq 1 240); do [ -s "$out/run-1/requests.jsonl" ] && break; sleep 0.5; done
      sleep 2
      echo "== guard: $(wc -l <"$out/run-1/requests.jsonl") requests in; on the GPU: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
      ps -eo pid,pgid,args | grep -E 'asrprof|refserver' | grep -v grep | cut -c1-110
      kill -KILL "$cap"; t0=$(date +%s%N)
      for _ in $(seq 1 600); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 0.1; done
      echo "== guard: asrprof killed; the GPU lists no process $(( ($(date +%s%N) - t0) / 1000000 )) ms later: [$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')]"
      sleep 1
      ps -eo pid,args | grep -E 'asrprof|refserver' | grep -v grep | cut -c1-110 || echo "no asrprof or refserver process left"
      tail -n 1 "$out/run-1/server.log"
      "$ASRPROF" show "$out/run-1" 2>&1 | tail -n 3 ;;
    *) echo "gpu-checks: no part $what (cotenant, hotcode, guard)" >&2; exit 2 ;;
  esac
done
