package capture

import "os"

// audioFiles reads each distinct audio file once: the samples that name
// the same file share its bytes in memory (a manifest may list one file
// thousands of times; the load driver only reads them).
type audioFiles map[string][]byte

func (f audioFiles) read(path string) ([]byte, error) {
	if b, ok := f[path]; ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f[path] = b
	return b, nil
}
