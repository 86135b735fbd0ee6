package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe/cuda"
	"github.com/asrprof/asrprof/probe/sched"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// stubCUDA builds probe/cuda/testdata/stub.c, the stand-in CUDA driver, as
// libcuda.so.1 in a folder of t's and returns its path.
func stubCUDA(t *testing.T) string {
	t.Helper()
	cc := need.Binary(t, "cc") // builds the stand-in libcuda (Debian's gcc)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	src := filepath.Join(refservertest.Root(), "probe", "cuda", "testdata", "stub.c")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return lib
}

// TestCaptureCUDABins: `asrprof capture --probes sched,cuda` against the
// reference server whose scheduler thread waits in a (stand-in)
// cuStreamSynchronize at every decode step writes cuda_bins.jsonl, bins
// that line up with sched_bins.jsonl, and `asrprof analyze BUNDLE
// attribution` then finds "running: GPU wait" in the running batch.
func TestCaptureCUDABins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the reference server")
	}
	need.Root(t, "for the sched and cuda probes (eBPF, uprobes)")
	refservertest.RequirePocketSphinx(t)
	t.Parallel() // the GPU wait is a sleep in the stand-in library
	lib := stubCUDA(t)
	ds := refservertest.ShortClips(t, 4)
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "b")
	// 4 ms of GPU wait a step a request, against ~1 ms of PocketSphinx a
	// 100 ms chunk; two decoders for c=2, not the default eight (each
	// costs the start about 1.4 s of CPU, and none would be used)
	cmd := fmt.Sprintf("%s %s --port %d --sync-lib %s --sync-step-ms 4 --max-running-requests 2", refservertest.Python, script, port, lib)
	code, stdout, stderr := runCLI("capture", "--server-cmd", cmd, "--runs", "1",
		"--target", fmt.Sprintf("http://127.0.0.1:%d", port), "--profile-url", fmt.Sprintf("http://127.0.0.1:%d", port),
		"--dataset", ds, "--concurrency", "2", "--repeats", "1", "--probes", "sched,cuda",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "300ms",
		"--gpu-free-mib", "100000000", "--startup-timeout", "2m", "--timeout", "60s")
	if code != exitOK {
		t.Fatalf("capture: exit %d\n%s\n%s", code, stdout, stderr)
	}
	dir := filepath.Join(out, "run-1")
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Manifest.Extra["probes"].(map[string]any); st["cuda"] != "on" || st["sched"] != "on" {
		t.Fatalf("probes %v, want sched and cuda on\n%s", b.Manifest.Extra["probes"], stderr)
	}
	starts := map[string]int64{} // pass → bin 0 of its sched bins
	if _, err := bundle.ReadJSONL(b.Path(bundle.SchedBinsFile), func(r bundle.ThreadBins) error {
		starts[fmt.Sprint(r.Level, r.Repeat, r.Warmup)] = r.StartUnixNs
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	syncUs, lines := 0, 0
	if _, err := bundle.ReadJSONL(b.Path(cuda.BinsFile), func(r bundle.ThreadBins) error {
		lines++
		if r.Name != "asr-sched" {
			t.Errorf("%s: a line for thread %q, want only asr-sched (no other thread synchronizes)", cuda.BinsFile, r.Name)
		}
		if s, ok := starts[fmt.Sprint(r.Level, r.Repeat, r.Warmup)]; !ok || s != r.StartUnixNs || r.BinMs != sched.BinMs {
			t.Errorf("%s line of pass %s/%d starts at %d (%d ms bins), the sched bins at %d", cuda.BinsFile, r.Level, r.Repeat, r.StartUnixNs, r.BinMs, s)
		}
		for _, us := range r.SyncUs {
			syncUs += us
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", cuda.BinsFile, err)
	}
	rows, _ := attributionCLI(t, dir)
	_, mean := checkShares(t, rows["attribution"])
	gpu, host := mean["c2"][fixture.AttrGPUWait], mean["c2"][fixture.AttrHost]
	t.Logf("%s: %d lines, %d µs inside cuStreamSynchronize; c2: running: GPU wait %.2f ms, host work %.2f ms a request", cuda.BinsFile, lines, syncUs, gpu, host)
	if lines == 0 || syncUs < 10_000 || gpu <= 0 {
		t.Errorf("with --sync-step-ms 4: %d lines, %d µs of sync, GPU wait %.2f ms a request: want all > 0 (%v)", lines, syncUs, gpu, mean["c2"])
	}
}
