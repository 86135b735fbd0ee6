package analysis

import (
	"context"
	"os"
	"testing"

	"github.com/asrprof/asrprof/analysis/table"
)

func TestZZSmoke(t *testing.T) {
	for _, fx := range []string{"refserver", "vllm", "sglang"} {
		dir, _ := writeFixture(t, fx)
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s := NewSession(c, Options{Print: os.Stderr})
		names := []string{"sweep", "stages", "bottleneck", "knee", "gpu", "cpu"}
		tabs, err := RunScripts(context.Background(), s, names)
		table.Render(os.Stdout, "text", tabs...)
		if err != nil {
			t.Error(err)
		}
	}
}
