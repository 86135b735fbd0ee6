package gpu

import (
	"context"
	"errors"
	"github.com/asrprof/asrprof/bundle"
	"sort"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

// TestGPUReal samples the machine's real GPUs for ~3 s (make test-gpu) and
// logs what it saw. Where there is no NVML it skips, saying that it runs
// on the H200 (need.Device: with ASRPROF_DEVICE=1, as tools/test-gpu.sh
// sets on the GPU host, no NVML fails it). It needs no file from
// the source tree, so a binary made with 'go test -c' runs on the device:
//
//	go test -c -o gpu.test ./probe/gpu && ./gpu.test -test.run GPU -test.v
func TestGPUReal(t *testing.T) {
	ctx := context.Background()
	info, err := Inspect(ctx, nil)
	if errors.Is(err, probe.ErrNotSupported) {
		need.Device(t, err.Error())
	}
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	t.Logf("driver %s, clock offset %d ns (ok %v)", info.Driver, info.ClockOffsetNs, info.ClockOffsetOK)
	for _, d := range info.Devices {
		t.Logf("GPU %d: %s %s GPM=%v", d.Index, d.Name, d.UUID, d.GPM)
	}

	sink := &probetest.Sink{}
	p := New(Config{PCIe: true})
	if err := p.Start(ctx, probe.Target{}, sink); err != nil {
		t.Fatalf("Start: %v", err)
	}
	p.Begin(probe.Period{Level: "real", Repeat: 0})
	time.Sleep(3 * time.Second)
	endCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.End(endCtx, probe.Period{Level: "real"}); err != nil {
		t.Errorf("End: %v", err)
	}
	if err := p.Stop(endCtx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	ns, ok := p.ClockOffset()
	t.Logf("clock offset NVML−system: %d ns (ok %v); stats %+v", ns, ok, p.Stats())

	lines := sink.Lines(File)
	recs := decodeAll(t, sink)
	count := map[string]int{}
	first := map[string]string{}
	for i, r := range recs {
		k := r["kind"].(string)
		count[k]++
		if _, seen := first[k]; !seen {
			first[k] = string(lines[i])
		}
	}
	var kinds []string
	for k := range count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("%-8s %5d records; first: %s", k, count[k], first[k])
	}
	for _, k := range []string{bundle.GPUKindDevice, bundle.GPUKindUtil, bundle.GPUKindPower, bundle.GPUKindMem, bundle.GPUKindClock, bundle.GPUKindPeriod} {
		if count[k] == 0 {
			t.Errorf("no %s records in 3 s", k)
		}
	}
	if !ok {
		t.Error("no clock offset measured")
	}
}
