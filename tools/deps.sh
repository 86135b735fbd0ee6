#!/usr/bin/env bash
# Installs the Debian packages asrprof's demo and tests need, only when
# missing (idempotent: a second run installs nothing and runs no apt-get),
# the npm packages and the Jaeger binary the tests use, and downloads Go
# modules. Under CI (.ci/run) a test whose dependency is missing fails
# (internal/need), naming it and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3 (Debian's /usr/bin/python3, the one that sees the python3-* below).
# python3-pocketsphinx, pocketsphinx-en-us: the reference server's engine;
# pocketsphinx-testdata: the LibriVox clip refserver's tests stream.
# sox, espeak-ng, flac: the reference dataset (refserver/data).
# python3-torch: the reference server's whisper engine (~230 packages).
# libopenblas0-pthread: without it Debian's torch and numpy use the reference
# BLAS, which ran a float32 matrix product ~17x slower on a 2-core machine.
# sctk: NIST md-eval (/usr/lib/sctk/bin/md-eval.pl), against which
# bench/score/diarize's tests check the diarization error rate.
# python3-aiohttp: the SGLang-Omni-style benchmark client that the proxy test
# (cmd/asrprof/proxy_test.go) runs through `capture --proxy`.
# curl: the other client of cmd/asrprof's TestCaptureProxyCommandStatus.
# prometheus: the Prometheus server (2.42) that scrapes asrprof serve in
# cmd/asrprof's serve and two-host tests (docs/SCALE.md).
# iproute2: ip(8), the network namespaces of the two-host tests.
# chromium: report/chromium_test.go opens the HTML report headless, takes a
# screenshot and checks its net log (no request of the page's).
# gcc, libc6-dev: cc, which probe/cuda's tests build the stub libcuda with
# (and cgo: go-nvml).
pkgs=(python3 python3-pocketsphinx pocketsphinx-en-us pocketsphinx-testdata sox espeak-ng flac
      python3-torch libopenblas0-pthread
      sctk python3-aiohttp curl prometheus iproute2 chromium gcc libc6-dev)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
updated=""
apt_install() { # apt-get update once, before the first install
  echo "deps: installing $*"
  if [ -z "$updated" ]; then $SUDO apt-get update -qq; updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt_install "${missing[@]}"
fi
# node and npm: the two npm packages below (checked by command, not package:
# NodeSource's nodejs brings its own npm, which Debian's npm conflicts with).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm
fi
# @duckdb/node-api (npm): DuckDB for node, the Parquet reader that is not
# ours with which cmd/asrprof/tables_test.go reads a capture's tables
# (Debian 12's pandas cannot read Parquet: it has neither pyarrow nor
# fastparquet). Installed once into ~/.cache/asrprof/duckdb-node (~70 MB).
DUCKDB_NODE=${ASRPROF_DUCKDB_NODE:-${XDG_CACHE_HOME:-$HOME/.cache}/asrprof/duckdb-node}
if [ ! -f "$DUCKDB_NODE/node_modules/@duckdb/node-api/package.json" ]; then
  echo "deps: installing @duckdb/node-api into $DUCKDB_NODE"
  mkdir -p "$DUCKDB_NODE"
  (cd "$DUCKDB_NODE" && npm install --no-audit --no-fund --loglevel=error @duckdb/node-api@1.5.6-r.1 >/dev/null)
fi
# @paulirish/trace_engine (npm): the DevTools performance panel's trace
# parser, which trace/export/trace_engine_test.go loads the Perfetto export
# into (a Chrome trace-format reader that is not ours). ~1 MB, once, into
# ~/.cache/asrprof/trace-engine.
TRACE_ENGINE=${ASRPROF_TRACE_ENGINE:-${XDG_CACHE_HOME:-$HOME/.cache}/asrprof/trace-engine}
if [ ! -f "$TRACE_ENGINE/node_modules/@paulirish/trace_engine/package.json" ]; then
  echo "deps: installing @paulirish/trace_engine into $TRACE_ENGINE"
  mkdir -p "$TRACE_ENGINE"
  (cd "$TRACE_ENGINE" && npm install --no-audit --no-fund --loglevel=error @paulirish/trace_engine@0.0.65 >/dev/null)
fi
# Download the modules that our packages and their tests import. Not
# `go mod download`: it also asks for each version's .info, which the
# proxy refuses (403) for two versions the OpenTelemetry eBPF profiler
# requires (golang.org/x/exp and otlp/processcontext), while it serves
# their code, which is all that building needs.
go list -deps -test ./... >/dev/null
# The Jaeger all-in-one binary the tests need is `make test`'s own step
# (tools/jaeger.sh: minutes the first time), not every target's.
