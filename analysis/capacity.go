package analysis

import (
	"fmt"
	"os"
	"path/filepath"

	"go.starlark.net/starlark"

	"github.com/asrprof/asrprof/bundle"
)

// jsonFile reads a JSON file as a Starlark value (numbers keep their
// digits); None when it is absent.
func jsonFile(path string) (starlark.Value, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return starlark.None, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := jsonBytes(b)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return v, nil
}

// sensitivityValue is capture.sensitivity (docs/CAPACITY.md):
// sensitivity.json of the bundle's folder or of the folder above it (asrprof
// sensitivity writes it at the top of its --out, above the runs'
// sub-bundles), as a dict; None when neither has one.
func sensitivityValue(v *captureValue) (starlark.Value, error) {
	for _, d := range []string{v.c.Dir, filepath.Dir(filepath.Clean(v.c.Dir))} {
		p := filepath.Join(d, bundle.SensitivityFile)
		if _, err := os.Stat(p); err == nil {
			return jsonFile(p)
		}
	}
	return starlark.None, nil
}

// searchValue is capture.search: the bundle's search.json (--find-max),
// None without one.
func searchValue(v *captureValue) (starlark.Value, error) {
	return jsonFile(filepath.Join(v.c.Dir, bundle.SearchFile))
}
