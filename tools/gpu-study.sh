#!/usr/bin/env bash
# The seed study on a GPU machine, through the CLI: the whisper engine
# (refserver --engine whisper, large-v3 config, bf16) under
# `asrprof capture --server-cmd`, a closed-loop sweep with every probe on
# (gpu with GPM, cuda, cpu with the otel engine, sched), then the sweep,
# stages, gpu, cpu and bottleneck tables. docs/GPU.md holds its results.
#
#   tools/gpu-study.sh [study|gpu-bound|host-bound]...   (default: study)
#
#   study       max_running 32, build workers 2, pending 16, eager decode;
#               --concurrency 1,8,16,32,64 --warmup --repeats 3
#   gpu-bound   max_running 64, CUDA graphs for decode, first forwards
#               coalesced 16 at a time, 30 tokens per second of audio: a
#               large batch with negligible host work; --concurrency 16,64,128
#               --repeats 2
#   host-bound  the study's engine with --host-step-ms (host work per decode
#               step that grows with the batch); --concurrency 1,8,32 --repeats 2
#
# Environment: OUT (default runs), SAMPLES (dataset samples per pass;
# default 80 for study, 192 for gpu-bound, 64 for host-bound),
# MODEL (default large-v3), PYTHON, ASRPROF, DATASET (tools/gpu-env.sh),
# HOST_STEP_MS (default 0.6). Prepare a device with 'make gpu-pack'.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
MODEL=${MODEL:-large-v3}
OUTROOT=${OUT:-runs}
HOST_STEP_MS=${HOST_STEP_MS:-0.6}
PORT=${PORT:-18120}
export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces

run() { # NAME SAMPLES LEVELS REPEATS WARMUP ENGINE-FLAGS...
  local name=$1 samples=${SAMPLES:-$2} levels=$3 repeats=$4 warm=$5; shift 5
  local out="$OUTROOT/gpu-$name"
  echo "== gpu-study $name: levels $levels, $repeats repeats, engine flags: $*"
  local t0=$SECONDS
  "$ASRPROF" capture \
    --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $PORT $*" \
    --runs 1 --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
    --dataset "$DATASET" --max-samples "$samples" --concurrency "$levels" --repeats "$repeats" $warm \
    --probes gpu,cpu,sched,cuda --cpu-engine otel --out "$out" --overwrite --quiet 2>&1 | tee "$out.log" || true
  echo "== gpu-study $name: capture took $((SECONDS - t0)) s"
  "$ASRPROF" analyze "$out/run-1" sweep stages gpu cpu bottleneck 2>&1 | tee "$out.tables"
}

[ $# -gt 0 ] || set -- study
for what in "$@"; do
  case $what in
    study) run study 80 1,8,16,32,64 3 --warmup --max-running-requests 32 --build-workers 2 --build-max-pending 16 ;;
    gpu-bound) run gpu-bound 192 16,64,128 2 --warmup --max-running-requests 64 --build-workers 4 --build-max-pending 64 \
      --cuda-graphs --prefill-batch 16 --tokens-per-second 30 ;;
    host-bound) run host-bound 64 1,8,32 2 --warmup --max-running-requests 32 --build-workers 2 --build-max-pending 16 \
      --host-step-ms "$HOST_STEP_MS" ;;
    *) echo "gpu-study: unknown part $what (study, gpu-bound, host-bound)" >&2; exit 2 ;;
  esac
done
