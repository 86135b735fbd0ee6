#!/usr/bin/env bash
# Builds the Jaeger all-in-one binary (module v1.76.0 = Jaeger v2.13.0) once,
# from the tools module tools/jaeger, into the user's cache, and prints its
# path. Idempotent: a binary already there is reused. The first build takes
# minutes (downloads the modules, compiles ~2,000 packages).
#
#   JAEGER=$(tools/jaeger.sh)
#
# trace/export's TestJaegerRoundTrip finds the binary at the same path (or
# at $ASRPROF_JAEGER). See docs/JAEGER.md.
set -euo pipefail
cd "$(dirname "$0")/jaeger"
VERSION=v1.76.0
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/asrprof
BIN=$CACHE/jaeger-$VERSION
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
echo "building Jaeger $VERSION into $BIN (once; takes minutes)" >&2
TMP=$(mktemp "$BIN.tmp.XXXXXX")
trap 'rm -f "$TMP"' EXIT
nice go build -ldflags='-s -w' -o "$TMP" github.com/jaegertracing/jaeger/cmd/jaeger
chmod 0755 "$TMP"
mv -f "$TMP" "$BIN"
trap - EXIT
echo "$BIN"
