#!/usr/bin/env bash
# Two whisper engines behind refserver's router, on one GPU machine,
# through the CLI (docs/GPU.md, "Two engines behind the router"):
#
#   tools/gpu-router.sh [even|slow]...    (default: even)
#
#   even  two engines (large-v3, bf16, CUDA graphs), round robin;
#         --concurrency 1,8,32,64 --warmup, 1 repeat
#   slow  the same, least-loaded, the second engine with --host-step-ms
#         (SLOW_MS, default 2: host work per decode step and running
#         request); --concurrency 8,32, 1 repeat
#
# Each engine is its own process; with CUDA_VISIBLE_DEVICES unset both
# run on GPU 0, so on a one-GPU machine they share it (the two-GPU layout
# is ROUTER_GPUS=0,1: worker i then sees only GPU i; tools/router-serve.sh).
# Environment: OUT (default runs), SAMPLES (default 96), MODEL (default
# large-v3), PYTHON, ASRPROF, DATASET (tools/gpu-env.sh), PORT (18130).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
MODEL=${MODEL:-large-v3}
OUTROOT=${OUT:-runs}
PORT=${PORT:-18130}
SAMPLES=${SAMPLES:-96}
export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces
export ROUTER_PYTHON=$PYTHON ROUTER_NAME=${ROUTER_NAME:-gpu}
ENGINE="$PYTHON refserver/refserver.py --engine whisper --model $MODEL --max-running-requests 32 --build-workers 4 --build-max-pending 64 --cuda-graphs"

run() { # NAME POLICY LEVELS WARMUP
  local name=$1 policy=$2 levels=$3 warm=$4
  local out="$OUTROOT/gpu-router-$name"
  echo "== gpu-router $name: 2 engines, $policy, levels $levels, slow last: ${SLOW_LAST_FLAGS:-none}"
  local t0=$SECONDS
  "$ASRPROF" capture \
    --server-cmd "bash tools/router-serve.sh $PORT 2 $policy $ENGINE" \
    --runs 1 --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
    --dataset "$DATASET" --max-samples "$SAMPLES" --concurrency "$levels" --repeats 1 $warm \
    --probes gpu,sched,cuda,cpu --cpu-engine otel --startup-timeout 5m \
    --out "$out" --overwrite --quiet 2>&1 | tee "$out.log" || true
  echo "== gpu-router $name: capture took $((SECONDS - t0)) s"
  "$ASRPROF" analyze "$out/run-1" sweep stages gpu bottleneck 2>&1 | tee "$out.tables"
}

[ $# -gt 0 ] || set -- even
for what in "$@"; do
  case $what in
    even) export SLOW_LAST_FLAGS=; run even round-robin 1,8,32,64 --warmup ;;
    slow) export SLOW_LAST_FLAGS="--host-step-ms ${SLOW_MS:-2}"; run slow least-loaded 8,32 "" ;;
    *) echo "gpu-router: unknown part $what (even, slow)" >&2; exit 2 ;;
  esac
done
