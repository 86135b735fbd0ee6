#!/usr/bin/env bash
# Black-box diagnosis of a plain Hugging Face Whisper server on a GPU
# machine, checked against a kernel-busy ground truth. Run it ON the device,
# from anywhere (it cds to the repo root), with bin/asrprof built there and
# the refset dataset carried:
#
#   tools/gpu-blackbox.sh [CASE...]        (default: serial batch)
#
#   serial   refserver/hfwhisper_server.py --mode serial: one generate per
#            request, one request at a time
#   batch    --mode batch --max-batch 8: one generate for whatever is queued
#   gpubatch --mode batch --max-batch 16 --decode-tokens 2: the encoder's
#            work on up to 16 clips and 2 decode steps a generate, so that
#            the GPU, not the Python loop, binds
#   threads  --mode threads --workers 4: four threads each running one
#            request's generate on the shared model, their Python decode
#            loops under one GIL
#
# and the project's whisper engine (refserver.py --engine whisper --model
# MODEL, started by `asrprof capture --server-cmd`) with its telemetry not
# taken (no --profile-url, no OTLP receiver; only its /metrics), each with a
# cause known by construction (docs/GPU.md, "Servers of our own"):
#
#   engine-spin   --gpu-step-ms 60: a 60 ms kernel before each decode step,
#                 which the step's read-back spins on: GPU-bound (c=1,8)
#   engine-host   --host-step-ms 8: 8 ms of host work a step: host-bound (c=8)
#   engine-fp32   --dtype float32 --max-running-requests 64 --cuda-graphs
#                 --prefill-batch 16 --tokens-per-second 30: GPU-bound (c=64)
#
# With AS_USER=UID every capture and analysis runs as that user
# (setpriv; no eBPF, no uprobes: /proc bins, the perf engine, NVML), the
# servers too.
#
# For each case: start the server (whisper-large-v3's shape, random weights,
# float16, exactly DECODE_TOKENS tokens per generate) with a torch.profiler
# window (--profile-window WINDOW, seconds after ready) that writes the
# union of its CUDA kernel/memcpy/memset time as NAME-profile.json; wait for
# /health; `asrprof capture` with the default probes (--concurrency LEVELS
# --repeats REPEATS --max-samples SAMPLES; no OTLP receivers: the server
# sends no spans); `asrprof analyze NAME bottleneck` as text and JSON; the NVML utilization (gpu.jsonl) over the profiler's
# window beside its busy share; stop the server. A summary ends the run.
#
# Output in OUT (default runs/gpu-blackbox): NAME/ (the bundle),
# NAME-profile.json, NAME-bottleneck.txt, NAME-bottleneck.json,
# NAME-nvml.txt, NAME-server.log, NAME-capture.log, summary.txt. With
# PACK=1 (the default when OUT is set in the environment, as on the device,
# which sends back at most 8 files) each case's bundle, logs and JSON table
# are packed into NAME.tgz, leaving NAME.tgz, NAME-profile.json,
# NAME-bottleneck.txt and summary.txt.
#
# Environment: OUT, PYTHON (python3), ASRPROF (bin/asrprof; bin/asrprof.gz
# is unpacked when only it is there), DATASET
# (refserver/data/refset/manifest.jsonl), SAMPLES (16), LEVELS (1,8),
# REPEATS (2), DECODE_TOKENS (64), WINDOW (8:6), PORT (18240; the second
# case gets PORT+1), HEALTH_TIMEOUT (300 s), CAPTURE_TIMEOUT (240 s),
# SERVER_FLAGS (more server flags, e.g. --tiny), PACK (0 or 1).
# About 4 to 6 minutes for both cases on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ -n "${OUT:-}" ]; then PACK=${PACK:-1}; else PACK=${PACK:-0}; fi
OUTDIR=${OUT:-runs/gpu-blackbox}
PYTHON=${PYTHON:-python3}
ASRPROF=${ASRPROF:-bin/asrprof}
DATASET=${DATASET:-refserver/data/refset/manifest.jsonl}
SAMPLES=${SAMPLES:-16}
LEVELS=${LEVELS:-1,8}
REPEATS=${REPEATS:-2}
DECODE_TOKENS=${DECODE_TOKENS:-64}
WINDOW=${WINDOW:-8:6}
PORT=${PORT:-18240}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
CAPTURE_TIMEOUT=${CAPTURE_TIMEOUT:-240}
SERVER_FLAGS=${SERVER_FLAGS:-}
MODEL=${MODEL:-large-v3}
AS_USER=${AS_USER:-}
RUNAS=()
if [ -n "$AS_USER" ]; then
  mkdir -p /tmp/asrprof-user-home && chown "$AS_USER:$AS_USER" /tmp/asrprof-user-home
  RUNAS=(setpriv --reuid="$AS_USER" --regid="$AS_USER" --clear-groups env HOME=/tmp/asrprof-user-home)
fi
T_START=$SECONDS

die() { echo "gpu-blackbox: $*" >&2; exit 2; }
if [ ! -x "$ASRPROF" ] && [ -f "$ASRPROF.gz" ]; then
  gzip -dc "$ASRPROF.gz" >"$ASRPROF" && chmod +x "$ASRPROF"
fi
[ -x "$ASRPROF" ] || die "no asrprof binary at $ASRPROF (set ASRPROF)"
[ -f "$DATASET" ] || die "no dataset at $DATASET (set DATASET)"
"$PYTHON" -c 'import transformers, torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  case " $SERVER_FLAGS " in
    *" --device cpu "*) ;;
    *) die "$PYTHON has no torch with CUDA or no transformers here (set PYTHON)" ;;
  esac
mkdir -p "$OUTDIR" || die "cannot make $OUTDIR"
if [ -n "$AS_USER" ]; then
  chmod 1777 "$OUTDIR"
  # the user writes the bundles and the server its profile there: a folder
  # under /root (the device's $OUT) is out of its reach
  "${RUNAS[@]}" test -w "$OUTDIR" -a -x "$OUTDIR" ||
    die "uid $AS_USER cannot write $OUTDIR (a parent is closed to it): set OUT to a folder it can reach, e.g. OUT=/tmp/bb, and copy the results back"
  "${RUNAS[@]}" test -r "$ASRPROF" -a -r "$DATASET" ||
    die "uid $AS_USER cannot read $ASRPROF or $DATASET: chmod -R a+rX the checkout"
fi
ulimit -l unlimited 2>/dev/null || true  # the cpu probe's otel engine wants it

SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
  fi
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

health() { # URL: 0 when /health answers 200
  "$PYTHON" - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1] + "/health", timeout=3).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

wait_health() { # URL: 0 once healthy; 1 when the server died or HEALTH_TIMEOUT passed
  local t0=$SECONDS
  while (( SECONDS - t0 < HEALTH_TIMEOUT )); do
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "gpu-blackbox: the server exited before /health"; return 1; }
    health "$1" && { echo "gpu-blackbox: healthy after $((SECONDS - t0)) s"; return 0; }
    sleep 1
  done
  echo "gpu-blackbox: no /health after $HEALTH_TIMEOUT s"
  return 1
}

nvml_vs_profile() { # NAME: NVML util over the profiler's window beside its busy share
  "$PYTHON" - "$OUTDIR/$1-profile.json" "$OUTDIR/$1/gpu.jsonl" <<'EOF'
import json, sys
try:
    p = json.load(open(sys.argv[1]))
except Exception as e:
    print("no profile result (%s)" % e)
    sys.exit(0)
if "t_open_unix_ns" not in p or "busy_share" not in p:
    print("profile without a window: %s" % p.get("error", p))
    sys.exit(0)
a, b = p["t_open_unix_ns"], p["t_close_unix_ns"]
util, sm, gpus = [], [], set()
try:
    for line in open(sys.argv[2]):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        ts = r.get("ts_unix_ns", 0)
        if not a <= ts <= b:
            continue
        if r.get("kind") == "util" and "util_pct" in r:
            util.append(r["util_pct"]); gpus.add(r.get("gpu"))
        elif r.get("kind") == "gpm" and "sm_active_pct" in r:
            sm.append(r["sm_active_pct"])
except OSError as e:
    print("no gpu.jsonl (%s)" % e)
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
print("profiler window %.2f s (from %.2f s after ready), %d generates, %d kernels: busy_share %.3f "
      "(kernel union %.3f s)" % (p["window_s"], p.get("start_s", float("nan")), p.get("generates", 0),
                                 p.get("kernels", 0), p["busy_share"] or 0, p["kernel_union_s"]))
if p.get("generate_mean_s") and p.get("generate_mean_before_s"):
    print("profiler cost: a generate took %.3f s in the window, %.3f s before it; stopping the profiler "
          "stalled the worker %.1f s after it; the union took %.1f s, %.0f s after the window (worker idle)"
          % (p["generate_mean_s"], p["generate_mean_before_s"], p.get("stop_s", 0), p.get("analysis_s", 0),
             p.get("analysis_after_close_s", 0)))
print("NVML over the same window: util_pct mean %.1f %% over %d samples (GPUs %s); GPM sm_active mean %.1f %% over %d"
      % (mean(util), len(util), sorted(g for g in gpus if g is not None), mean(sm), len(sm)))
EOF
}

summarize() { # NAME: the first two rows per level of the bottleneck table
  "$PYTHON" - "$OUTDIR/$1-bottleneck.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no bottleneck JSON (%s)" % e)
    sys.exit(0)
seen = {}
for t in d.get("tables", []):
    if t.get("name") != "bottleneck":
        continue
    for row in t.get("rows", []):
        level, rank, cause, explains = row[0], row[1], row[2], row[3]
        seen[level] = seen.get(level, 0) + 1
        if seen[level] <= 2:
            ex = "%3.0f %%" % (100 * explains) if isinstance(explains, (int, float)) else "    -"
            print("  %-5s %s  %s  %s" % (level, rank, ex, cause))
if not seen:
    print("  (no rows: see the capture log)")
EOF
}

run_case() { # NAME PORT SERVER-FLAGS...
  local name=$1 port=$2; shift 2
  local url="http://127.0.0.1:$port" t0=$SECONDS
  rm -rf "${OUTDIR:?}/$name" "$OUTDIR/$name-"*.json "$OUTDIR/$name-"*.txt "$OUTDIR/$name-"*.log "$OUTDIR/$name.tgz"
  echo "== $name: server flags $* (decode $DECODE_TOKENS tokens, window $WINDOW)"
  # shellcheck disable=SC2086
  "${RUNAS[@]}" /usr/bin/env PYTHONUNBUFFERED=1 "$PYTHON" refserver/hfwhisper_server.py --port "$port" \
    --decode-tokens "$DECODE_TOKENS" --profile-window "$WINDOW" --profile-out "$OUTDIR/$name-profile.json" \
    $SERVER_FLAGS "$@" >"$OUTDIR/$name-server.log" 2>&1 &
  SERVER_PID=$!
  if ! wait_health "$url"; then
    tail -n 30 "$OUTDIR/$name-server.log"
    stop_server
    return 1
  fi
  echo "== $name: capture (c=$LEVELS, $REPEATS repeats, $SAMPLES samples)"
  timeout -s INT -k 30 "$CAPTURE_TIMEOUT" "${RUNAS[@]}" "$ASRPROF" capture --target "$url" --dataset "$DATASET" \
    --max-samples "$SAMPLES" --concurrency "$LEVELS" --repeats "$REPEATS" \
    --otlp-http off --otlp-grpc off --out "$OUTDIR/$name" --overwrite >"$OUTDIR/$name-capture.log" 2>&1
  echo "== $name: capture exit $? after $((SECONDS - t0)) s"
  grep -iE 'probe|skipped|error|asrprof capture:' "$OUTDIR/$name-capture.log" | head -n 12
  "${RUNAS[@]}" "$ASRPROF" analyze "$OUTDIR/$name" bottleneck >"$OUTDIR/$name-bottleneck.txt" 2>&1 ||
    echo "== $name: analyze exit $?"
  "${RUNAS[@]}" "$ASRPROF" analyze "$OUTDIR/$name" bottleneck --format json >"$OUTDIR/$name-bottleneck.json" 2>/dev/null ||
    echo "== $name: analyze --format json exit $?"
  # The window closes on its own clock, also with no traffic: wait for it.
  local w=0
  while [ ! -s "$OUTDIR/$name-profile.json" ] && (( w < 60 )) && kill -0 "$SERVER_PID" 2>/dev/null; do
    sleep 1; w=$((w + 1))
  done
  "$PYTHON" - "$url" <<'EOF' 2>/dev/null || true
import json, sys, urllib.request
h = json.load(urllib.request.urlopen(sys.argv[1] + "/health", timeout=5))
print("== server: %s generates for %s requests (%.2f a generate)"
      % (h.get("generates"), h.get("requests"), h.get("requests", 0) / max(1, h.get("generates", 0))))
EOF
  stop_server
  grep '^hfwhisper:' "$OUTDIR/$name-server.log" | grep -v listening
  nvml_vs_profile "$name" | tee "$OUTDIR/$name-nvml.txt"
  echo "== $name: done after $((SECONDS - t0)) s"
}

engine_case() { # NAME PORT LEVELS ENGINE-FLAGS...
  local name=$1 port=$2 levels=$3; shift 3
  local t0=$SECONDS
  rm -rf "${OUTDIR:?}/$name" "$OUTDIR/$name-"*.json "$OUTDIR/$name-"*.txt "$OUTDIR/$name-"*.log "$OUTDIR/$name.tgz"
  echo "== $name: the whisper engine ($MODEL), flags $*, telemetry not taken; c=$levels${AS_USER:+; as uid $AS_USER}"
  "${RUNAS[@]}" "$ASRPROF" capture --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $port $*" \
    --runs 1 --target "http://127.0.0.1:$port" --dataset "$DATASET" --max-samples "$SAMPLES" --concurrency "$levels" \
    --repeats "$REPEATS" --otlp-http off --otlp-grpc off --gpu-free-mib 16384 --out "$OUTDIR/$name" --overwrite \
    >"$OUTDIR/$name-capture.log" 2>&1
  echo "== $name: capture exit $? after $((SECONDS - t0)) s"
  grep -iE 'probe|skipped|error|asrprof capture:' "$OUTDIR/$name-capture.log" | head -n 12
  "${RUNAS[@]}" "$ASRPROF" analyze "$OUTDIR/$name/run-1" blackbox bottleneck >"$OUTDIR/$name-bottleneck.txt" 2>&1 ||
    echo "== $name: analyze exit $?"
  "${RUNAS[@]}" "$ASRPROF" analyze "$OUTDIR/$name/run-1" bottleneck --format json >"$OUTDIR/$name-bottleneck.json" 2>/dev/null ||
    echo "== $name: analyze --format json exit $?"
  cp "$OUTDIR/$name/run-1/server.log" "$OUTDIR/$name-server.log" 2>/dev/null
  echo "== $name: done after $((SECONDS - t0)) s"
}

[ $# -gt 0 ] || set -- serial batch
i=0
for what in "$@"; do
  case $what in
    serial) run_case serial $((PORT + i)) --mode serial ;;
    batch) run_case batch $((PORT + i)) --mode batch --max-batch 8 ;;
    gpubatch) run_case gpubatch $((PORT + i)) --mode batch --max-batch 16 --decode-tokens 2 ;;
    threads) run_case threads $((PORT + i)) --mode threads --workers 4 ;;
    engine-spin) engine_case "$what" $((PORT + i)) 1,8 --gpu-step-ms 60 ;;
    engine-host) engine_case "$what" $((PORT + i)) 8 --host-step-ms 8 ;;
    engine-fp32) engine_case "$what" $((PORT + i)) 64 --dtype float32 --max-running-requests 64 --cuda-graphs --prefill-batch 16 --tokens-per-second 30 ;;
    *) die "unknown case $what (serial, batch, gpubatch, threads, engine-spin, engine-host, engine-fp32)" ;;
  esac
  i=$((i + 1))
done

{
  echo "== summary ($((SECONDS - T_START)) s; hfwhisper_server, decode $DECODE_TOKENS tokens, c=$LEVELS, $SAMPLES samples x $REPEATS)"
  for what in "$@"; do
    echo "$what: bottleneck, first two rows per level (level rank explains cause)"
    summarize "$what"
    sed 's/^/  /' "$OUTDIR/$what-nvml.txt" 2>/dev/null
  done
} | tee "$OUTDIR/summary.txt"

if [ "$PACK" = 1 ]; then
  for what in "$@"; do
    files=()
    for f in "$what" "$what-bottleneck.json" "$what-server.log" "$what-capture.log" "$what-nvml.txt"; do
      [ -e "$OUTDIR/$f" ] && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] || continue
    tar -C "$OUTDIR" -czf "$OUTDIR/$what.tgz" "${files[@]}" &&
      for f in "${files[@]}"; do rm -rf "${OUTDIR:?}/$f"; done
  done
  echo "packed into $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
fi
