#!/usr/bin/env bash
# The advice's calibration on a GPU machine (docs/CAPACITY.md,
# "Calibration"): tools/calibrate.sh on the whisper engine (refserver.py
# --engine whisper, large-v3's shape, random weights) in server states none
# of the models was written against (they were written against the
# engine's default flags, c=8 and c=32, and the CPU reference server). For
# each STATE: one capture of the state at its levels, the model's advice at
# the what-if levels (tools/calibrate/MODEL.star), then asrprof what-if at
# each of those levels, A, B, A on fresh servers, a line each in
# $OUT/calibration.tsv.
#
#   tools/gpu-calibrate.sh [STATE...]     (default: cap4 graphs-tps6 prefill32)
#
#   cap4         --max-running-requests 4, c=1,8; the admission cap model
#                (4 → 8) at c=8
#   graphs-tps6  --tokens-per-second 6 (twice the default's decode steps),
#                c=1,8; the CUDA graphs model at c=1 and c=8
#   prefill32    --max-running-requests 32, c=1,32; the first forwards'
#                batch model (1 → 2) at c=32
#   graphs-cap   --cuda-graphs, c=1,16; the admission cap model (8 → 16)
#                at c=16
#
# Environment: OUT (runs/gpu-cal), SAMPLES (32 a level), MODEL
# (large-v3), PYTHON, ASRPROF, DATASET (tools/gpu-env.sh), PORT (18160).
# About 2 minutes a state on an H200 or H100.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-env.sh
MODEL=${MODEL:-large-v3}
OUTROOT=${OUT:-runs/gpu-cal}
PORT=${PORT:-18160}
export BIN=$ASRPROF SAMPLES=${SAMPLES:-32} DATASET
export SERVER="$PYTHON refserver/refserver.py --engine whisper --model $MODEL"
mkdir -p "$OUTROOT"
[ $# -gt 0 ] || set -- cap4 graphs-tps6 prefill32
for state in "$@"; do
  t0=$SECONDS
  case $state in
    cap4) ADVICE=tools/calibrate/cap.star tools/calibrate.sh "$OUTROOT" cap4 "--max-running-requests 4" 1,8 c8 "$PORT" ;;
    graphs-tps6) ADVICE=tools/calibrate/graphs.star tools/calibrate.sh "$OUTROOT" graphs-tps6 "--tokens-per-second 6" 1,8 c1,c8 "$PORT" ;;
    prefill32) ADVICE=tools/calibrate/prefill.star tools/calibrate.sh "$OUTROOT" prefill32 "--max-running-requests 32" 1,32 c32 "$PORT" ;;
    graphs-cap) ADVICE=tools/calibrate/cap.star tools/calibrate.sh "$OUTROOT" graphs-cap "--cuda-graphs" 1,16 c16 "$PORT" ;;
    *) echo "gpu-calibrate: no state $state (cap4, graphs-tps6, prefill32, graphs-cap)" >&2; exit 2 ;;
  esac
  echo "== $state took $((SECONDS - t0)) s"
done
cat "$OUTROOT/calibration.tsv"
