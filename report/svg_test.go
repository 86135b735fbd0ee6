package report

import (
	"testing"

	"github.com/asrprof/asrprof/analysis/engine"
)

// Every state of the attribution and of the black box has its own colour
// by name (a new state must be given one), distinct within each list, and
// a state that means the same in both lists (host work in the batch or
// in the service) has the same colour in both.
func TestStateColorsByName(t *testing.T) {
	for _, names := range [][]string{engine.AttributionStates, engine.BlackBoxStates} {
		seen := map[string]string{}
		for _, n := range names {
			c, ok := statePalette[n]
			if !ok {
				t.Errorf("state %q has no colour", n)
			}
			if o, dup := seen[c]; dup {
				t.Errorf("states %q and %q share %s", o, n, c)
			}
			seen[c] = n
		}
	}
	for _, pair := range [][2]string{{engine.StateHost, engine.BBHost}, {engine.StateUpload, engine.BBUpload}, {engine.StateConnect, engine.BBConnect}, {engine.StateOffCPU, engine.BBOffCPU}} {
		if stateColor(pair[0]) != stateColor(pair[1]) {
			t.Errorf("%q and %q differ: %s, %s", pair[0], pair[1], stateColor(pair[0]), stateColor(pair[1]))
		}
	}
}
