package capture

import (
	"reflect"
	"testing"
	"time"

	"github.com/asrprof/asrprof/model/summary"
)

// TestConfigFromRecord: what Record writes, ConfigFromRecord reads back,
// durations included (a pass duration of 2.5 s is not an integer of ns
// in seconds), and the presentation fields keep their defaults.
func TestConfigFromRecord(t *testing.T) {
	c := DefaultConfig()
	c.Target, c.Dataset, c.Out = "http://127.0.0.1:9", "/data/m.jsonl", "/runs/x"
	c.Concurrency, c.Repeats, c.MaxSamples = []int{1, 8}, 2, 5
	c.Timeout, c.SpanGrace, c.PassDuration = 7*time.Second, 250*time.Millisecond, 2500*time.Millisecond
	c.Probes = []string{"none"}
	slo, err := summary.ParseSLO("latency=1s")
	if err != nil {
		t.Fatal(err)
	}
	c.SLO = slo
	c.Search = &Search{Attainment: 0.9, Tolerance: 1}
	c.Format, c.Quiet = "json", true // not recorded
	rec, err := c.Record()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ConfigFromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := c
	want.Format, want.Quiet = DefaultConfig().Format, false
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := ConfigFromRecord(map[string]any{"repeats": "three"}); err == nil {
		t.Error("a bad record was read")
	}
}
