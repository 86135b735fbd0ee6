#!/usr/bin/env bash
# Installs the Debian packages asrprof's demo and tests need, only when
# missing (idempotent), and downloads Go modules.
set -euo pipefail
# python3-torch: the reference server's whisper engine (~230 packages).
# libopenblas0-pthread: without it Debian's torch and numpy use the reference
# BLAS, which ran a float32 matrix product ~17x slower on a 2-core machine.
pkgs=(python3-pocketsphinx pocketsphinx-en-us pocketsphinx-testdata sox espeak-ng flac
      python3-torch libopenblas0-pthread)
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
# Download the modules that our packages and their tests import. Not
# `go mod download`: it also asks for each version's .info, which the
# proxy refuses (403) for two versions the OpenTelemetry eBPF profiler
# requires (golang.org/x/exp and otlp/processcontext), while it serves
# their code, which is all that building needs.
go list -deps -test ./... >/dev/null
