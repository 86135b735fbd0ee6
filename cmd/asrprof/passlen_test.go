package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

// passSamples are the samples of passDataset: id, file and seconds of
// audio (16 kHz), in the manifest's order.
var passSamples = []struct {
	id, file string
	secs     float64
}{{"a", "a.wav", 0.5}, {"b", "b.wav", 1.0}, {"c", "c.wav", 2.0}}

// passDataset writes three samples of different lengths and their
// manifest, and returns the manifest's path.
func passDataset(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var m strings.Builder
	for _, s := range passSamples {
		wav := audiotest.WAV16(16000, 1, make([]int16, int(s.secs*16000))...)
		if err := os.WriteFile(filepath.Join(dir, s.file), wav, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&m, "{\"id\":%q,\"audio\":%q,\"text\":%q}\n", s.id, s.file, fakeasr.DefaultText)
	}
	ds := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(ds, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return ds
}

// passCapture runs `asrprof capture` against srv with one scored pass and
// no probes, plus args; it returns the bundle, its stderr and the exit code.
func passCapture(t *testing.T, srv *fakeasr.Server, ds string, args ...string) (*bundle.Bundle, string, int) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "cap")
	all := append([]string{"capture", "--target", srv.URL, "--dataset", ds, "--repeats", "1",
		"--out", out, "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none", "--span-grace", "0s"}, args...)
	var stdout, stderr bytes.Buffer
	code := runTest(all, &stdout, &stderr)
	if code != exitOK {
		return nil, stderr.String(), code
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, stderr.String(), code
}

func passRequests(t *testing.T, b *bundle.Bundle) []model.Request {
	t.Helper()
	recs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// --pass-requests N sends exactly N requests a pass, cycling the dataset in
// its order, closed loop and open loop alike.
func TestPassRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		n    int
	}{
		{"closed", []string{"--concurrency", "3", "--pass-requests", "10"}, 10},
		{"closed_fewer_than_dataset", []string{"--concurrency", "2", "--pass-requests", "2"}, 2},
		{"open", []string{"--rate", "200", "--arrivals", "constant", "--pass-requests", "7"}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 5 * time.Millisecond})
			b, stderr, code := passCapture(t, srv, passDataset(t), append(tc.args, "--quiet")...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			if srv.Count() != tc.n {
				t.Errorf("server saw %d requests, want %d", srv.Count(), tc.n)
			}
			recs := passRequests(t, b)
			if len(recs) != tc.n {
				t.Fatalf("%d records, want %d", len(recs), tc.n)
			}
			per := map[string]int{}
			for _, r := range recs {
				per[r.SampleID]++
			}
			for i, s := range passSamples { // cycled in order: a gets the remainder first
				want := tc.n / len(passSamples)
				if i < tc.n%len(passSamples) {
					want++
				}
				if per[s.id] != want {
					t.Errorf("sample %s sent %d times, want %d (%v)", s.id, per[s.id], want, per)
				}
			}
			if fmt.Sprint(b.Manifest.Config["pass_requests"]) != fmt.Sprint(tc.n) {
				t.Errorf("manifest config pass_requests = %v", b.Manifest.Config["pass_requests"])
			}
			res, err := b.Results()
			if err != nil || len(res.Results) != 1 || res.Results[0].Total != tc.n {
				t.Errorf("results.json: %+v, %v", res, err)
			}
		})
	}
}

// passDurationTolerance is how much longer than --pass-duration a pass may
// take here: the last requests' latency (20 ms at the fake server) plus
// timer and scheduling slack on a loaded 2-core CI machine (measured over
// five runs: 2.003–2.019 s closed loop, 2.001–2.004 s open loop).
const passDurationTolerance = 250 * time.Millisecond

// --pass-duration 2s sends for 2 s: no request starts after it, and the
// pass ends once those in flight finish.
func TestPassDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("4 s of passes")
	}
	const d = 2 * time.Second
	for _, tc := range []struct {
		name string
		args []string
		want int // exact count (open loop), 0: any
	}{
		{"closed", []string{"--concurrency", "2"}, 0},
		{"open", []string{"--rate", "50", "--arrivals", "constant"}, 100}, // offsets 0, 20 ms … 1.98 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 20 * time.Millisecond})
			b, stderr, code := passCapture(t, srv, passDataset(t), append(tc.args, "--pass-duration", "2s", "--quiet")...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			if len(b.Manifest.Levels) != 1 {
				t.Fatalf("levels %+v", b.Manifest.Levels)
			}
			run := b.Manifest.Levels[0]
			wall := time.Duration(run.WallS * float64(time.Second))
			t.Logf("%s: pass of --pass-duration %v took %v, %d requests", tc.name, d, wall, srv.Count())
			if wall < d || wall > d+passDurationTolerance {
				t.Errorf("pass took %v, want %v to %v", wall, d, d+passDurationTolerance)
			}
			recs := passRequests(t, b)
			if tc.want > 0 && len(recs) != tc.want {
				t.Errorf("%d requests, want %d", len(recs), tc.want)
			}
			if tc.want == 0 && len(recs) < 50 { // 2 in flight × 20 ms: ~200
				t.Errorf("only %d requests in 2 s", len(recs))
			}
			for _, r := range recs {
				if late := time.Duration(r.StartUnixNs - run.StartUnixNs); late >= d+10*time.Millisecond {
					t.Errorf("request %s sent %v into the pass, after --pass-duration", r.ID, late)
				}
			}
			if fmt.Sprint(b.Manifest.Config["pass_duration_s"]) != "2" {
				t.Errorf("manifest config pass_duration_s = %v", b.Manifest.Config["pass_duration_s"])
			}
		})
	}
}

// --pass-requests and --pass-duration together: whichever ends first.
func TestPassRequestsAndDuration(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	b, stderr, code := passCapture(t, srv, passDataset(t), "--concurrency", "1", "--pass-requests", "5", "--pass-duration", "1m", "--quiet")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if n := len(passRequests(t, b)); n != 5 || b.Manifest.Levels[0].WallS > 10 {
		t.Errorf("%d requests in %.1fs, want 5 at once", n, b.Manifest.Levels[0].WallS)
	}
}

// Bad pass lengths are usage errors, before any request.
func TestPassLengthErrors(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	ds := passDataset(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "1", "--pass-requests", "-1"}, "--pass-requests -1: must be ≥ 0"},
		{[]string{"--concurrency", "1", "--pass-duration", "-1s"}, "--pass-duration -1s: must be ≥ 0"},
		{[]string{"--concurrency", "1", "--pass-requests", "4", "--save-raw-dir", t.TempDir()}, "--save-raw-dir writes one line per sample"},
	} {
		_, stderr, code := passCapture(t, srv, ds, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if srv.Count() != 0 {
		t.Errorf("the server saw %d requests", srv.Count())
	}
}
