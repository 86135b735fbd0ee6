package report

import (
	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/option"
)

// Settings is what `asrprof report` is asked: the file to write and the
// analyses' settings. Options sets it.
type Settings struct {
	Out string
	analysis.Settings
}

// DefaultSettings are the report's defaults (the analyses').
func DefaultSettings() Settings { return Settings{Settings: analysis.DefaultSettings()} }

// OptionTable lists `asrprof report`'s options: its own and the analyses'.
func OptionTable() []option.Option {
	return append([]option.Option{
		{Name: "out", Field: "Out", Usage: "the HTML `FILE` to write (default DIR/report.html, or CURRENT/compare.html)"},
	}, option.Pick(analysis.OptionTable(), "stages", "timeout", "length-buckets")...)
}
