package analysis

import (
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/analysis/fixture"
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
