#!/usr/bin/env bash
# The attribution and the tested advice on a GPU machine (docs/GPU.md,
# "Where the time went on the H200"), through the CLI as users type it: the
# whisper engine under `asrprof capture --server-cmd` with the default
# probes (auto: gpu, cpu, sched with its time bins, cuda with its
# synchronize bins, proc), then the attribution and bottleneck tables.
#
#   tools/gpu-attribution.sh PART...
#
#   engine      the engine with its default flags (large-v3 shape, bf16),
#               --concurrency 1,8,32
#   host-idle   host-bound with an idle GPU: --host-step-ms 8 (a busy loop
#               per decode step and running request), c=8
#   gpu-bound   the GPU kept busy: CUDA graphs, first forwards 16 at a
#               time, 30 tokens per second of audio, 64 running, c=64
#   spin        a busy GPU that the scheduler spin-waits on in synchronize:
#               a 60 ms GPU kernel before each decode step (--gpu-step-ms),
#               which the step's token read-back waits for, c=8
#   eager       eager decode, 30 tokens per second of audio, 64 running,
#               c=64 (meant as a spin-wait, it measured host-bound)
#   fp32        gpu-bound's engine in float32 (no tensor-core bf16): more GPU
#               time per step for the same host work, c=64
#   whatif      asrprof what-if --rounds 3 on the engine's capture at c=32
#               (after engine, or with testdata/h200/engine-attribution.tgz
#               unpacked into $OUT/gpu-engine/run-1)
#   graphs      the engine with --cuda-graphs at c=8 (what-if c8's round 1 B)
#   whatif-c8   asrprof what-if --rounds 2 on the engine's capture at c=8
#               (host-bound decode: the advice is --cuda-graphs)
#   corunner    the gpu-bound and host-idle captures again beside
#               --gpu-corunner 0.5
#   overhead    the engine at c=32, --probes none against the default
#               probes, alternating, PAIRS pairs (default 2)
#
# Environment: OUT (default runs), SAMPLES (default 32), MODEL (default
# large-v3), PYTHON, ASRPROF, DATASET (tools/gpu-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
MODEL=${MODEL:-large-v3}
OUTROOT=${OUT:-runs}
SAMPLES=${SAMPLES:-32}
PORT=${PORT:-18130}
PAIRS=${PAIRS:-2}
mkdir -p "$OUTROOT"
engine_cmd() { echo "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $PORT $*"; }

capture() { # NAME LEVELS ENGINE-FLAGS... [-- CAPTURE-FLAGS...]
  local name=$1 levels=$2; shift 2
  local eflags=() cflags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do eflags+=("$1"); shift; done
  [ $# -gt 0 ] && shift && cflags=("$@")
  local out="$OUTROOT/gpu-$name"
  echo "== $name: c=$levels, engine flags: ${eflags[*]:-(defaults)} ${cflags[*]:-}"
  local t0=$SECONDS
  "$ASRPROF" capture --server-cmd "$(engine_cmd "${eflags[@]}")" --runs 1 \
    --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
    --dataset "$DATASET" --max-samples "$SAMPLES" --concurrency "$levels" --repeats 1 \
    --out "$out" --overwrite --quiet "${cflags[@]}" >"$out.log" 2>&1 || echo "capture $name: exit $?"
  echo "== $name: capture took $((SECONDS - t0)) s"
  "$ASRPROF" analyze "$out/run-1" sweep attribution bottleneck 2>&1 | tee "$out.tables" || true
}

[ $# -gt 0 ] || set -- engine
for what in "$@"; do
  case $what in
    engine) capture engine 1,8,32 ;;
    host-idle) capture host-idle 8 --host-step-ms 8 ;;
    gpu-bound) capture gpu-bound 64 --max-running-requests 64 --cuda-graphs --prefill-batch 16 --tokens-per-second 30 ;;
    spin) capture spin 8 --gpu-step-ms 60 ;;
    graphs) capture graphs 8 --cuda-graphs ;;
    eager) capture eager 64 --max-running-requests 64 --tokens-per-second 30 ;;
    fp32) capture fp32 64 --dtype float32 --max-running-requests 64 --cuda-graphs --prefill-batch 16 --tokens-per-second 30 ;;
    whatif)
      t0=$SECONDS
      "$ASRPROF" what-if "$OUTROOT/gpu-engine/run-1" --level c32 --rounds 3 --server-cmd "$(engine_cmd)" \
        --out "$OUTROOT/gpu-whatif" 2>&1 | tee "$OUTROOT/gpu-whatif.txt" || echo "what-if: exit $?"
      echo "== whatif took $((SECONDS - t0)) s" ;;
    whatif-c8)
      t0=$SECONDS
      "$ASRPROF" what-if "$OUTROOT/gpu-engine/run-1" --level c8 --rounds 2 --server-cmd "$(engine_cmd)" \
        --out "$OUTROOT/gpu-whatif-c8" 2>&1 | tee "$OUTROOT/gpu-whatif-c8.txt" || echo "what-if: exit $?"
      echo "== whatif-c8 took $((SECONDS - t0)) s" ;;
    corunner)
      capture gpu-bound-corunner 64 --max-running-requests 64 --cuda-graphs --prefill-batch 16 --tokens-per-second 30 \
        -- --gpu-corunner 0.5 --gpu-corunner-python "$PYTHON"
      capture host-idle-corunner 8 --host-step-ms 8 -- --gpu-corunner 0.5 --gpu-corunner-python "$PYTHON" ;;
    overhead)
      for i in $(seq 1 "$PAIRS"); do
        capture "overhead-none-$i" 32 -- --probes none
        capture "overhead-all-$i" 32
      done
      for f in "$OUTROOT"/gpu-overhead-*.tables; do echo "$f: $(grep -m1 '^c=32' "$f")"; done ;;
    *) echo "gpu-attribution: unknown part $what" >&2; exit 2 ;;
  esac
done
