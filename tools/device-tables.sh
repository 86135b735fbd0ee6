#!/usr/bin/env bash
# The stage table's speed against plain Python on another machine (the
# lent device), docs/PERFORMANCE.md section 5, run S. Run from the
# checkout with gpu-pack/asrprof.gz (make build gpu-pack) and
# gpu-pack/benchdata.gz (go build -ldflags '-s -w' -o /tmp/benchdata
# ./tools/benchdata; gzip -9c /tmp/benchdata >gpu-pack/benchdata.gz);
# OUT names the folder for the log. Python and asrprof are pinned to two
# cores (taskset -c 0,1), as on this project's own machines; asr16 runs
# on every core. Each round: Python, asrprof from JSONL only right after
# it, again right after that, again after 6 s idle, on every core, and
# with the tables present.
set -u
B=/tmp/b
mkdir -p "$B" "$OUT"
gunzip -c gpu-pack/asrprof.gz >"$B/asrprof"
gunzip -c gpu-pack/benchdata.gz >"$B/benchdata"
chmod +x "$B/asrprof" "$B/benchdata"
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3)
echo "python: $PY $($PY --version 2>&1); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo)"
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled); virtio: $(ls /sys/bus/virtio/drivers 2>/dev/null | tr '\n' ' ')"
"$B/benchdata" -bundle "$B/full" >/dev/null
mkdir -p "$B/jb"
for f in events.jsonl manifest.json requests.jsonl results.json; do cp "$B/full/$f" "$B/jb/"; done
L=$OUT/log
: >"$L"
run() { # run NAME CMD...: one timed run, appended to the log
  local name=$1
  shift
  /usr/bin/time -a -o "$L" -f "$name %e %U %S %M" "$@" >"$OUT/$name.txt"
}
for _ in 1 2 3 4 5 6 7; do
  run py taskset -c 0,1 $PY tools/stages_anchor.py "$B/jb"
  rm -rf "$B/jb/tables"; run asr2 taskset -c 0,1 "$B/asrprof" analyze "$B/jb" stages
  rm -rf "$B/jb/tables"; run asr2again taskset -c 0,1 "$B/asrprof" analyze "$B/jb" stages
  sleep 6
  rm -rf "$B/jb/tables"; run asr2idle taskset -c 0,1 "$B/asrprof" analyze "$B/jb" stages
  rm -rf "$B/jb/tables"; run asr16 "$B/asrprof" analyze "$B/jb" stages
  run asr2tables taskset -c 0,1 "$B/asrprof" analyze "$B/jb" stages
done
for k in py asr2 asr2again asr2idle asr16 asr2tables; do
  echo "$k wall: $(grep "^$k " "$L" | awk '{print $2}' | sort -n | tr '\n' ' ') sys: $(grep "^$k " "$L" | awk '{print $4}' | sort -n | tr '\n' ' ') peak RSS: $(grep "^$k " "$L" | awk '{print $5}' | sort -n | tail -1) KB"
done
if cmp -s "$OUT/asr2.txt" "$OUT/asr2tables.txt"; then
  echo "asrprof printed the same table from JSONL and from its tables"
else
  echo "asrprof's tables from JSONL and from its tables DIFFER: diff $OUT/asr2.txt $OUT/asr2tables.txt" >&2
  exit 1
fi
