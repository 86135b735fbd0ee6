#!/usr/bin/env bash
# make test-gpu: the CLI end to end on a GPU machine, as a user types it.
# Starts the whisper engine (refserver, --engine whisper) through
# `asrprof capture --server-cmd` with the DEFAULT probes, then checks that
# the bundle has gpu.jsonl samples for every scored pass and that
# `asrprof analyze DIR gpu` shows utilization, memory, power, clocks and GPM
# SM/tensor activity per level. Exit 0 only when all of it holds.
#
# Needs: bin/asrprof (or ASRPROF=path; gpu-pack/asrprof.gz is unpacked when
# present), a Python with torch and CUDA (PYTHON, default python3), a
# dataset (DATASET, default gpu-pack/data/manifest.jsonl, else
# refserver/data/refset/manifest.jsonl). OUT: where the bundle goes.
#
# First it runs the Go tests that can only run on the GPU host (they call
# internal/need's Device: elsewhere they skip with "runs on the H200: make
# test-gpu"), by name, with -v, ASRPROF_DEVICE=1 and CI=1 (so that none of
# them may skip here), under 'ulimit -l unlimited': with `go test` where Go
# is installed, else from the test binaries built on a machine with Go
# (`make bin/gpu.test bin/cpu.test`, carried with the tree). It prints which
# ran and which skipped, and fails when one failed, skipped or did not run.
#
#   tools/test-gpu.sh            the device tests, then the capture and serve checks
#   tools/test-gpu.sh go-tests   the device tests only
set -euo pipefail
cd "$(dirname "$0")/.."

# package, prebuilt test binary, the tests by name
DEVICE_TESTS=(
  "probe/gpu bin/gpu.test TestGPUReal"
  "probe/cpu bin/cpu.test TestOTelPythonFrames TestOTelRestart TestFPPythonTrampolines TestAutoEngine"
)
device_tests() {
  local ran=() skipped=() failed=() missing=() rc=0
  local go_cmd=${GO:-go}
  mkdir -p "${OUT:-runs}"
  for entry in "${DEVICE_TESTS[@]}"; do
    read -r pkg bin names <<<"$entry"
    local re="^($(tr ' ' '|' <<<"$names"))\$"
    local log="${OUT:-runs}/test-gpu.$(basename "$pkg").log"
    local how
    if command -v "$go_cmd" >/dev/null; then
      how="$go_cmd test -count=1 -v -run '$re' ./$pkg"
      (ulimit -l unlimited 2>/dev/null || true
       ASRPROF_DEVICE=1 CI=1 "$go_cmd" test -count=1 -v -run "$re" "./$pkg") 2>&1 | tee "$log" || rc=1
    elif [ -x "$bin" ]; then
      how="(cd $pkg && $bin -test.run '$re' -test.v)"
      (ulimit -l unlimited 2>/dev/null || true
       cd "$pkg" && ASRPROF_DEVICE=1 CI=1 "$OLDPWD/$bin" -test.run "$re" -test.v -test.count=1) 2>&1 | tee "$log" || rc=1
    else
      echo "test-gpu: FAIL: no Go and no $bin for $pkg: run 'make bin/gpu.test bin/cpu.test' on a machine with Go and carry bin/" >&2
      return 1
    fi
    echo "test-gpu: ran $how (ASRPROF_DEVICE=1 CI=1, ulimit -l $(ulimit -l unlimited 2>/dev/null; ulimit -l))"
    for n in $names; do
      if grep -q -- "^--- PASS: $n " "$log"; then ran+=("$n")
      elif grep -q -- "^--- SKIP: $n " "$log"; then skipped+=("$n"); rc=1
      elif grep -q -- "^--- FAIL: $n " "$log"; then failed+=("$n"); rc=1
      else missing+=("$n"); rc=1
      fi
    done
  done
  echo "test-gpu: device tests passed: ${ran[*]:-none}"
  echo "test-gpu: device tests skipped: ${skipped[*]:-none}"
  echo "test-gpu: device tests failed: ${failed[*]:-none}"
  ((${#missing[@]} == 0)) || echo "test-gpu: device tests that did not run (stale test binary?): ${missing[*]}"
  return $rc
}
if [ "${1:-}" = go-tests ]; then
  device_tests
  exit
fi
device_rc=0
device_tests || device_rc=$?

. tools/gpu-env.sh

MODEL=${MODEL:-large-v3}
PORT=${PORT:-18110}
OUT=${OUT:-runs}/test-gpu
SAMPLES=${SAMPLES:-24}
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
echo "test-gpu: asrprof capture (default probes) against the whisper engine ($MODEL) on port $PORT"
set +e
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces \
"$ASRPROF" capture \
  --server-cmd "$PYTHON refserver/refserver.py --engine whisper --model $MODEL --port $PORT --max-running-requests 8" \
  --runs 1 --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
  --dataset "$DATASET" --max-samples "$SAMPLES" --concurrency 1,8 --repeats 1 \
  --out "$OUT" 2>&1 | tee "$OUT.log"
rc=${PIPESTATUS[0]}
set -e
fail() { echo "test-gpu: FAIL: $*" >&2; exit 1; }
[ "$rc" = 0 ] || fail "asrprof capture exited $rc"
B="$OUT/run-1"
[ -s "$B/gpu.jsonl" ] || fail "$B/gpu.jsonl is missing or empty"
grep -q 'ERROR: probe' "$OUT.log" && fail "a probe was on and recorded nothing (see $OUT.log)"
"$ASRPROF" analyze "$B" gpu --format json >"$OUT.gpu.json" || fail "asrprof analyze $B gpu failed"
"$ASRPROF" analyze "$B" gpu
"$PYTHON" - "$OUT.gpu.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
tables = doc if isinstance(doc, list) else doc.get("tables", [doc])
t = next(t for t in tables if t.get("name") == "gpu")
rows = t["rows"]
cols = [c["name"] if isinstance(c, dict) else c for c in t["columns"]]
need = ["util mean %", "SM active %", "tensor active %", "mem used max (MiB)", "power mean (W)", "SM clock (MHz)"]
levels = set()
bad = []
for r in rows:
    row = dict(zip(cols, r)) if isinstance(r, list) else r
    levels.add(str(row["level"]))
    for c in need:
        v = row.get(c)
        if v is None or v == "":
            bad.append("%s %s: no %s" % (row["level"], row["gpu"], c))
if len(levels) < 2:
    bad.append("gpu rows for %d levels, want 2 (c=1, c=8)" % len(levels))
if bad:
    print("test-gpu: FAIL: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
print("test-gpu: gpu table has %s for levels %s" % (", ".join(need), ", ".join(sorted(levels))))
PY
echo "test-gpu: capture PASS ($B/gpu.jsonl: $(wc -l <"$B/gpu.jsonl") records)"

# asrprof serve on the GPU host: a probes-only capture of the gpu probe
# started over the JSON API, and the live /metrics read while it runs: every
# GPU must have its four gauges (docs/SCALE.md).
SPORT=${SERVE_PORT:-18111}
SD="$OUT-serve"
rm -rf "$SD"
"$ASRPROF" serve --listen "127.0.0.1:$SPORT" --dir "$SD" >"$OUT.serve.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null || true' EXIT
"$PYTHON" - "$SPORT" "$OUT.metrics.txt" <<'PY' || fail "asrprof serve: see $OUT.serve.log"
import json, re, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(100):
    try:
        urllib.request.urlopen(base + "/metrics", timeout=2).read()
        break
    except OSError:
        time.sleep(0.1)
req = urllib.request.Request(base + "/v1/captures", method="POST",
    data=json.dumps({"args": ["--probes-only", "--probes", "gpu", "--duration", "8s", "--period", "1s"]}).encode())
cap = json.load(urllib.request.urlopen(req, timeout=10))
time.sleep(4)
text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
open(sys.argv[2], "w").write(text)
need = ["asrprof_gpu_utilization_percent", "asrprof_gpu_sm_active_percent", "asrprof_gpu_memory_used_bytes", "asrprof_gpu_power_watts"]
missing = [n for n in need if not re.search("^%s\\{" % n, text, re.M)]
if missing:
    print("test-gpu: FAIL: asrprof serve /metrics lacks " + ", ".join(missing), file=sys.stderr)
    sys.exit(1)
for n in need:
    print("  " + next(l for l in text.splitlines() if l.startswith(n + "{")))
print("test-gpu: serve PASS (capture %s: the four GPU gauges live on /metrics)" % cap.get("id"))
PY
kill $SPID 2>/dev/null || true
[ "$device_rc" = 0 ] || fail "the device tests (above: test-gpu: device tests ...) did not all pass"
echo "test-gpu: PASS"
