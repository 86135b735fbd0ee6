package proctree

import (
	"os"
	"testing"
)

// BenchmarkDescendants is the cost of one walk of /proc (per call; it
// grows with the number of processes on the machine).
func BenchmarkDescendants(b *testing.B) {
	for b.Loop() {
		Descendants(os.Getpid())
	}
}
