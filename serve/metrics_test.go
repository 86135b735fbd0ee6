package serve

import (
	"github.com/asrprof/asrprof/bundle"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe/cuda"
	"github.com/asrprof/asrprof/probe/gpu"
	"github.com/asrprof/asrprof/probe/sched"
)

// find returns the series of name whose labels include want.
func find(t *testing.T, m *metrics, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.Metric {
			got := map[string]string{}
			for _, l := range s.Label {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return s
		}
	}
	return nil
}

func TestGPUGaugesFromRecords(t *testing.T) {
	m := newMetrics()
	o := &entry{m: m, id: "c1"}
	sm := 42.5
	h := bundle.GPUHead{GPU: 1}
	for _, rec := range []any{
		&bundle.GPURecord{GPUHead: h, GPUDevice: &bundle.GPUDevice{Name: "H200"}},
		&bundle.GPURecord{GPUHead: h, GPUUtil: &bundle.GPUUtil{UtilPct: 87}},
		&bundle.GPURecord{GPUHead: h, GPUPower: &bundle.GPUPower{PowerW: 512.25}},
		&bundle.GPURecord{GPUHead: h, GPUMem: &bundle.GPUMem{UsedMiB: 1024, TotalMiB: 143771}},
		&bundle.GPURecord{GPUHead: h, GPUGPM: &bundle.GPUGPM{SMActivePct: &sm}},
		&bundle.GPURecord{GPUHead: h, GPUGPM: &bundle.GPUGPM{}}, // no SM activity: leaves the gauge alone
	} {
		o.ProbeRecord("gpu", gpu.File, rec)
	}
	for name, want := range map[string]float64{
		"asrprof_gpu_utilization_percent": 87,
		"asrprof_gpu_power_watts":         512.25,
		"asrprof_gpu_memory_used_bytes":   1024 << 20,
		"asrprof_gpu_sm_active_percent":   42.5,
	} {
		s := find(t, m, name, map[string]string{"capture": "c1", "gpu": "1"})
		if s == nil {
			t.Errorf("%s{gpu=1}: no series", name)
			continue
		}
		if got := s.GetGauge().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if s := find(t, m, "asrprof_probe_records_total", map[string]string{"capture": "c1", "probe": "gpu"}); s == nil || s.GetCounter().GetValue() != 6 {
		t.Errorf("records counter: %v, want 6", s)
	}
	o.ProbeRecord("gpu", gpu.File, &bundle.GPURecord{GPUHead: bundle.GPUHead{GPU: 2}, GPUClock: &bundle.GPUClock{}})
	for _, name := range []string{"asrprof_gpu_utilization_percent", "asrprof_gpu_power_watts", "asrprof_gpu_memory_used_bytes", "asrprof_gpu_sm_active_percent"} {
		if find(t, m, name, map[string]string{"capture": "c1", "gpu": "2"}) != nil {
			t.Errorf("a clock record set %s", name)
		}
	}
	m.forget("c1")
	if find(t, m, "asrprof_gpu_power_watts", map[string]string{"capture": "c1"}) != nil {
		t.Error("forget kept the GPU gauges of a finished capture")
	}
}

func TestThreadAndRunqueueSeries(t *testing.T) {
	m := newMetrics()
	o := &entry{m: m, id: "c2"}
	// 3 waits under 1 µs, 2 in [1,2) µs, 1 in [4,8) µs.
	o.ProbeRecord("sched", sched.File, bundle.SchedRecord{PID: 10, TID: 11, Name: "python3", CPUSec: 0.5, WallSec: 1, Utilization: 0.5, SchedRunq: &bundle.SchedRunq{},
		RunqHist: []uint64{3, 2, 0, 1}, RunqWaitSec: 12e-6})
	o.ProbeRecord("sched", sched.File, bundle.SchedRecord{PID: 10, TID: 11, Name: "python3", CPUSec: 0.25, WallSec: 1, Utilization: 0.25, SchedRunq: &bundle.SchedRunq{},
		RunqHist: []uint64{1}, RunqWaitSec: 1e-7})
	th := map[string]string{"capture": "c2", "pid": "10", "tid": "11", "thread": "python3"}
	if s := find(t, m, "asrprof_thread_cpu_utilization", th); s == nil || s.GetGauge().GetValue() != 0.25 {
		t.Errorf("thread utilization: %v, want the last period's 0.25", s)
	}
	if s := find(t, m, "asrprof_thread_cpu_seconds_total", th); s == nil || s.GetCounter().GetValue() != 0.75 {
		t.Errorf("thread cpu seconds: %v, want 0.75", s)
	}
	s := find(t, m, "asrprof_runqueue_latency_seconds", map[string]string{"capture": "c2"})
	if s == nil {
		t.Fatal("no run-queue histogram")
	}
	h := s.GetHistogram()
	if h.GetSampleCount() != 7 {
		t.Errorf("run-queue count %d, want 7", h.GetSampleCount())
	}
	cum := map[float64]uint64{}
	for _, b := range h.Bucket {
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for le, want := range map[float64]uint64{1e-6: 4, 2e-6: 6, 4e-6: 6, 8e-6: 7} {
		if cum[le] != want {
			t.Errorf("bucket le=%g: %d, want %d (buckets %v)", le, cum[le], want, cum)
		}
	}
}

func TestRequestSeries(t *testing.T) {
	m := newMetrics()
	o := &entry{m: m, id: "c3"}
	o.RequestStarted()
	o.RequestStarted()
	if s := find(t, m, "asrprof_capture_requests_in_flight", map[string]string{"capture": "c3"}); s.GetGauge().GetValue() != 2 {
		t.Errorf("in flight %v, want 2", s.GetGauge().GetValue())
	}
	o.RequestDone(&model.Request{Status: model.StatusOK, LatencyS: 0.2})
	o.RequestDone(&model.Request{Status: "timeout", LatencyS: 3})
	if s := find(t, m, "asrprof_capture_requests_in_flight", map[string]string{"capture": "c3"}); s.GetGauge().GetValue() != 0 {
		t.Errorf("in flight %v, want 0", s.GetGauge().GetValue())
	}
	for status, want := range map[string]float64{"ok": 1, "timeout": 1} {
		if s := find(t, m, "asrprof_capture_requests_total", map[string]string{"capture": "c3", "status": status}); s.GetCounter().GetValue() != want {
			t.Errorf("requests{status=%s} = %v", status, s.GetCounter().GetValue())
		}
	}
	if h := find(t, m, "asrprof_capture_request_latency_seconds", map[string]string{"capture": "c3"}).GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 3.2 {
		t.Errorf("latency histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if o.sent.Load() != 2 || o.done.Load() != 2 || o.failed.Load() != 1 {
		t.Errorf("progress sent %d done %d failed %d", o.sent.Load(), o.done.Load(), o.failed.Load())
	}
}

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		err, warn   bool
	}{
		{"127.0.0.1:7070", "", false, false},
		{"localhost:7070", "", false, false},
		{"[::1]:7070", "", false, false},
		{"0.0.0.0:7070", "", true, false},
		{":7070", "", true, false},
		{"10.1.2.3:7070", "", true, false},
		{"10.1.2.3:7070", "s3cret", false, true},
	} {
		warn, err := CheckAddr(tc.addr, tc.token)
		if (err != nil) != tc.err || (warn != "") != tc.warn {
			t.Errorf("CheckAddr(%q, %q) = %q, %v", tc.addr, tc.token, warn, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--token") {
			t.Errorf("the refusal does not say what to do: %v", err)
		}
	}
}

func TestTokenOnEveryRoute(t *testing.T) {
	s, err := New(Config{Token: "s3cret", Dir: t.TempDir(), Parse: func([]string) (capture.Config, error) { return capture.Config{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, p := range []string{"/", "/metrics", "/v1/time", "/v1/captures", "/v1/captures/x/bundle"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret"} {
			req, _ := http.NewRequest("GET", ts.URL+p, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if ok := resp.StatusCode != http.StatusUnauthorized; ok != (auth == "Bearer s3cret") {
				t.Errorf("GET %s with %q: %s", p, auth, resp.Status)
			}
		}
	}
}

func TestCUDASeries(t *testing.T) {
	m := newMetrics()
	o := &entry{m: m, id: "c4"}
	// Two threads in pass c1/1: the rate is their sum; pass c1/2 starts over.
	o.ProbeRecord("cuda", cuda.File, bundle.CUDARecord{Level: "c1", Repeat: 1, TID: 1, Symbol: "cuLaunchKernel", Calls: 100, PerSec: 50})
	o.ProbeRecord("cuda", cuda.File, bundle.CUDARecord{Level: "c1", Repeat: 1, TID: 2, Symbol: "cuLaunchKernel", Calls: 20, PerSec: 10})
	l := map[string]string{"capture": "c4", "symbol": "cuLaunchKernel"}
	if s := find(t, m, "asrprof_cuda_launches_per_second", l); s.GetGauge().GetValue() != 60 {
		t.Errorf("launches/s in pass 1: %v, want 60", s.GetGauge().GetValue())
	}
	o.ProbeRecord("cuda", cuda.File, bundle.CUDARecord{Level: "c1", Repeat: 2, TID: 1, Symbol: "cuLaunchKernel", Calls: 10, PerSec: 5})
	if s := find(t, m, "asrprof_cuda_launches_per_second", l); s.GetGauge().GetValue() != 5 {
		t.Errorf("launches/s in pass 2: %v, want 5", s.GetGauge().GetValue())
	}
	if s := find(t, m, "asrprof_cuda_launches_total", l); s.GetCounter().GetValue() != 130 {
		t.Errorf("launches total: %v, want 130", s.GetCounter().GetValue())
	}
}
