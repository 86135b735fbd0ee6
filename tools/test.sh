#!/usr/bin/env bash
# make test's tests, after `go vet`: two chains side by side.
#
#   1. cmd/asrprof's test binary, at the normal priority. It is make
#      test's wall time (about 11 of its 12 minutes), and its sequential
#      tests judge servers that need a core.
#   2. Every other package (-p 1), then the fuzz targets (make fuzz), at
#      nice 10: they run in the CPU that chain 1 leaves idle. Alone,
#      cmd/asrprof's sequential phase leaves 58 % of the two cores idle
#      (docs/PERFORMANCE.md, "make test and its Debian packages").
#
# At the same priority the two chains slowed cmd/asrprof by 20-30 s and
# gained nothing over running them one after another (stop 66); at nice 10
# chain 2 gets the CPU only where chain 1 does not want it.
#
# Each chain prints as it goes; the exit status is non-zero when either
# failed, and a line at the end names which. Each chain is a job of its own
# (set -m: its own process group, which a non-interactive shell's
# background job would otherwise share with make, SIGINT ignored); Ctrl-C
# or a TERM to this script is passed on to both groups, test binaries and
# their servers included.
set -uo pipefail
set -m
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAKE=${MAKE:-make}
TIMEOUT=${TIMEOUT:-50m}

others=$($GO list ./... | grep -v '/cmd/asrprof$') || { echo "test.sh: go list failed" >&2; exit 2; }

echo "$GO test -count=1 -timeout $TIMEOUT ./cmd/asrprof" >&2
$GO test -count=1 -timeout "$TIMEOUT" ./cmd/asrprof &
main=$!
echo "nice -n 10: $GO test -count=1 -timeout $TIMEOUT -p 1 (the $(echo "$others" | wc -l) other packages), then $MAKE fuzz" >&2
nice -n 10 sh -c "$GO test -count=1 -timeout $TIMEOUT -p 1 $(echo $others) && $MAKE --no-print-directory fuzz" &
rest=$!
stop() { kill "-$1" -- "-$main" "-$rest" 2>/dev/null; wait; exit "$2"; }
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM

wait $main
a=$?
wait $rest
b=$?
if [ $a -ne 0 ] || [ $b -ne 0 ]; then
  [ $a -eq 0 ] || echo "make test: cmd/asrprof's tests failed (exit $a)" >&2
  [ $b -eq 0 ] || echo "make test: the other packages' tests or the fuzz targets failed (exit $b)" >&2
  exit 1
fi
