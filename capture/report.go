package capture

import (
	"context"
	"fmt"

	"github.com/asrprof/asrprof/table"
)

// Finish is the one end-of-capture hook: what the caller makes of the
// finalized bundle in dir (interrupted captures included). capture knows no
// analyses and draws no report (bench, probe and analysis meet here only
// through what is passed in, docs/ARCHITECTURE.md): cmd/asrprof passes the
// default analyses, whose first table is the sweep that `show` and
// `analyze` print too, and package report's writer of dir/report.html.
// With tables false (a probes-only capture prints none) it makes only the
// report.
type Finish func(ctx context.Context, dir string, tables bool) Finished

// Finished is what a Finish made. Neither error is fatal: the bundle is
// there, and each is said on stderr.
type Finished struct {
	// Tables are printed on stdout in the capture's --format: those of the
	// analyses that succeeded, beside TablesErr for those that failed.
	Tables    []*table.Table
	TablesErr error
	// Report is the path of the report written ("" for none).
	Report    string
	ReportErr error
}

// OnFinish sets the session's Finish. Without one the session prints no
// tables and writes no report. Call it before Run.
func (s *Session) OnFinish(f Finish) *Session {
	s.onFinish = f
	return s
}

// runFinish runs the capture's Finish, if any: it prints the tables (when
// tables is set) on stdout in --format, then search (--find-max), and says
// on stderr what failed and where the report is.
func (k *skeleton) runFinish(ctx context.Context, tables bool, search *SearchResult) error {
	var f Finished
	if k.onFinish != nil {
		f = k.onFinish(ctx, k.cfg.Out, tables)
	}
	if f.TablesErr != nil {
		fmt.Fprintf(k.stderr, "asrprof: analysis: %v\n", f.TablesErr)
	}
	if tables && len(f.Tables) > 0 {
		if err := table.Render(k.stdout, k.cfg.Format, f.Tables...); err != nil {
			return err
		}
	}
	if search != nil {
		fmt.Fprintln(k.stdout)
		search.Print(k.stdout)
	}
	switch {
	case f.ReportErr != nil:
		k.say("report: " + f.ReportErr.Error())
	case f.Report != "":
		k.note("report: " + f.Report)
	}
	return nil
}
