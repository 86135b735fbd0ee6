package bundle

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The records write the lines their probes wrote before they moved here,
// byte for byte: a kind's fields by an embedded pointer (gpu, sched), the
// arrays a file does not have left out (bins).
func TestRecordLines(t *testing.T) {
	f := 50.0
	for _, c := range []struct {
		name string
		rec  any
		want string
	}{
		{"gpu util", GPURecord{GPUHead: GPUHead{TS: 1, GPU: 0, Kind: GPUKindUtil}, GPUUtil: &GPUUtil{UtilPct: 0}},
			`{"ts_unix_ns":1,"gpu":0,"kind":"util","util_pct":0}`},
		{"gpu gpm", GPURecord{GPUHead: GPUHead{TS: 2, GPU: 1, Kind: GPUKindGPM}, GPUGPM: &GPUGPM{WindowS: 1, SMActivePct: &f}},
			`{"ts_unix_ns":2,"gpu":1,"kind":"gpm","window_s":1,"sm_active_pct":50}`},
		{"sched, proc probe", SchedRecord{Level: "c1", Repeat: 1, PID: 1, TID: 2, Name: "x", CPUSec: 0.5, WallSec: 1, Utilization: 0.5, Source: "proc"},
			`{"level":"c1","repeat":1,"warmup":false,"pid":1,"tid":2,"name":"x","cpu_s":0.5,"wall_s":1,"utilization":0.5,"runq_wait_s":0,"voluntary_switches":0,"involuntary_switches":0,"source":"proc"}`},
		{"sched, eBPF probe", SchedRecord{Level: "c1", PID: 1, TID: 2, SchedRunq: &SchedRunq{OffCPUSec: 0.25}, RunqHist: []uint64{1}, Source: "ebpf"},
			`{"level":"c1","repeat":0,"warmup":false,"pid":1,"tid":2,"name":"","cpu_s":0,"wall_s":0,"utilization":0,"offcpu_s":0.25,"runq_p50_us":0,"runq_p99_us":0,"runq_count":0,"runq_wait_s":0,"runq_hist_log2_us":[1],"voluntary_switches":0,"involuntary_switches":0,"source":"ebpf"}`},
		{"cuda bins", ThreadBins{Level: "c1", PID: 1, TID: 2, StartUnixNs: 3, BinMs: 10, SyncUs: []int{0, 7}},
			`{"level":"c1","repeat":0,"warmup":false,"pid":1,"tid":2,"name":"","start_unix_ns":3,"bin_ms":10,"sync_us":[0,7],"dropped_events":0}`},
		{"proc bins", ThreadBins{PID: 1, TID: 2, BinMs: 20, OnCPUUs: []int{5}, RunqUs: []int{0}, Source: "proc"},
			`{"level":"","repeat":0,"warmup":false,"pid":1,"tid":2,"name":"","start_unix_ns":0,"bin_ms":20,"oncpu_us":[5],"runq_us":[0],"dropped_events":0,"source":"proc"}`},
		{"metrics sample", ServerMetricsRecord{Kind: MetricsKindSample, TsUnixNs: 5, Name: "x", Type: "gauge", Labels: MetricLabels{JSON: json.RawMessage(`{"a":"b"}`)}, Value: new(MetricValue(0))},
			`{"kind":"sample","ts_unix_ns":5,"name":"x","type":"gauge","labels":{"a":"b"},"value":0}`},
		{"metrics scrape", ServerMetricsRecord{Kind: MetricsKindScrape, TsUnixNs: 5, DurationS: 0.5, Series: 3, Bytes: 100},
			`{"kind":"scrape","ts_unix_ns":5,"duration_s":0.5,"series":3,"bytes":100}`},
		{"metrics labels from a map", ServerMetricsRecord{Kind: MetricsKindPeriod, Level: "c2", Repeat: 1, Name: "y", Labels: MetricLabels{Map: map[string]string{}}, Samples: 2},
			`{"kind":"period","level":"c2","repeat":1,"name":"y","labels":{},"samples":2}`},
	} {
		b, err := json.Marshal(c.rec)
		if err != nil || string(b) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.name, b, err, c.want)
		}
	}
}

// A gpu.jsonl line reads into the one pointer of its kind.
func TestGPURecordKinds(t *testing.T) {
	var r GPURecord
	if err := json.Unmarshal([]byte(`{"ts_unix_ns":7,"gpu":2,"kind":"mem","used_mib":1024,"total_mib":2048}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.GPUMem == nil || r.UsedMiB != 1024 || r.GPU != 2 || r.GPUUtil != nil || r.GPUPower != nil || r.GPUPeriod != nil {
		t.Errorf("mem line read as %+v", r)
	}
	var s SchedRecord
	if err := json.Unmarshal([]byte(`{"pid":1,"tid":1,"cpu_s":1,"source":"proc"}`), &s); err != nil || s.SchedRunq != nil || s.CPUSec != 1 {
		t.Errorf("proc line read as %+v (%v): want no eBPF part", s, err)
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  bool
	}{
		{"0", []int{0}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-1,4,6-7", []int{0, 1, 4, 6, 7}, false},
		{"", nil, true},
		{"3-1", nil, true},
		{"x", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
