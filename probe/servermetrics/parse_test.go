package servermetrics

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name  string
		in    string
		want  []Sample
		types map[string]string
	}{
		{
			name: "vllm names with colons, gauge, counter, histogram",
			in: `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="openai/whisper-large-v3"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 3.25
`,
			want: []Sample{
				{Name: "vllm:num_requests_running", Labels: []Label{{"engine", "0"}, {"model_name", "openai/whisper-large-v3"}}, Value: 3},
				{Name: "vllm:generation_tokens_total", Labels: []Label{{"engine", "0"}, {"model_name", "m"}}, Value: 1234},
				{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: []Label{{"engine", "0"}, {"le", "0.3"}, {"model_name", "m"}}, Value: 2},
				{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: []Label{{"engine", "0"}, {"le", "+Inf"}, {"model_name", "m"}}, Value: 5},
				{Name: "vllm:e2e_request_latency_seconds_count", Labels: []Label{{"engine", "0"}, {"model_name", "m"}}, Value: 5},
				{Name: "vllm:e2e_request_latency_seconds_sum", Labels: []Label{{"engine", "0"}, {"model_name", "m"}}, Value: 3.25},
			},
			types: map[string]string{"vllm:num_requests_running": "gauge", "vllm:generation_tokens_total": "counter", "vllm:e2e_request_latency_seconds": "histogram"},
		},
		{
			name: "escaped label values",
			in:   `m{path="C:\\dir\\",msg="say \"hi\"\nbye",empty=""} 1` + "\n",
			want: []Sample{{Name: "m", Labels: []Label{{"path", `C:\dir\`}, {"msg", "say \"hi\"\nbye"}, {"empty", ""}}, Value: 1}},
		},
		{
			name: "NaN, infinities, exponents, timestamps",
			in:   "a NaN\nb +Inf\nc -Inf\nd 1.5e3 1700000000123\ne{x=\"y\"} -0.25 -5\nf Inf\n",
			want: []Sample{
				{Name: "a", Value: nan}, {Name: "b", Value: inf}, {Name: "c", Value: -inf},
				{Name: "d", Value: 1500, TimestampMs: 1700000000123, HasTimestamp: true},
				{Name: "e", Labels: []Label{{"x", "y"}}, Value: -0.25, TimestampMs: -5, HasTimestamp: true},
				{Name: "f", Value: inf},
			},
		},
		{
			name: "comments, blank lines, blanks, trailing comma, CRLF",
			in:   "# a free comment\n#\n\n   \t\n  x  { a = \"1\" , b=\"2\", }   7  \r\n# HELP y with \\n escaped help\ny\t8\n",
			want: []Sample{
				{Name: "x", Labels: []Label{{"a", "1"}, {"b", "2"}}, Value: 7},
				{Name: "y", Value: 8},
			},
		},
		{
			name:  "UTF-8 quoted names",
			in:    "# TYPE \"my.metric\" gauge\n{\"my.metric\",\"some.label\"=\"v\"} 2\n",
			want:  []Sample{{Name: "my.metric", Labels: []Label{{"some.label", "v"}}, Value: 2}},
			types: map[string]string{"my.metric": "gauge"},
		},
		{
			name:  "OpenMetrics exemplar skipped, EOF ends",
			in:    "# TYPE h histogram\nh_bucket{le=\"1\"} 3 # {trace_id=\"abc\"} 0.5 1700000000\n# EOF\nnot a sample at all\n",
			want:  []Sample{{Name: "h_bucket", Labels: []Label{{"le", "1"}}, Value: 3}},
			types: map[string]string{"h": "histogram"},
		},
		{name: "empty", in: "", want: nil},
		{name: "no label set", in: "x{} 1\n", want: []Sample{{Name: "x", Value: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Samples) != len(tc.want) {
				t.Fatalf("%d samples %+v, want %d", len(e.Samples), e.Samples, len(tc.want))
			}
			for i, got := range e.Samples {
				w := tc.want[i]
				same := got.Name == w.Name && reflect.DeepEqual(got.Labels, w.Labels) &&
					(got.Value == w.Value || math.IsNaN(got.Value) && math.IsNaN(w.Value)) &&
					got.TimestampMs == w.TimestampMs && got.HasTimestamp == w.HasTimestamp
				if !same {
					t.Errorf("sample %d = %+v, want %+v", i, got, w)
				}
			}
			if tc.types == nil {
				tc.types = map[string]string{}
			}
			if !reflect.DeepEqual(e.Types, tc.types) {
				t.Errorf("types %v, want %v", e.Types, tc.types)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"bad-name 1", "line 1: invalid character '-'"},
		{"ok 1\n9x 1", "line 2: invalid metric name"},
		{`x{a="b} 1`, "unterminated quoted string"},
		{`x{a="\q"} 1`, `invalid escape \q`},
		{`x{a=b} 1`, `label a: expected '"'`},
		{`x{a="b" c="d"} 1`, "expected ',' or '}'"},
		{`x{1a="b"} 1`, "invalid label name"},
		{"x", "sample x without a value"},
		{"x{}", "sample x without a value"},
		{"x 1 2 3", `unexpected text "3"`},
		{"x 1 1.5", `invalid timestamp "1.5"`},
		{"x one", `invalid value "one"`},
		{"x 0x10", `invalid value "0x10"`},
		{"x 1_000", `invalid value "1_000"`},
		{`{a="b"} 1`, "sample without a metric name"},
		{"# TYPE x bogus", `unknown type "bogus"`},
		{"# TYPE x", "malformed TYPE line"},
		{"# TYPE x-y gauge", "invalid metric name"},
		{"<html><body>Not Found</body></html>", "invalid metric name at the start"},
		{`{"detail":"Not Found"}`, "expected '=' after label detail"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := Parse(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestTypeOf(t *testing.T) {
	e, err := Parse(`# TYPE vllm:prompt_tokens counter
# TYPE vllm:num_requests_running gauge
# TYPE sglang:queue_time_seconds histogram
# TYPE rpc summary
# TYPE asr_requests_total counter
# TYPE asr_requests_created gauge
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, typ  string
		cumulative bool
	}{
		{"vllm:prompt_tokens_total", "counter", true}, // OpenMetrics-style TYPE without _total
		{"vllm:num_requests_running", "gauge", false},
		{"sglang:queue_time_seconds_bucket", "histogram", true},
		{"sglang:queue_time_seconds_sum", "histogram", true},
		{"sglang:queue_time_seconds_count", "histogram", true},
		{"rpc", "summary", false}, // a quantile
		{"rpc_sum", "summary", true},
		{"rpc_count", "summary", true},
		{"asr_requests_total", "counter", true},
		{"asr_requests_created", "gauge", false},
		{"rpc_bucket", "untyped", false}, // a summary has no buckets
		{"unknown_metric", "untyped", false},
	} {
		typ := e.TypeOf(tc.name)
		if typ != tc.typ || Cumulative(typ, tc.name) != tc.cumulative {
			t.Errorf("%s: type %s cumulative %v, want %s %v", tc.name, typ, Cumulative(typ, tc.name), tc.typ, tc.cumulative)
		}
	}
}
