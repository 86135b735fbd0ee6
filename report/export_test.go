package report

import (
	"context"
	"reflect"

	"github.com/asrprof/asrprof/table"
)

// RowType is a row type the report reads a table through, for the drift
// test (TestRowTypesDecode).
type RowType struct {
	Table, Type string
	Decode      func(*table.Table) error
}

func rowType[T any](name string) RowType {
	return RowType{name, reflect.TypeFor[T]().String(), func(t *table.Table) error { _, err := table.Decode[T](t); return err }}
}

// RowTypes are every row type of the report, by the table it reads.
var RowTypes = []RowType{
	rowType[bottleneckRow]("bottleneck"), rowType[stateRow]("attribution"), rowType[stateRow]("blackbox"),
	rowType[hotRow]("cpu_functions"), rowType[hotRow]("cpu_python"), rowType[threadRow]("cpu"),
	rowType[realtimeRow]("realtime"), rowType[lagRow]("realtime_lag"), rowType[rangeRow]("sweep_ranges"),
	rowType[kneeRow]("knee"),
}

// Tables are the tables the report of the bundle in dir draws from.
func Tables(ctx context.Context, dir string) (map[string]*table.Table, error) {
	d, err := load(ctx, dir, Options{})
	if err != nil {
		return nil, err
	}
	return d.tables, nil
}
