package servermetrics

import "github.com/asrprof/asrprof/bundle"

// File is the bundle file the probe appends to, one
// bundle.ServerMetricsRecord a line.
const File = bundle.ServerMetricsFile
