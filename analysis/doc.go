// Package analysis runs Starlark analyses over a capture bundle.
//
// Load opens a bundle as a Capture. A Session runs scripts against it: each
// script sees a read-only `capture` value (requests with their joined server
// spans and events, the manifest's passes and their metrics, probe rows,
// the manifest and results.json), an `options` dict, an optional `baseline` capture, and
// `emit(table)` to hand tables back. Scripts load the built-in modules
// "stats", "table", "time" and "json", and other scripts: the embedded ones
// of package scripts, or files next to the user's own script. Nothing else
// is reachable: no files, network or environment.
//
// Per-pass metrics are not computed here: capture.passes is
// model/summary.Passes over the requests (Capture.Passes), the numbers of
// results.json, and the built-in scripts read them instead of recomputing.
//
// The sweep table is a script, scripts/sweep.star, and it is the only
// sweep table: `asrprof show` runs it, and `asrprof capture` prints the
// default analyses (DefaultScriptsFor, sweep first) through the capture.Finish
// that cmd/asrprof hands the session. Keeping the table in Starlark rather
// than in a Go package that the script would call means the table a user
// reads is the code a user can copy and change, and capture stays free of
// analysis (docs/ARCHITECTURE.md); the metrics under it are Go, computed
// once.
//
// Values expose their attributes through tables of accessors (name →
// func), whose sorted names are AttrNames; requests, spans and events
// compare equal by identity.
//
// Large collections (requests, spans, events, probe rows) are Go-backed
// views over the loaded records, not Starlark copies; the join of spans and
// events to requests is computed the first time a script needs it.
//
// Each script runs on its own Thread, bounded by Options.MaxSteps and
// cancelled when the context ends (Options.Timeout); per-script state lives
// in Thread locals. Errors carry the Starlark backtrace (file:line).
//
// docs/ANALYSIS.md is the user's guide.
package analysis
