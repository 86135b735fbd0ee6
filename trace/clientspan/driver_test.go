package clientspan_test

import (
	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/trace/clientspan"
)

// The driver calls a Tracer through its own interface.
var _ driver.Tracer = (*clientspan.Tracer)(nil)
