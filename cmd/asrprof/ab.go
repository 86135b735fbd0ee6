package main

const abUsage = `Usage: asrprof ab --a-cmd COMMAND --b-cmd COMMAND --target URL --dataset PATH [--order ABBAAB] [capture flags]

Compares two server commands (A and B: two commits, two settings) in one
session. Every run starts a fresh server from its side's command, in its own
process group, waits for --health-url, runs a full capture into its own
sub-bundle under --out, then stops the group and waits for the GPUs to be
free (as capture --server-cmd does; see asrprof capture --help).

Without --no-warm, one unscored warm run of each side comes first (A-warm/,
B-warm/). Then the scored runs follow --order, alternating so that drift
over the session hits both sides alike: ABBAAB gives A-1, B-1, B-2, A-2, A-3,
B-3. Each run records its server's fingerprint (command, executable path,
mtime and sha256, Python version and sys.prefix, the environment variables
that change results, CPU affinity, GPUs, --cache-dir states); differences
between A and B are printed with the runs.

For each level and metric asrprof prints the mean of A, the mean of B, the
ratio B/A and the two-sided Mann-Whitney U p-value over the scored runs'
means, with the change in percent, or ~ when p ≥ 0.05. With 3 runs a side
the smallest possible p is 0.1, so nothing shows as significant: use at
least 4 a side (ABBAABBA). runbook.json at the top of --out holds it all.

When a scored run lacks coverage, the missing coverage is printed instead of
the comparison (exit 3).

Example:
  asrprof ab --target http://127.0.0.1:8000 --dataset refserver/data/refset/manifest.jsonl \
      --a-cmd "/venv-main/bin/python -m server --port 8000" \
      --b-cmd "/venv-pr/bin/python -m server --port 8000" \
      --order ABBAABBA --concurrency 8 --repeats 1 --out runs/ab

Flags:
`
