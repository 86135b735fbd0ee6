package doctor

import "github.com/asrprof/asrprof/option"

// OptionTable lists `asrprof doctor`'s options; they set an Options.
func OptionTable() []option.Option {
	return []option.Option{
		{Name: "target", Field: "Target", Usage: "server base `URL` to check: GET URL/health, and the process listening on its port"},
		{Name: "pid", Field: "PID", Usage: "server process `N` (instead of finding the listener on --target's port)"},
	}
}
