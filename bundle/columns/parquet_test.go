package columns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// A table is written through temporary files (its parts, its pages); a
// write that fails leaves none of them, and no table; one that succeeds
// leaves the table alone, its rows in order.
func TestWriteTableTemporaries(t *testing.T) {
	type row struct {
		A int64 `parquet:"a"`
	}
	boom := errors.New("boom")
	for _, n := range []int{1000, 600_000} { // one part; several
		dir := t.TempDir()
		path := filepath.Join(dir, "t.parquet")
		err := writeTable(path, nil, n, nil, func(w *parquet.GenericWriter[row], lo, hi int) error {
			if err := writeBatches(w, lo, hi, func(i int) row { return row{int64(i)} }); err != nil || lo > 0 {
				return err
			}
			return boom // the part of row 0 fails
		})
		if !errors.Is(err, boom) {
			t.Fatalf("%d rows: %v, want boom", n, err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%d rows: a failed write left %v", n, left)
		}
		if err := writeRows(path, map[string]string{"k": "v"}, n, func(i int) row { return row{int64(i)} }); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 1 {
			t.Errorf("%d rows: the write left %v", n, left)
		}
		rows, err := parquet.ReadFile[row](path)
		if err != nil || len(rows) != n || rows[n-1].A != int64(n-1) || rows[n/2].A != int64(n/2) {
			t.Fatalf("%d rows read back: %d, %v", n, len(rows), err)
		}
	}
}
