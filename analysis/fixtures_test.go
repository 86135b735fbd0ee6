package analysis

import (
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/internal/fixture"
)

// fixtures are the bundles the golden tests run every script over
// (cmd/asrprof's CLI goldens use the same).
func fixtures() map[string]fixture.Config { return fixture.Golden() }

func writeFixture(t testing.TB, name string) (string, *fixture.Truth) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	tr, err := fixture.Write(dir, fixtures()[name])
	if err != nil {
		t.Fatal(err)
	}
	return dir, tr
}

// eachFixture runs f, in a subtest named for it, on every fixture bundle
// loaded.
func eachFixture(t *testing.T, f func(t *testing.T, fx string, c *Capture)) {
	for fx := range fixtures() {
		t.Run(fx, func(t *testing.T) {
			dir, _ := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			f(t, fx, c)
		})
	}
}

// loadT is Load, and waits at the test's end for the tables that Load
// writes in the background, so that the bundle's folder can be removed.
func loadT(tb testing.TB, dir string) (*Capture, error) {
	c, err := Load(dir)
	if err == nil {
		tb.Cleanup(func() { c.Tables.Wait() })
	}
	return c, err
}
