package capture_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/probe"
)

func TestProbesOnlyValidation(t *testing.T) {
	base := capture.DefaultConfig()
	base.ProbesOnly, base.Out = true, "x"
	for _, tc := range []struct {
		name string
		edit func(c *capture.Config)
		want string // "" valid
	}{
		{"plain", func(*capture.Config) {}, ""},
		{"with target", func(c *capture.Config) { c.Target = "http://127.0.0.1:8000" }, ""},
		{"dataset", func(c *capture.Config) { c.Dataset = "m.jsonl" }, "--dataset"},
		{"levels", func(c *capture.Config) { c.Concurrency = []int{1} }, "--concurrency"},
		{"no probes", func(c *capture.Config) { c.Probes = []string{"none"} }, "nothing to record"},
		{"short period", func(c *capture.Config) { c.Period = time.Millisecond }, "--period"},
		{"agent", func(c *capture.Config) { c.Agents = []string{"http://10.0.0.2:7070"} }, "--agent"},
		{"bad agent", func(c *capture.Config) { c.ProbesOnly = false; c.Agents = []string{"10.0.0.2:7070"} }, "--agent"},
	} {
		c := base
		tc.edit(&c)
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// A driven capture with --agent and no probes is a contradiction.
	d := capture.DefaultConfig()
	d.Target, d.Dataset, d.Out, d.Concurrency = "http://127.0.0.1:8000", "m.jsonl", "x", []int{1}
	d.Agents, d.Probes = []string{"http://10.0.0.2:7070"}, []string{"none"}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "--probes none") {
		t.Errorf("--agent with --probes none: %v", err)
	}
}

// TestProbeRun runs the proc probe on this process in periods given by
// the caller, as an agent does for a remote driver.
func TestProbeRun(t *testing.T) {
	cfg := capture.DefaultConfig()
	cfg.ProbesOnly, cfg.Probes, cfg.PID, cfg.ProcHz = true, []string{"proc"}, os.Getpid(), 50
	cfg.Out = filepath.Join(t.TempDir(), "b")
	run, err := capture.StartProbeRun(context.Background(), cfg, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if st := run.Status(); st["proc"] != "on" {
		t.Fatalf("status %v", st)
	}
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		p := probe.Period{Level: "c1", Repeat: i, StartUnixNs: time.Now().UnixNano()}
		if err := run.Begin(ctx, p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		p.EndUnixNs = time.Now().UnixNano()
		counts, err := run.End(ctx, p)
		if err != nil || counts["proc"] == 0 {
			t.Fatalf("period %d: %v %v", i, counts, err)
		}
	}
	if _, err := run.End(ctx, probe.Period{Level: "c1", Repeat: 9}); err == nil {
		t.Error("ending a period never begun: no error")
	}
	out, err := run.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.Manifest; !m.Complete || !m.Finished || len(m.Levels) != 2 || m.Levels[1].Repeat != 2 {
		t.Errorf("manifest: complete %v finished %v levels %+v incomplete %v", m.Complete, m.Finished, m.Levels, m.Incomplete)
	}
	if err := run.Begin(ctx, probe.Period{Level: "c1"}); err == nil {
		t.Error("Begin after Finish: no error")
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Out, "sched.jsonl")); err != nil || !strings.Contains(string(b), `"repeat":2`) {
		t.Errorf("sched.jsonl: %v %d bytes", err, len(b))
	}
}

// TestMeasureClock: against a fake agent whose clock runs 5 s ahead, the
// offset comes out at 5 s within its uncertainty.
func TestMeasureClock(t *testing.T) {
	const ahead = 5 * time.Second
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != capture.AgentTimePath || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		now := time.Now().Add(ahead).UnixNano()
		json.NewEncoder(w).Encode(capture.AgentTime{RecvUnixNs: now, SendUnixNs: now + 1000})
	}))
	defer srv.Close()
	c, err := capture.MeasureClock(context.Background(), srv.Client(), srv.URL, "tok", 6)
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples != 6 || c.UncertaintyNs <= 0 || c.MinRTTNs/2 != c.UncertaintyNs {
		t.Errorf("clock %+v", c)
	}
	if d := c.OffsetNs - ahead.Nanoseconds(); max(d, -d) > c.UncertaintyNs+1000 {
		t.Errorf("offset %d ns, want %d ± %d", c.OffsetNs, ahead.Nanoseconds(), c.UncertaintyNs)
	}
	if _, err := capture.MeasureClock(context.Background(), srv.Client(), srv.URL, "wrong", 2); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("a wrong token: %v", err)
	}
}
