package analysis

import (
	"strings"
	"time"

	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/option"
)

// Settings is what a command that runs analyses (show, analyze, compare,
// report, export, what-if, capture's end) is given on its command line:
// OptionTable sets it, DefaultSettings is what a user who sets nothing
// gets.
type Settings struct {
	Format        string
	Stages        string
	Timeout       time.Duration // per script
	List          bool
	LengthBuckets string // ParseLengthBuckets' syntax
	MetricsMap    string
	Alpha         float64
}

// DefaultSettings are the analyses' defaults.
func DefaultSettings() Settings {
	return Settings{Format: "text", Stages: "auto", Timeout: DefaultTimeout, LengthBuckets: "auto", Alpha: summary.DefaultAlpha}
}

// OptionTable lists the analyses' options; a command takes those it
// names (option.Pick). Their group is "Output", where a command shows
// groups.
func OptionTable() []option.Option {
	return []option.Option{
		option.Format("Output"),
		{Name: "stages", Group: "Output", Field: "Stages", Usage: "stage preset: `auto`, " + strings.Join(Presets[1:], ", ")},
		{Name: "timeout", Group: "Output", Field: "Timeout", Usage: "limit per script (`DURATION`)"},
		{Name: "list", Group: "Output", Field: "List", Usage: "list the built-in analyses and exit"},
		{Name: "length-buckets", Group: "Output", Field: "LengthBuckets", Usage: "how the buckets analysis groups the requests by audio length (`SPEC`): auto (terciles of\n" +
			"the requests' audio durations; the edges, rounded, are printed), edges in seconds such as 5,15,30\n" +
			"(the buckets ≤ 5 s, 5–15 s, 15–30 s and > 30 s), or off. Per bucket: the sweep, the stage means,\n" +
			"the knee and the recommended level (the knee; under the capture's --slo, the highest level meeting it)"},
		{Name: "metrics-map", Group: "Output", Field: "MetricsMap", Usage: "a JSON metrics map (`FILE`) naming which of the server's /metrics are its queue, prefill,\n" +
			"decode... times and running and waiting gauges, tried before the built-in one (vLLM, SGLang);\n" +
			"metrics_stages reads it (docs/ANALYSIS.md, \"The server's own /metrics\")"},
		{Name: "alpha", Group: "Output", Field: "Alpha", Usage: "significance level of the Mann-Whitney U test (`P`)"},
	}
}
