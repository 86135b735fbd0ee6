#!/usr/bin/env bash
# N reference-server workers behind refserver's router, as one
# command for `asrprof capture --server-cmd` (its process group holds them
# all: stopping the capture's server stops every worker).
#
#   tools/router-serve.sh PORT N POLICY WORKER-COMMAND...
#
# Worker i gets WORKER-COMMAND plus --port PORT+1+i --instance $NAME-wi
# (NAME: $ROUTER_NAME, default "w" alone); the last worker also gets
# $SLOW_LAST_FLAGS (e.g. --host-step-ms 40, one slow worker). With
# ROUTER_GPUS=0,1 worker i runs with CUDA_VISIBLE_DEVICES set to the i-th
# (one GPU per worker, the DP layout); unset, every worker sees every GPU
# (and a CUDA engine uses the first). The router
# listens on PORT with --policy POLICY (round-robin or least-loaded) and
# is this script's process (exec), so the capture's target pid is the
# router and its descendants are the workers.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 PORT N POLICY WORKER-COMMAND..." >&2; exit 2; }
port=$1 n=$2 policy=$3; shift 3
dir="$(cd "$(dirname "$0")/.." && pwd)"
py=${ROUTER_PYTHON:-/usr/bin/python3}
urls=()
for ((i = 0; i < n; i++)); do
  name="${ROUTER_NAME:+$ROUTER_NAME-}w$i"
  extra=()
  if [ "$i" -eq $((n - 1)) ] && [ -n "${SLOW_LAST_FLAGS:-}" ]; then
    read -r -a extra <<<"$SLOW_LAST_FLAGS"
  fi
  if [ -n "${ROUTER_GPUS:-}" ]; then
    IFS=, read -r -a gpus <<<"$ROUTER_GPUS"
    CUDA_VISIBLE_DEVICES=${gpus[$i]} "$@" --port $((port + 1 + i)) --instance "$name" "${extra[@]}" &
  else
    "$@" --port $((port + 1 + i)) --instance "$name" "${extra[@]}" &
  fi
  urls+=("http://127.0.0.1:$((port + 1 + i))")
done
IFS=,
exec "$py" "$dir/refserver/refserver.py" --router --port "$port" --workers "${urls[*]}" --policy "$policy"
