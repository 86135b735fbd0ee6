#!/usr/bin/env bash
# The main job on the built-in default: start the reference ASR server on
# loopback, capture a concurrency sweep over the reference dataset, print
# the tables, leave the bundle in runs/demo/ and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-18000}
OUT=${OUT:-runs/demo}
SAMPLES=${SAMPLES:-12}
LEVELS=${LEVELS:-1,4}
mkdir -p runs
LOG=runs/demo-server.log

if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  echo "demo: something already answers on 127.0.0.1:$PORT; stop it or run 'make demo PORT=<free port>'" >&2
  exit 2
fi

echo "demo: starting the reference server on 127.0.0.1:$PORT (log: $LOG)"
OTLP=${OTLP:-127.0.0.1:4318}
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://$OTLP/v1/traces" \
  setsid /usr/bin/python3 refserver/refserver.py --port "$PORT" \
    --diarize refserver/data/diarset/manifest.jsonl >"$LOG" 2>&1 &
SERVER=$!
stop_server() { kill -TERM -- "-$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; }
trap stop_server EXIT

for i in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then
    echo "demo: the reference server exited during start-up; last lines of $LOG:" >&2
    tail -n 20 "$LOG" >&2
    exit 1
  fi
  sleep 0.2
done

bin/asrprof capture \
  --target "http://127.0.0.1:$PORT" \
  --dataset refserver/data/refset/manifest.jsonl \
  --max-samples "$SAMPLES" \
  --concurrency "$LEVELS" \
  --repeats 1 --warmup \
  --otlp-http "$OTLP" --profile-url "http://127.0.0.1:$PORT" \
  --out "$OUT" --overwrite

# Diarization, briefly: two multi-speaker samples of the diarset through
# --task transcribe-diarize against the server's diarization model, scored
# as SGLang-Omni scores MOSS-Transcribe-Diarize (CER, cpCER, DER).
DIAR_OUT=${DIAR_OUT:-runs/demo-diarize}
echo "demo: diarization (refserver/data/diarset, --task transcribe-diarize) into $DIAR_OUT"
if ! bin/asrprof capture --target "http://127.0.0.1:$PORT" \
    --dataset refserver/data/diarset/manifest.jsonl --max-samples 2 \
    --task transcribe-diarize --model pocketsphinx-en-us-diarize \
    --concurrency 2 --repeats 1 --probes none --otlp-http off --otlp-grpc off --quiet \
    --out "$DIAR_OUT" --overwrite >"$DIAR_OUT.log" 2>&1; then
  echo "demo: the diarization capture failed; its output:" >&2
  cat "$DIAR_OUT.log" >&2
  exit 1
fi
grep '^transcribe-diarize ' "$DIAR_OUT.log"
# The capture wrote its HTML report into the bundle (asrprof report DIR
# writes it again; docs/REPORT.md).
echo "demo: the report, one self-contained HTML file: $OUT/report.html"
