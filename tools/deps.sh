#!/usr/bin/env bash
# Installs the Debian packages asrprof's demo and tests need, only when
# missing (idempotent), and downloads Go modules.
set -euo pipefail
# python3-torch: the reference server's whisper engine (~230 packages).
# libopenblas0-pthread: without it Debian's torch and numpy use the reference
# BLAS, which ran a float32 matrix product ~17x slower on a 2-core machine.
# sctk: NIST md-eval (/usr/lib/sctk/bin/md-eval.pl), against which
# bench/score/diarize's tests check the diarization error rate.
# python3-aiohttp: the SGLang-Omni-style benchmark client that the proxy test
# (cmd/asrprof/proxy_test.go) runs through `capture --proxy`.
# prometheus: the Prometheus server (2.42) that scrapes asrprof serve in
# cmd/asrprof's serve and two-host tests (docs/SCALE.md).
# chromium: report/chromium_test.go opens the HTML report headless, takes a
# screenshot and checks its net log (no request of the page's).
pkgs=(python3-pocketsphinx pocketsphinx-en-us pocketsphinx-testdata sox espeak-ng flac
      python3-torch libopenblas0-pthread
      sctk python3-aiohttp prometheus chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# @duckdb/node-api (npm): DuckDB for node, the Parquet reader that is not
# ours with which cmd/asrprof/tables_test.go reads a capture's tables
# (Debian 12's pandas cannot read Parquet: it has neither pyarrow nor
# fastparquet). Installed once into ~/.cache/asrprof/duckdb-node (~70 MB).
DUCKDB_NODE=${ASRPROF_DUCKDB_NODE:-${XDG_CACHE_HOME:-$HOME/.cache}/asrprof/duckdb-node}
if [ ! -f "$DUCKDB_NODE/node_modules/@duckdb/node-api/package.json" ]; then
  if ! command -v npm >/dev/null; then
    echo "deps: installing nodejs npm"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  fi
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
