package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/asrprof/asrprof/bundle"

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
	// They are the answer (the run's checks, the summary); Detail follows
	// them with --verbose, and DetailHint (a line that says how to print
	// the detail) takes its place without.
	Tables     []*table.Table
	Detail     []*table.Table
	DetailHint *table.Table
	TablesErr  error
	// Report is the path of the report written ("" for none).
	Report    string
	ReportErr error
	// Validity is the run's checks on itself, as the hook computed them
	// (a JSON-able record; docs/VALIDITY.md): capture records it as it
	// is, in the manifest (extra.validity) and in results.json
	// ("validity"), without reading it.
	Validity any
	// Failed, when set, is the hook's judgement that the run measured
	// nothing it could stand on (a scored level without one success): Run
	// returns it once the bundle is finalized.
	Failed error
}

// OnFinish sets the session's Finish. Without one the session prints no
// tables and writes no report. Call it before Run.
func (s *Session) OnFinish(f Finish) *Session {
	s.onFinish = f
	return s
}

// runFinish runs the capture's Finish, if any: it prints the tables (when
// tables is set) on stdout in --format (the detail with --verbose, else
// the line that points to it, which --quiet leaves out), then search
// (--find-max), and says on stderr what failed and where the report is.
func (k *skeleton) runFinish(ctx context.Context, tables bool, search *bundle.SearchResult) (Finished, error) {
	var f Finished
	if k.onFinish != nil {
		f = k.onFinish(ctx, k.cfg.Out, tables)
	}
	if f.Validity != nil {
		if err := k.recordValidity(f.Validity); err != nil {
			k.say("validity: " + err.Error())
		}
	}
	if f.TablesErr != nil {
		fmt.Fprintf(k.stderr, "asrprof: analysis: %v\n", f.TablesErr)
	}
	if tables {
		out := f.Tables
		switch {
		case k.cfg.Verbose:
			out = append(slices.Clip(out), f.Detail...)
		case f.DetailHint != nil && len(f.Detail) > 0 && !k.cfg.Quiet:
			out = append(slices.Clip(out), f.DetailHint)
		}
		if len(out) > 0 {
			if err := table.Render(k.stdout, k.cfg.Format, out...); err != nil {
				return f, err
			}
		}
	}
	if search != nil {
		fmt.Fprintln(k.stdout)
		PrintSearch(k.stdout, search)
	}
	switch {
	case f.ReportErr != nil:
		k.say("report: " + f.ReportErr.Error())
	case f.Report != "":
		k.note("report: " + f.Report)
	}
	return f, nil
}

// recordValidity writes v into the finalized manifest (extra.validity)
// and results.json (key "validity", when the file is there).
func (k *skeleton) recordValidity(v any) error {
	k.mu.Lock()
	extra(&k.manifest)["validity"] = v
	k.mu.Unlock()
	if err := k.saveManifest(); err != nil {
		return err
	}
	path := filepath.Join(k.cfg.Out, bundle.ResultsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := res["validity"]; ok {
		return fmt.Errorf("%s already holds a validity", path)
	}
	vb, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return err
	}
	// appended to the object as written, so its keys keep their order
	b = bytes.TrimRight(b, " \n")
	b = append(b[:len(b)-1], []byte(",\n  \"validity\": ")...)
	return bundle.ReplaceFile(path, append(append(b, vb...), "\n}\n"...))
}
