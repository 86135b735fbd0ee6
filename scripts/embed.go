// Package scripts holds asrprof's built-in Starlark analyses (sweep,
// stages, bottleneck, knee, compare, gpu, cpu, realtime, sweep_ranges,
// metrics_stages...), the stage presets of the servers it knows (stages/),
// the library modules they share (lib/), and the built-in metrics map
// (metrics/roles.json: which of vLLM's and SGLang's Prometheus metrics
// are the queue, prefill, decode... times, each server's names with the
// source file they were taken from), embedded into the binary. package
// analysis runs them; docs/ANALYSIS.md explains how to write more.
package scripts

import "embed"

// FS holds the .star files and the metrics map, by their path under
// scripts/.
//
//go:embed *.star stages/*.star lib/*.star metrics/*.json
var FS embed.FS
