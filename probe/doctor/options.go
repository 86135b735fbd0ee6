package doctor

import "github.com/asrprof/asrprof/option"

// OptionTable lists `asrprof doctor`'s options; they set an Options.
func OptionTable() []option.Option {
	return []option.Option{
		{Name: "target", Field: "Target", Usage: "server base `URL` to check: GET URL/health and URL/v1/models, and the process listening on its port"},
		{Name: "pid", Field: "PID", Usage: "server process `N` (instead of finding the listener on --target's port)"},
		{Name: "header", Field: "Headers", Value: func(o any) any { return (*option.Repeated)(&o.(*Options).Headers) },
			Usage: "send `\"NAME: VALUE\"` (or @FILE's lines) with the target checks, as capture --header (an API key)"},
	}
}
