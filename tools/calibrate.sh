#!/bin/sh
# Calibration of the advice's predictions on the reference server (CPU):
# for each server state, one capture (its levels, one repeat), then
# asrprof what-if at each level given (the diagnosis's own advice, A, B, A
# on fresh servers), and one line per prediction appended to
# $OUT/calibration.tsv: state, level, model (the verdict), knob, predicted
# ratio [lo-hi], measured ratio, judged interval, inside, load average.
# docs/CAPACITY.md "Calibration" holds the table it gave.
#
#   tools/calibrate.sh OUT STATE_NAME "REFSERVER FLAGS" LEVELS [WHATIF_LEVELS|auto] [PORT]
#   tools/calibrate.sh runs/cal cap3 "--max-running-requests 3" 1,3,6 auto 18061
#
# auto: every level whose advice has a knob and a prediction. ADVICE=SCRIPT
# takes the advice from SCRIPT instead of the bottleneck analysis (one
# model at every level, whatever the verdict: tools/calibrate/cap.star,
# build.star, host.star). The dataset
# is the reference set's 8 shortest clips (by file size, then id; about
# 2.5-3 s each), written to OUT/short.jsonl, to keep the CPU cost small
# on a shared machine.
#
# Environment: BIN (bin/asrprof), SAMPLES (6), ORDER (what-if's --order,
# ABA: the least that measures the A/A spread; the CPU table's), SERVER
# (the server command before its flags: /usr/bin/python3
# refserver/refserver.py; tools/gpu-calibrate.sh gives the whisper
# engine's), DATASET (a manifest to use whole instead of the 8 shortest
# clips), CAPTURE_FLAGS (--otlp-http 127.0.0.1:0 --otlp-grpc off).
set -eu
OUT=$1 NAME=$2 FLAGS=$3 LEVELS=$4 WL=${5:-auto} PORT=${6:-18061}
BIN=${BIN:-bin/asrprof}
SAMPLES=${SAMPLES:-6}
ORDER=${ORDER:-ABA}
SERVER=${SERVER:-/usr/bin/python3 refserver/refserver.py}
CAPTURE_FLAGS=${CAPTURE_FLAGS:---otlp-http 127.0.0.1:0 --otlp-grpc off}
SRV="$SERVER --port $PORT $FLAGS"
mkdir -p "$OUT"
DATA=${DATASET:-$OUT/short.jsonl}
[ -f "$DATA" ] || python3 - "$DATA" <<'PY'
import json, os, sys
base = "refserver/data/refset"
rows = [json.loads(l) for l in open(os.path.join(base, "manifest.jsonl"))]
rows = [r for r in rows if os.path.exists(os.path.join(base, r["audio"]))]
rows.sort(key=lambda r: (os.path.getsize(os.path.join(base, r["audio"])), r["id"]))
with open(sys.argv[1], "w") as f:
    for r in rows[:8]:
        r["audio"] = os.path.realpath(os.path.join(base, r["audio"]))
        f.write(json.dumps(r) + "\n")
PY
ADVICE=${ADVICE:-bottleneck}
# a capture of this state still being written (another call): wait for it
# while it is written to (a file changed in the last minute); one a killed
# call left is captured again
n=0
while [ -d "$OUT/$NAME/run-1" ] && [ ! -f "$OUT/$NAME/run-1/results.json" ] && [ $n -lt 180 ] &&
  [ -n "$(find "$OUT/$NAME" -mmin -1 -print 2>/dev/null | head -1)" ]; do sleep 5; n=$((n + 1)); done
if [ ! -f "$OUT/$NAME/run-1/results.json" ]; then
  rm -rf "$OUT/$NAME"
  $BIN capture --runs 1 --server-cmd "$SRV" --target "http://127.0.0.1:$PORT" --profile-url "http://127.0.0.1:$PORT" \
    --dataset "$DATA" --max-samples "$SAMPLES" --concurrency "$LEVELS" --repeats 1 \
    --out "$OUT/$NAME" $CAPTURE_FLAGS --quiet > "$OUT/$NAME.capture.log" 2>&1
fi
$BIN analyze "$OUT/$NAME/run-1" bottleneck > "$OUT/$NAME.bottleneck.txt" 2>&1 || true
if [ "$WL" = auto ]; then
  WL=$($BIN analyze "$OUT/$NAME/run-1" "$ADVICE" --format json | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tables"]:
    if t["name"] == "advice":
        c = {n: i for i, n in enumerate(t["columns"])}
        print(",".join(r[c["level"]] for r in t["rows"] if r[c["knob"]] and r[c["predicted"]] is not None))')
  echo "$NAME: what-if at ${WL:-no level with a knob}" >&2
fi
for lv in $(echo "$WL" | tr , ' '); do
  wi="$OUT/$NAME-wi-$lv"
  load=$(cut -d' ' -f1 /proc/loadavg)
  if $BIN what-if "$OUT/$NAME/run-1" --server-cmd "$SRV" --level "$lv" --advice "$ADVICE" --order "$ORDER" --out "$wi" --overwrite > "$wi.stdout" 2> "$wi.stderr"; then :; else
    echo "$NAME $lv: what-if failed (exit $?): $(tail -1 "$wi.stderr")" >&2; continue
  fi
  load2=$(cut -d' ' -f1 /proc/loadavg)
  python3 - "$wi/whatif.json" "$NAME" "$FLAGS" "$lv" "$load-$load2" >> "$OUT/calibration.tsv" <<'PY'
import json, sys
p, name, flags, lv, load = sys.argv[1:]
r = json.load(open(p))["rounds"][0]
a, j = r["advice"], r.get("judgement")
if j is None:
    print("\t".join([name, flags, lv, a.get("cause", ""), a.get("knob", ""), "-", "-", "-", "-", load, "no judgement: " + a.get("basis", "")[:80]]))
else:
    print("\t".join([name, flags, lv, a["cause"], a["knob"],
                     "%.3f [%.3f–%.3f]" % (j["predicted_ratio"], j["predicted_ratio_lo"], j["predicted_ratio_hi"]),
                     "%.3f" % j["measured_ratio"], "%.3f–%.3f" % (j["judged_lo"], j["judged_hi"]),
                     "yes" if j["inside"] else "no", load,
                     "A %s B %s" % (r.get("before_runs"), r.get("after_runs"))]))
PY
done
