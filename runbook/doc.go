// Package runbook turns the serving teams' benchmark runbook into one
// command: it starts the server under test itself, one fresh process group
// per run, waits for its health endpoint, drives one full capture.Session
// against it, stops the whole group and waits for the GPUs to be free
// again. A plan of runs ("warm,1,2,3", or an A/B order such as ABBAAB)
// yields one sub-bundle per run under the top-level output directory, and a
// verdict over the scored runs: mean, min, max and sample standard
// deviation per level and metric, and complete only when every scored run
// finished with full coverage (capture's Manifest.Complete and Finished).
//
// The pipeline, file by file:
//
//   - lifecycle.go: a server's process group: start (log to server.log),
//     health wait that gives up when the process exits, stop (SIGTERM, then
//     SIGKILL after a grace), GPU-free wait through NVML.
//   - provenance.go: what a run's result depends on besides the code: the
//     command, the executable's path, mtime and sha256, Python's version,
//     the environment variables that change results, CPU affinity, visible
//     GPUs and compile-cache state.
//   - runs.go: the plan (ParseRuns, ABPlan), the run loop (Run), which
//     writes runbook.json, and the checks and ending of a session that
//     Run, Sensitivity and WhatIf share (checkOut, createLog, answer).
//   - verdict.go: coverage gaps and the per-level, per-metric summary.
//   - ab.go: the A/B comparison (ratio B/A and a Mann-Whitney U p-value).
//
// capture stays the single-run session; this package only drives it.
package runbook
