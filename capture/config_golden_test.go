package capture_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model/summary"
)

var update = flag.Bool("update", false, "rewrite capture's goldens in testdata/")

// goldenConfig sets every field of the configuration to a value that is
// not its default, so the record holds every name it can write.
func goldenConfig(t *testing.T) capture.Config {
	t.Helper()
	c := capture.DefaultConfig()
	c.Target, c.Dataset, c.Protocol, c.Model, c.Lang = "http://127.0.0.1:8000", "/data/m.jsonl", "openai-stream", "whisper", "zh"
	c.Concurrency, c.Rates, c.Seed, c.Repeats, c.Warmup, c.MaxSamples = []int{1, 8}, []float64{2.5}, 7, 2, true, 40
	c.Timeout, c.Grace, c.ReadyTimeout = 30*time.Second, 1500*time.Millisecond, time.Minute
	c.Out, c.Overwrite, c.Format, c.SkipBad, c.Quiet = "/runs/x", true, "json", true, true
	c.Probes, c.PID, c.ProcHz, c.CPUHz, c.CPUEngine, c.BPFStats = []string{"cpu", "gpu"}, 42, 20, 49, "fp", true
	c.GPUs, c.GPMWindow, c.GPUPCIe = []int{0, 2}, 250*time.Millisecond, true
	c.ServerMetrics, c.ServerMetricsInterval = "http://127.0.0.1:8000/metrics", 2*time.Second
	c.OTLPHTTP, c.OTLPGRPC, c.OTLPAllowRemote, c.SpanGrace = "0.0.0.0:4318", "off", true, 2*time.Second
	c.EventsDir, c.ProfileURL = "/ev", "http://127.0.0.1:8000"
	c.ChunkMs, c.Pace, c.Loops, c.Dialect, c.Hotwords = 200, "none", 2, "vllm", []string{"a", "b"}
	c.Split, c.Columns, c.SaveRawDir, c.Task = "test", dataset.Columns{ID: "k", Audio: "wav"}, "/raw", "transcribe-diarize"
	c.Proxy, c.ProxyLevels, c.LevelGap, c.Command = "127.0.0.1:8001", []string{"c1", "c8"}, 300*time.Millisecond, []string{"client", "--x"}
	c.ProbesOnly, c.Duration, c.Period = true, 90*time.Second, 10*time.Second
	c.Agents, c.AgentToken = []string{"http://10.0.0.2:7070"}, "s3cret"
	slo, err := summary.ParseSLO("latency=1s,rtf=0.3")
	if err != nil {
		t.Fatal(err)
	}
	c.SLO, c.Search = slo, &capture.Search{Attainment: 0.9, Tolerance: 0.1, Relative: true, Max: 64}
	c.PassRequests, c.PassDuration, c.ReplaySpeed = 100, 2500*time.Millisecond, 2
	return c
}

// The manifest's "config" of a configuration that sets every field, as
// manifest.json writes it, is testdata/config_record.json: the names and
// values the manifest records stay what readers of old bundles know.
func TestConfigRecordGolden(t *testing.T) {
	for name, c := range map[string]capture.Config{"config_record.json": goldenConfig(t), "config_record_default.json": capture.DefaultConfig()} {
		rec, err := c.Record()
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		file := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: the record differs:\n%s", file, got)
		}
	}
}

// What the manifest records of a configuration that sets every field,
// ConfigFromRecord reads back; the fields it does not record keep their
// defaults.
func TestConfigFromRecordEveryField(t *testing.T) {
	c := goldenConfig(t)
	rec, err := c.Record()
	if err != nil {
		t.Fatal(err)
	}
	got, err := capture.ConfigFromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	want, def := c, capture.DefaultConfig()
	want.Overwrite, want.Format, want.Quiet, want.AgentToken = def.Overwrite, def.Format, def.Quiet, def.AgentToken
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}
