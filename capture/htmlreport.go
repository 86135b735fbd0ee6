package capture

import "context"

// Report writes the HTML report of the finished bundle in dir and returns
// the path it wrote. Like Tables, it comes from the caller: capture knows
// no analyses (cmd/asrprof passes package report's WriteFile, which writes
// dir/report.html).
type Report func(ctx context.Context, dir string) (string, error)

// WriteReport makes the session write the report f makes of the bundle
// once it is finalized and its tables printed (interrupted captures
// included). A report that fails is said on stderr, not fatal: the bundle
// is there. Call it before Run.
func (s *Session) WriteReport(f Report) *Session {
	s.report = f
	return s
}

// writeReport runs the session's Report, if any, and says where it went.
func (s *Session) writeReport(ctx context.Context, dir string, say func(string)) {
	if s.report == nil {
		return
	}
	path, err := s.report(ctx, dir)
	if err != nil {
		say("report: " + err.Error())
		return
	}
	say("report: " + path)
}
