#!/usr/bin/env bash
# tools/gpu-sensitivity.sh: asrprof sensitivity against the whisper engine
# (large-v3, bf16, CUDA graphs) in the GPU-bound state of docs/GPU.md, at
# c=64: the CPU allotments of CPU (default 100%,50%), CYCLES cycles
# (default 2), SAMPLES clips per pass (default 128). Prepare a device with
# 'make gpu-pack'; OUT says where the runs go (default runs/).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
OUTROOT=${OUT:-runs}
PORT=${PORT:-18130}
out="$OUTROOT/gpu-sensitivity"
t0=$SECONDS
"$ASRPROF" sensitivity \
  --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model ${MODEL:-large-v3} --port $PORT --max-running-requests 64 --build-workers 4 --build-max-pending 64 --cuda-graphs --prefill-batch 16 --tokens-per-second 30" \
  --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" --dataset "$DATASET" --max-samples "${SAMPLES:-128}" \
  --concurrency 64 --repeats 1 --warmup --cpu "${CPU:-100%,50%}" --cycles "${CYCLES:-2}" --probes gpu \
  --out "$out" --overwrite --quiet --startup-timeout 5m || true
echo "== gpu-sensitivity took $((SECONDS - t0)) s"
"$ASRPROF" analyze "$out/cpu100-1" sweep gpu bottleneck || true
