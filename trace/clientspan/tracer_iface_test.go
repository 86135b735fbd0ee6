package clientspan_test

import (
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/trace/clientspan"
)

// The driver and the proxy call a Tracer through protocol's interface.
var _ protocol.Tracer = (*clientspan.Tracer)(nil)
