# Sourced by the GPU scripts: finds asrprof, the Python with torch, and the
# dataset, on this machine or on a device that got gpu-pack/ (make gpu-pack).
if [ -z "${ASRPROF:-}" ]; then
  if [ -f gpu-pack/asrprof.gz ] && { [ ! -x gpu-pack/asrprof ] || [ gpu-pack/asrprof.gz -nt gpu-pack/asrprof ]; }; then
    gzip -dc gpu-pack/asrprof.gz >gpu-pack/asrprof && chmod +x gpu-pack/asrprof
  fi
  if [ -x gpu-pack/asrprof ]; then ASRPROF=gpu-pack/asrprof; else ASRPROF=bin/asrprof; fi
fi
[ -x "$ASRPROF" ] || { echo "no asrprof binary at $ASRPROF: run 'make build' (or 'make gpu-pack' for a device)" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  { echo "$PYTHON has no torch with CUDA here: this script is for the GPU machine (set PYTHON)" >&2; exit 2; }
if [ -z "${DATASET:-}" ]; then
  if [ -f gpu-pack/data/manifest.jsonl ]; then DATASET=gpu-pack/data/manifest.jsonl; else DATASET=refserver/data/refset/manifest.jsonl; fi
fi
[ -f "$DATASET" ] || { echo "no dataset at $DATASET: run 'make data' (or 'make gpu-pack')" >&2; exit 2; }
ulimit -l unlimited 2>/dev/null || true  # the cpu probe's otel engine needs it
export ASRPROF PYTHON DATASET
