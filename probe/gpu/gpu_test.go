package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

// Stats returns a copy of the poller's counters.
func (p *Probe) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Errors = make(map[string]int, len(p.stats.Errors))
	for k, v := range p.stats.Errors {
		s.Errors[k] = v
	}
	return s
}

func le8(v uint64) [8]byte {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return b
}

func TestValue(t *testing.T) {
	const garbage = 0xdeadbeef00000000
	tests := []struct {
		name string
		vt   nvml.ValueType
		b    [8]byte
		want float64
		ok   bool
	}{
		{"double", nvml.VALUE_TYPE_DOUBLE, le8(math.Float64bits(12.5)), 12.5, true},
		{"uint high bytes ignored", nvml.VALUE_TYPE_UNSIGNED_INT, le8(garbage | 87), 87, true},
		{"ulong high bytes ignored", nvml.VALUE_TYPE_UNSIGNED_LONG, le8(garbage | 412000), 412000, true},
		{"ulonglong high bytes ignored", nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, le8(garbage | 700000), 700000, true},
		{"ushort", nvml.VALUE_TYPE_UNSIGNED_SHORT, le8(0xffff0000 | 42), 42, true},
		{"signed long long", nvml.VALUE_TYPE_SIGNED_LONG_LONG, le8(uint64(1<<63 | (1<<63 - 4))), -4, true},
		{"signed int", nvml.VALUE_TYPE_SIGNED_INT, le8(0xffff_ffff_ffff_fffd), -3, true},
		{"unknown type", nvml.VALUE_TYPE_COUNT, le8(1), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Value(tt.vt, tt.b)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Value = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestDecodeSamples(t *testing.T) {
	ss := []nvml.Sample{
		{TimeStamp: 1_700_000_000_300_000, SampleValue: le8(0xff00000000 | 250000)},
		{TimeStamp: 1_700_000_000_100_000, SampleValue: le8(100000)}, // == last: already seen
		{TimeStamp: 1_700_000_000_200_000, SampleValue: le8(150000)},
	}
	recs, newest := decodeSamples(3, bundle.GPUKindPower, nvml.VALUE_TYPE_UNSIGNED_INT, ss, 1_700_000_000_100_000)
	if newest != 1_700_000_000_300_000 {
		t.Errorf("newest = %d", newest)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2 (the boundary sample is a duplicate)", len(recs))
	}
	r0, r1 := recs[0], recs[1]
	if r0.TS != 1_700_000_000_200_000_000 || r0.PowerW != 150 || r0.GPU != 3 || r0.Kind != "power" {
		t.Errorf("first record %+v, want ts 1700000000200000000 ns, 150 W", *r0)
	}
	if r1.TS != 1_700_000_000_300_000_000 || r1.PowerW != 250 {
		t.Errorf("second record %+v, want ts 1700000000300000000 ns, 250 W", *r1)
	}
}

func TestThrottleNames(t *testing.T) {
	got := ThrottleNames(0x4 | 0x40 | 0x10000)
	want := []string{"sw_power_cap", "hw_thermal_slowdown", "0x10000"}
	if len(got) != len(want) {
		t.Fatalf("ThrottleNames = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ThrottleNames = %v, want %v", got, want)
		}
	}
	if n := ThrottleNames(0); n == nil || len(n) != 0 {
		t.Errorf("ThrottleNames(0) = %#v, want an empty list (a JSON [])", n)
	}
}

// fakeGPU is a GPU whose answers the test controls; device returns a
// mock.Device that reads from it. Every method the probe calls is set:
// a call the probe adds later panics in the mock and fails the test.
type fakeGPU struct {
	mu        sync.Mutex
	vt        nvml.ValueType
	util      []nvml.Sample
	power     []nvml.Sample
	proc      []nvml.ProcessUtilizationSample
	gpm       bool
	gpmGets   int
	lastSeen  map[nvml.SamplingType][]uint64
	pcieCalls int
	block     chan struct{} // when set, GetSamples waits on it
}

func (f *fakeGPU) add(st nvml.SamplingType, tsUs uint64, v uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vt != nvml.VALUE_TYPE_DOUBLE {
		v |= 0xabcd00000000 // garbage in the high bytes, as on the H200
	}
	s := nvml.Sample{TimeStamp: tsUs, SampleValue: le8(v)}
	if st == nvml.GPU_UTILIZATION_SAMPLES {
		f.util = append(f.util, s)
	} else {
		f.power = append(f.power, s)
	}
}

func (f *fakeGPU) device() *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "Fake H200", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-fake", nvml.SUCCESS },
		GetSamplesFunc: func(st nvml.SamplingType, last uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
			f.mu.Lock()
			block := f.block
			f.mu.Unlock()
			if block != nil {
				<-block
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.lastSeen == nil {
				f.lastSeen = map[nvml.SamplingType][]uint64{}
			}
			f.lastSeen[st] = append(f.lastSeen[st], last)
			src := f.power
			if st == nvml.GPU_UTILIZATION_SAMPLES {
				src = f.util
			}
			// Like NVML, hand back the boundary sample too (>=, not >).
			var out []nvml.Sample
			for _, s := range src {
				if s.TimeStamp >= last {
					out = append(out, s)
				}
			}
			if len(out) == 0 {
				return f.vt, nil, nvml.ERROR_NOT_FOUND
			}
			return f.vt, out, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 141 << 30, Used: 1 << 30, Free: 140 << 30}, nvml.SUCCESS
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_SM {
				return 1980, nvml.SUCCESS
			}
			return 2619, nvml.SUCCESS
		},
		GetTemperatureFunc:               func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS },
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) { return 0x4, nvml.SUCCESS },
		GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			var out []nvml.ProcessUtilizationSample
			for _, s := range f.proc {
				if s.TimeStamp > last {
					out = append(out, s)
				}
			}
			if len(out) == 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return out, nvml.SUCCESS
		},
		GpmQueryDeviceSupportFunc: func() (nvml.GpmSupport, nvml.Return) {
			s := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
			if f.gpm {
				s.IsSupportedDevice = 1
			}
			return s, nvml.SUCCESS
		},
		GpmSampleGetFunc: func(nvml.GpmSample) nvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.gpmGets++
			return nvml.SUCCESS
		},
		GetPcieThroughputFunc: func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			f.mu.Lock()
			f.pcieCalls++
			f.mu.Unlock()
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return 1000, nvml.SUCCESS
			}
			return 2000, nvml.SUCCESS
		},
	}
}

// fakeLib is an NVML with the given GPUs.
type fakeLib struct {
	mu        sync.Mutex
	inits     int
	shutdowns int
	frees     int
	initRet   nvml.Return
	initBlock chan struct{}
}

func (l *fakeLib) lib(gpus ...*fakeGPU) *mock.Interface {
	return &mock.Interface{
		InitFunc: func() nvml.Return {
			if l.initBlock != nil {
				<-l.initBlock
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.inits++
			return l.initRet
		},
		ShutdownFunc: func() nvml.Return {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.shutdowns++
			return nvml.SUCCESS
		},
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.95.05", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return gpus[i].device(), nvml.SUCCESS },
		GpmSampleAllocFunc: func() (nvml.GpmSample, nvml.Return) {
			return &mock.GpmSample{FreeFunc: func() nvml.Return {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.frees++
				return nvml.SUCCESS
			}}, nvml.SUCCESS
		},
		GpmMetricsGetFunc: func(mg *nvml.GpmMetricsGetType) nvml.Return {
			if mg.Sample1 == nil || mg.Sample2 == nil || mg.Sample1 == mg.Sample2 {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			for i := 0; i < int(mg.NumMetrics); i++ {
				m := &mg.Metrics[i]
				switch nvml.GpmMetricId(m.MetricId) {
				case nvml.GPM_METRIC_SM_UTIL:
					m.Value = 80
				case nvml.GPM_METRIC_SM_OCCUPANCY:
					m.Value = 30
				case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
					m.Value = 55
				default:
					m.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				}
			}
			return nvml.SUCCESS
		},
	}
}

// decodeAll decodes gpu.jsonl into maps; numbers stay exact (json.Number
// converted to float64, or to int64 for ts and *_unix_ns).
func decodeAll(t *testing.T, s *probetest.Sink) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for i, l := range s.Lines(File) {
		d := json.NewDecoder(bytes.NewReader(l))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		for k, v := range m {
			n, ok := v.(json.Number)
			if !ok {
				continue
			}
			if strings.HasSuffix(k, "unix_ns") {
				m[k], _ = n.Int64()
			} else {
				m[k], _ = n.Float64()
			}
		}
		recs = append(recs, m)
	}
	return recs
}

func ofKind(recs []map[string]any, gpu int, kind string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["kind"] == kind && int(r["gpu"].(float64)) == gpu {
			out = append(out, r)
		}
	}
	return out
}

func TestProbeMock(t *testing.T) {
	g0 := &fakeGPU{vt: nvml.VALUE_TYPE_UNSIGNED_INT, gpm: true}
	g1 := &fakeGPU{vt: nvml.VALUE_TYPE_DOUBLE}
	fl := &fakeLib{}
	sink := &probetest.Sink{}
	p := New(Config{Interval: 10 * time.Millisecond, GPMWindow: 20 * time.Millisecond, PCIe: true, Lib: fl.lib(g0, g1)})
	ctx := context.Background()
	target := probe.Target{PID: 100, Children: func() []int { return []int{101} }}
	start := time.Now()
	if err := p.Start(ctx, target, sink); err != nil {
		t.Fatalf("Start: %v", err)
	}
	base := uint64(start.UnixMicro())
	// Samples taken before Start are not recorded.
	g0.add(nvml.GPU_UTILIZATION_SAMPLES, base-5000, 99)
	periodStart := int64(base+10_000) * 1000
	p.Begin(probe.Period{Level: "c=1", Repeat: 2, StartUnixNs: periodStart})
	g0.add(nvml.GPU_UTILIZATION_SAMPLES, base+5_000, 10) // before the period
	time.Sleep(30 * time.Millisecond)                    // polled, then samples keep coming
	g0.add(nvml.GPU_UTILIZATION_SAMPLES, base+20_000, 50)
	g0.add(nvml.TOTAL_POWER_SAMPLES, base+20_000, 100_000)
	g1.add(nvml.GPU_UTILIZATION_SAMPLES, base+20_000, math.Float64bits(25))
	g0.mu.Lock()
	g0.proc = []nvml.ProcessUtilizationSample{
		{Pid: 100, TimeStamp: base + 20_000, SmUtil: 40, MemUtil: 10},
		{Pid: 101, TimeStamp: base + 21_000, SmUtil: 20},
		{Pid: 999, TimeStamp: base + 22_000, SmUtil: 90}, // not the target's
	}
	g0.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	g0.add(nvml.GPU_UTILIZATION_SAMPLES, base+40_000, 70)
	g0.add(nvml.TOTAL_POWER_SAMPLES, base+40_000, 200_000)
	time.Sleep(100 * time.Millisecond)
	end := time.Now().UnixNano()
	g0.add(nvml.GPU_UTILIZATION_SAMPLES, uint64(end/1000)+1_000_000, 100) // after the period
	if err := p.End(ctx, probe.Period{Level: "c=1", Repeat: 2, EndUnixNs: end}); err != nil {
		t.Fatalf("End: %v", err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	recs := decodeAll(t, sink)

	t.Run("util µs to ns, no duplicates", func(t *testing.T) {
		var ts []int64
		var vals []float64
		for _, r := range ofKind(recs, 0, bundle.GPUKindUtil) {
			ts = append(ts, r["ts_unix_ns"].(int64))
			vals = append(vals, r["util_pct"].(float64))
		}
		want := []int64{int64(base+5_000) * 1000, int64(base+20_000) * 1000, int64(base+40_000) * 1000, (end/1000 + 1_000_000) * 1000}
		if len(ts) != len(want) {
			t.Fatalf("util timestamps %v (values %v), want %v", ts, vals, want)
		}
		for i := range want {
			if ts[i] != want[i] {
				t.Errorf("util[%d] ts %d, want %d", i, ts[i], want[i])
			}
		}
		if vals[1] != 50 {
			t.Errorf("util values %v: unsigned value's high bytes not masked", vals)
		}
		g1u := ofKind(recs, 1, bundle.GPUKindUtil)
		if len(g1u) != 1 || g1u[0]["util_pct"].(float64) != 25 {
			t.Errorf("GPU 1 (double samples) util records %v, want one of 25", g1u)
		}
	})
	t.Run("lastSeen advances", func(t *testing.T) {
		g0.mu.Lock()
		seen := append([]uint64(nil), g0.lastSeen[nvml.GPU_UTILIZATION_SAMPLES]...)
		g0.mu.Unlock()
		if len(seen) < 5 || seen[0] < base || seen[0] >= base+5_000 {
			t.Fatalf("lastSeen arguments %v: want ≥ 5 polls starting at Start's time ≈ %d", seen, base)
		}
		if !sort.SliceIsSorted(seen, func(i, j int) bool { return seen[i] < seen[j] }) {
			t.Errorf("lastSeen went backwards: %v", seen)
		}
		if last := seen[len(seen)-1]; last != uint64(end/1000)+1_000_000 {
			t.Errorf("final lastSeen %d, want the newest sample's %d", last, end/1000+1_000_000)
		}
	})
	t.Run("power in watts", func(t *testing.T) {
		pw := ofKind(recs, 0, bundle.GPUKindPower)
		if len(pw) != 2 || pw[0]["power_w"].(float64) != 100 || pw[1]["power_w"].(float64) != 200 {
			t.Errorf("power records %v, want 100 W and 200 W", pw)
		}
	})
	t.Run("per-process filter", func(t *testing.T) {
		var pr, other []map[string]any
		for _, r := range ofKind(recs, 0, bundle.GPUKindProc) {
			if r["other"] == true {
				other = append(other, r)
			} else {
				pr = append(pr, r)
			}
		}
		if len(pr) != 2 {
			t.Fatalf("proc records %v, want pids 100 and 101 once each", pr)
		}
		// another process on the GPU: kept, marked (a co-tenant)
		if len(other) != 1 || other[0]["pid"].(float64) != 999 || other[0]["sm_pct"].(float64) != 90 {
			t.Errorf("other processes' records %v, want pid 999 at 90 %%", other)
		}
		if pr[0]["pid"].(float64) != 100 || pr[0]["sm_pct"].(float64) != 40 || pr[1]["pid"].(float64) != 101 {
			t.Errorf("proc records %v", pr)
		}
	})
	t.Run("GPM on and off", func(t *testing.T) {
		gp := ofKind(recs, 0, bundle.GPUKindGPM)
		if len(gp) < 2 {
			t.Fatalf("GPU 0: %d GPM records, want ≥ 2", len(gp))
		}
		r := gp[0]
		if r["sm_active_pct"].(float64) != 80 || r["sm_occupancy_pct"].(float64) != 30 || r["tensor_active_pct"].(float64) != 55 {
			t.Errorf("GPM record %v", r)
		}
		if _, ok := r["dram_bw_pct"]; ok {
			t.Errorf("GPM record %v has dram_bw_pct, which NVML did not return", r)
		}
		if w := r["window_s"].(float64); w < 0.02 || w > 1 {
			t.Errorf("window_s %v, want ≥ the 20 ms window", w)
		}
		if n := len(ofKind(recs, 1, bundle.GPUKindGPM)); n != 0 {
			t.Errorf("GPU 1 has no GPM but got %d GPM records", n)
		}
		g1.mu.Lock()
		gets := g1.gpmGets
		g1.mu.Unlock()
		if gets != 0 {
			t.Errorf("GpmSampleGet called %d times on a GPU without GPM", gets)
		}
		dev := ofKind(recs, 0, bundle.GPUKindDevice)
		if len(dev) != 1 || dev[0]["gpm"] != true || dev[0]["driver"] != "580.95.05" || dev[0]["name"] != "Fake H200" {
			t.Errorf("device record %v", dev)
		}
	})
	t.Run("state kinds", func(t *testing.T) {
		for _, k := range []string{bundle.GPUKindMem, bundle.GPUKindClock, bundle.GPUKindTemp, bundle.GPUKindThrottle, bundle.GPUKindPCIe} {
			if len(ofKind(recs, 1, k)) == 0 {
				t.Errorf("no %s records for GPU 1", k)
			}
		}
		th := ofKind(recs, 0, bundle.GPUKindThrottle)[0]
		if names := th["names"].([]any); len(names) != 1 || names[0] != "sw_power_cap" {
			t.Errorf("throttle record %v", th)
		}
	})
	t.Run("period summary", func(t *testing.T) {
		per := ofKind(recs, 0, bundle.GPUKindPeriod)
		if len(per) != 1 {
			t.Fatalf("period records %v, want one", per)
		}
		r := per[0]
		checks := map[string]float64{
			"util_mean": 60, "util_max": 70, "power_mean_w": 150, "power_max_w": 200,
			"mem_used_max_mib": 1024, "sm_active_mean": 80, "tensor_active_mean": 55,
			"sm_clock_mean_mhz": 1980, "temp_max_c": 41, "util_samples": 2, "repeat": 2,
			"throttle_reasons": 4,
		}
		if r["end_unix_ns"] != end || r["start_unix_ns"] != periodStart || r["ts_unix_ns"] != end {
			t.Errorf("period bounds %v..%v (ts %v), want %v..%v", r["start_unix_ns"], r["end_unix_ns"], r["ts_unix_ns"], periodStart, end)
		}
		for k, want := range checks {
			if got, ok := r[k].(float64); !ok || got != want {
				t.Errorf("%s = %v, want %v", k, r[k], want)
			}
		}
		if r["level"] != "c=1" {
			t.Errorf("level %v", r["level"])
		}
		if _, ok := r["dram_bw_mean"]; ok {
			t.Errorf("dram_bw_mean present without samples: %v", r)
		}
		g1p := ofKind(recs, 1, bundle.GPUKindPeriod)
		if len(g1p) != 1 {
			t.Fatalf("GPU 1 period records %v", g1p)
		}
		if _, ok := g1p[0]["sm_active_mean"]; ok {
			t.Errorf("GPU 1 without GPM has sm_active_mean: %v", g1p[0])
		}
		if g1p[0]["util_mean"].(float64) != 25 {
			t.Errorf("GPU 1 util_mean %v, want 25", g1p[0]["util_mean"])
		}
	})
	t.Run("clock offset", func(t *testing.T) {
		ns, ok := p.ClockOffset()
		if !ok {
			t.Fatal("no clock offset measured")
		}
		// The fake's newest power sample is stamped base+40 ms, read at least
		// ~100 ms later: the estimate is that lower bound.
		if ns > 0 || ns < -int64(time.Second) {
			t.Errorf("clock offset %d ns, want in (-1 s, 0]", ns)
		}
	})
	t.Run("cleanup", func(t *testing.T) {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		if fl.inits != 1 || fl.shutdowns != 1 || fl.frees != 2 {
			t.Errorf("Init %d, Shutdown %d, GpmSampleFree %d times; want 1, 1, 2", fl.inits, fl.shutdowns, fl.frees)
		}
		if st := p.Stats(); st.Polls < 5 || len(st.Errors) != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestNoNVMLMock(t *testing.T) {
	for _, r := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		fl := &fakeLib{initRet: r}
		err := New(Config{Lib: fl.lib()}).Start(context.Background(), probe.Target{}, &probetest.Sink{})
		var nn *NoNVMLError
		if !errors.Is(err, probe.ErrNotSupported) || !errors.As(err, &nn) || nn.Code != r {
			t.Errorf("Init → %v: Start error %v, want a NoNVMLError wrapping ErrNotSupported", r, err)
		}
	}
	// Initialised but no GPU: not supported either, and NVML is shut down.
	fl := &fakeLib{}
	err := New(Config{Lib: fl.lib()}).Start(context.Background(), probe.Target{}, &probetest.Sink{})
	if !errors.Is(err, probe.ErrNotSupported) || fl.shutdowns != 1 {
		t.Errorf("no GPU: Start error %v, Shutdown %d times", err, fl.shutdowns)
	}
}

// TestNoNVML runs the real library: on a machine without the NVIDIA
// driver (the CI machines) Start must say "no NVML" and ErrNotSupported.
func TestNoNVML(t *testing.T) {
	sink := &probetest.Sink{}
	p := New(Config{})
	err := p.Start(context.Background(), probe.Target{}, sink)
	if err == nil {
		p.Stop(context.Background())
		t.Skip("NVML is present here")
	}
	if !errors.Is(err, probe.ErrNotSupported) {
		t.Fatalf("Start: %v, want an error wrapping ErrNotSupported", err)
	}
	if got, want := err.Error(), "no NVML: library not found (libnvidia-ml.so.1)"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
	if _, err := Inspect(context.Background(), nil); !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Inspect: %v, want ErrNotSupported", err)
	}
}

func TestHungNVML(t *testing.T) {
	t.Run("Init", func(t *testing.T) {
		fl := &fakeLib{initBlock: make(chan struct{})}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := New(Config{Lib: fl.lib(&fakeGPU{})}).Start(ctx, probe.Target{}, &probetest.Sink{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start with a hung Init: %v, want DeadlineExceeded", err)
		}
		close(fl.initBlock) // Init returns late: it must be shut down
		deadline := time.Now().Add(2 * time.Second)
		for {
			fl.mu.Lock()
			n := fl.shutdowns
			fl.mu.Unlock()
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a late Init was not shut down")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("poll", func(t *testing.T) {
		g := &fakeGPU{vt: nvml.VALUE_TYPE_UNSIGNED_INT, block: make(chan struct{})}
		defer close(g.block)
		p := New(Config{Interval: 10 * time.Millisecond, Lib: (&fakeLib{}).lib(g)})
		if err := p.Start(context.Background(), probe.Target{}, &probetest.Sink{}); err != nil {
			t.Fatal(err)
		}
		p.Begin(probe.Period{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		if err := p.End(ctx, probe.Period{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("End with a hung GetSamples: %v, want DeadlineExceeded", err)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel2()
		if err := p.Stop(ctx2); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with a hung GetSamples: %v, want DeadlineExceeded", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("End and Stop took %v with 50 ms deadlines", d)
		}
	})
}

// An empty GPU list, as a flag parser gives when --gpus is not set, means
// every GPU, never none: the CLI once sampled zero GPUs and said "on".
func TestEmptyGPUListMeansAll(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []int
		want []int
	}{
		{"nil", nil, []int{0, 1}},
		{"empty", []int{}, []int{0, 1}},
		{"one", []int{1}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &fakeLib{}
			sink := &probetest.Sink{}
			p := New(Config{GPUs: tc.gpus, Interval: 10 * time.Millisecond, Lib: fl.lib(&fakeGPU{vt: nvml.VALUE_TYPE_UNSIGNED_INT}, &fakeGPU{vt: nvml.VALUE_TYPE_UNSIGNED_INT})})
			if err := p.Start(context.Background(), probe.Target{}, sink); err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer p.Stop(context.Background())
			devs, err := probetest.Decode[bundle.GPURecord](sink, File)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, d := range devs {
				if d.Kind == bundle.GPUKindDevice {
					got = append(got, d.GPU)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("GPUs %v: device records for %v, want %v", tc.gpus, got, tc.want)
			}
		})
	}
}
