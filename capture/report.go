package capture

import (
	"context"
	"fmt"
	"io"

	"github.com/asrprof/asrprof/table"
)

// Tables makes the tables a finished capture prints from its bundle in
// dir. capture knows no analyses of its own (bench, probe and analysis
// meet here only through what is passed in, docs/ARCHITECTURE.md):
// cmd/asrprof passes the default analyses, whose first table is the sweep
// that `show` and `analyze` print too. Tables of the analyses that
// succeeded come back with the error of those that failed.
type Tables func(ctx context.Context, dir string) ([]*table.Table, error)

// printTables prints what tables makes of the finished bundle, in format.
// A failing analysis is reported on errw, not fatal: the bundle is there.
func printTables(ctx context.Context, w, errw io.Writer, format string, tables Tables, dir string) error {
	if tables == nil {
		return nil
	}
	ts, err := tables(ctx, dir)
	if err != nil {
		fmt.Fprintf(errw, "asrprof: analysis: %v\n", err)
	}
	if len(ts) == 0 {
		return nil
	}
	return table.Render(w, format, ts...)
}
