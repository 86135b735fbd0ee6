#!/usr/bin/env bash
# make gpu-pack: what a GPU machine without Go or internet needs, in
# gpu-pack/ (git-ignored): the asrprof binary (stripped, gzipped to travel)
# and the reference dataset. The engine (refserver) and the scripts
# (tools/test-gpu.sh, tools/gpu-study.sh) travel with the tree. Copy the
# checkout with gpu-pack/ to the GPU machine and run the scripts there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p gpu-pack
gzip -9c bin/asrprof >gpu-pack/asrprof.gz
rm -f gpu-pack/asrprof
rm -rf gpu-pack/data
cp -r refserver/data/refset gpu-pack/data
echo "gpu-pack: $(du -sh gpu-pack | cut -f1) in gpu-pack/ (asrprof $(du -h gpu-pack/asrprof.gz | cut -f1) gzipped, $(wc -l <gpu-pack/data/manifest.jsonl) utterances)"
