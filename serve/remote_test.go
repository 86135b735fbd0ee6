package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/probe"
)

// probesOnly is a Parse that ignores the args: a probes-only capture of
// this process with the proc probe.
func probesOnly([]string) (capture.Config, error) {
	cfg := capture.DefaultConfig()
	cfg.ProbesOnly, cfg.Probes, cfg.PID, cfg.ProcHz, cfg.Out = true, []string{"proc"}, os.Getpid(), 50, "unused"
	return cfg, nil
}

func post(t *testing.T, u string, in any, out any) int {
	t.Helper()
	b, _ := json.Marshal(in)
	resp, err := http.Post(u, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// TestRemoteCapture drives a remote capture's periods over the API, then
// leaves it: the daemon finishes it once the driver has been quiet for
// RemoteIdle, and its bundle holds both periods.
func TestRemoteCapture(t *testing.T) {
	s, err := New(Config{Dir: t.TempDir(), Parse: probesOnly, RemoteIdle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	var ac capture.AgentCapture
	if code := post(t, ts.URL+capture.AgentCapturesPath, capture.AgentStart{Remote: true}, &ac); code != http.StatusCreated || ac.Kind != "remote" || ac.Probes["proc"] != "on" {
		t.Fatalf("start: %d %+v", code, ac)
	}
	base := ts.URL + capture.AgentCapturesPath + "/" + ac.ID
	if code := post(t, base+"/end", probe.Period{Level: "c1", Repeat: 1}, nil); code != http.StatusConflict {
		t.Errorf("end before begin: %d", code)
	}
	for i := 1; i <= 2; i++ {
		p := probe.Period{Level: "c1", Repeat: i, StartUnixNs: time.Now().UnixNano()}
		if code := post(t, base+"/begin", p, nil); code != http.StatusNoContent {
			t.Fatalf("begin: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
		p.EndUnixNs = time.Now().UnixNano()
		var e capture.AgentEnd
		if code := post(t, base+"/end", p, &e); code != http.StatusOK || e.Counts["proc"] == 0 {
			t.Fatalf("end: %d %+v", code, e)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for ac.State == "running" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&ac)
		resp.Body.Close()
	}
	if ac.State != "finished" || ac.Periods != 2 || !ac.Complete {
		t.Errorf("after the driver went quiet: %+v", ac)
	}
	resp, err := http.Get(base + "/log")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	log.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(log.String(), "no call from the driver") {
		t.Errorf("log: %s", log.String())
	}
	if code := post(t, base+"/begin", probe.Period{Level: "c1", Repeat: 3}, nil); code != http.StatusConflict {
		t.Errorf("begin after the end: %d", code)
	}
}
