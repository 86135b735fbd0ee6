// Package scripts holds asrprof's built-in Starlark analyses (sweep,
// stages, bottleneck, knee, compare, gpu, cpu, realtime, sweep_ranges),
// the stage presets of the servers it knows (stages/), and the library
// modules they share (lib/), embedded into the binary. package analysis runs them; docs/ANALYSIS.md
// explains how to write more.
package scripts

import "embed"

// FS holds the .star files, by their path under scripts/.
//
//go:embed *.star stages/*.star lib/*.star
var FS embed.FS
