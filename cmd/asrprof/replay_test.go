package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

// writeTrace writes a trace file named name with body and returns its path.
func writeTrace(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// byIntended orders a pass's records by their intended send time (and
// sample id, for the rows of one time).
func byIntended(recs []model.Request) []model.Request {
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].IntendedUnixNs != recs[j].IntendedUnixNs {
			return recs[i].IntendedUnixNs < recs[j].IntendedUnixNs
		}
		return recs[i].SampleID < recs[j].SampleID
	})
	return recs
}

// sentSamples are the sample ids of the records in intended order.
func sentSamples(recs []model.Request) []string {
	var out []string
	for _, r := range byIntended(recs) {
		out = append(out, r.SampleID)
	}
	return out
}

// offsets are the intended send times of the records from the first.
func offsets(recs []model.Request) []time.Duration {
	recs = byIntended(recs)
	var out []time.Duration
	for _, r := range recs {
		out = append(out, time.Duration(r.IntendedUnixNs-recs[0].IntendedUnixNs))
	}
	return out
}

// A replayed trace sends each row at its time with the sample it picks:
// by sample id, by the closest audio duration, or in turn when it names
// neither; the level is "replay", open loop at the trace's mean rate, and
// the manifest keeps the trace and the pass's schedule fidelity.
func TestReplayPicksSamples(t *testing.T) {
	for _, tc := range []struct {
		name, file, body string
		want             []string
		offs             []time.Duration // intended, from the first send
	}{
		{"sample_id", "ids.jsonl",
			`{"timestamp_s": 0, "sample_id": "c"}
{"timestamp_s": 0.1, "sample_id": "a"}
# a comment
{"timestamp_s": 0.25, "sample_id": "b"}

{"timestamp_s": 0.3, "sample_id": "a"}
`, []string{"c", "a", "b", "a"}, []time.Duration{0, 100 * time.Millisecond, 250 * time.Millisecond, 300 * time.Millisecond}},
		{"audio_duration", "lens.csv",
			"timestamp_ms,audio_duration_s,user\n1000,1.9,x\n1100,0.4,y\n1200,1.2,z\n1300,0.7,w\n1400,5,v\n",
			[]string{"c", "a", "b", "a", "c"}, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}},
		{"neither_mooncake", "mooncake.jsonl", // Mooncake's fields: timestamp in ms, the rest ignored
			`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
{"timestamp": 27600, "input_length": 6472, "output_length": 26, "hash_ids": [46, 47, 49]}
{"timestamp": 27700, "input_length": 6000, "output_length": 12, "hash_ids": [1]}
{"timestamp": 27800, "input_length": 10, "output_length": 1, "hash_ids": []}
{"timestamp": 27800, "input_length": 10, "output_length": 1, "hash_ids": []}
`, []string{"a", "b", "c", "a", "b"}, []time.Duration{0, 118 * time.Millisecond, 218 * time.Millisecond, 318 * time.Millisecond, 318 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{})
			trace := writeTrace(t, tc.file, tc.body)
			b, stderr, code := passCapture(t, srv, passDataset(t), "--arrivals", "replay:"+trace)
			if code != exitOK {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			recs := passRequests(t, b)
			if got := sentSamples(recs); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("sent %v, want %v", got, tc.want)
			}
			if got := offsets(recs); !durationsEqual(got, tc.offs) {
				t.Errorf("intended offsets %v, want %v", got, tc.offs)
			}
			for _, r := range recs {
				if r.Level != "replay" || r.IntendedUnixNs == 0 {
					t.Errorf("record %s: level %q intended %d", r.ID, r.Level, r.IntendedUnixNs)
				}
			}
			if lv := b.Manifest.Levels; len(lv) != 1 || lv[0].Level != "replay" || lv[0].Rate <= 0 {
				t.Errorf("manifest levels %+v", lv)
			}
			if !strings.Contains(stderr, "replay repeat 1: schedule fidelity: send lag p50 ") {
				t.Errorf("no fidelity line at the pass's end:\n%s", stderr)
			}
			// One spelling of the level: the progress and the sweep say "replay".
			if !strings.Contains(stderr, "replay repeat 1/1: ") || strings.Contains(stderr, "rate ") {
				t.Errorf("progress lines do not name the level replay:\n%s", stderr)
			}
			if _, show, _ := runCLI("show", filepath.Dir(b.Path(bundle.ManifestFile))); !strings.Contains(show, "\nreplay ") || strings.Contains(show, "eplay/s") {
				t.Errorf("the sweep's level is not \"replay\":\n%s", show)
			}
			fid := fidelityOf(t, b)
			if len(fid) != 1 || fid[0].Requests != len(tc.want) || fid[0].Level != "replay" || fid[0].SendLagMaxS < 0 {
				t.Errorf("schedule_fidelity %+v", fid)
			}
			rp, _ := b.Manifest.Extra["replay"].(map[string]any)
			if rp["file"] != trace || rp["arrivals"] != float64(len(tc.want)) || len(rp["sha256"].(string)) != 64 {
				t.Errorf("extra.replay %v", rp)
			}
		})
	}
}

// --replay-speed 2 sends the same trace in half its time.
func TestReplaySpeed(t *testing.T) {
	body := "timestamp_s\n0\n0.2\n0.4\n0.6\n0.8\n"
	trace := writeTrace(t, "t.csv", body)
	ds := passDataset(t)
	for _, tc := range []struct {
		speed string
		step  time.Duration
	}{{"1", 200 * time.Millisecond}, {"2", 100 * time.Millisecond}, {"0.5", 400 * time.Millisecond}} {
		srv := fakeasr.NewServer(t, fakeasr.Config{})
		b, stderr, code := passCapture(t, srv, ds, "--arrivals", "replay:"+trace, "--replay-speed", tc.speed, "--quiet")
		if code != exitOK {
			t.Fatalf("speed %s: exit %d\n%s", tc.speed, code, stderr)
		}
		recs := passRequests(t, b)
		var want []time.Duration
		for i := range 5 {
			want = append(want, time.Duration(i)*tc.step)
		}
		if got := offsets(recs); !durationsEqual(got, want) {
			t.Errorf("speed %s: intended offsets %v, want %v", tc.speed, got, want)
		}
		// The server saw them on that schedule too, within the fidelity
		// limits: either end may be late by up to the worst send lag a
		// pass keeps its fidelity with (the first was 5 ms later than the
		// last under the suite's load, in one make test).
		reqs := srv.Requests()
		span := reqs[len(reqs)-1].Arrived.Sub(reqs[0].Arrived)
		if d := span - 4*tc.step; d < -driver.FidelityMaxLimit || d > driver.FidelityMaxLimit {
			t.Errorf("speed %s: the server saw the requests over %v, want %v", tc.speed, span, 4*tc.step)
		}
		if got := b.Manifest.Levels[0].Rate; got < 0.99/tc.step.Seconds() || got > 1.01/tc.step.Seconds() {
			t.Errorf("speed %s: level rate %g, want %g", tc.speed, got, 1/tc.step.Seconds())
		}
	}
}

// A trace that cannot be replayed stops the capture before any request
// with one line naming the file and the line.
func TestReplayBadTrace(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	ds := passDataset(t)
	for _, tc := range []struct {
		name, file, body string
		extra            []string
		want             string // in stderr; $F is the trace's path
	}{
		{"not_json", "t.jsonl", "{\"timestamp_s\": 0}\n{\"timestamp_s\": 1,}\n", nil, "$F:2: not a JSON object"},
		{"no_time", "t.jsonl", "{\"timestamp_s\": 0}\n{\"sample_id\": \"a\"}\n", nil, "$F:2: no time: give timestamp (milliseconds"},
		{"two_times", "t.jsonl", "{\"timestamp\": 0, \"timestamp_s\": 0}\n", nil, "$F:1: both timestamp and timestamp_s"},
		{"mixed_units", "t.jsonl", "{\"timestamp\": 0}\n{\"timestamp_s\": 1}\n", nil, "$F:2: timestamp_s, but the rows before use timestamp (ms)"},
		{"not_sorted", "t.jsonl", "{\"timestamp_s\": 1}\n{\"timestamp_s\": 2}\n\n{\"timestamp_s\": 1.5}\n", nil, "$F:4: timestamp_s 1.5 is before the previous row's 2 (line 2): sort the trace"},
		{"time_string", "t.jsonl", "{\"timestamp_s\": \"soon\"}\n", nil, `$F:1: timestamp_s "soon": want a number`},
		{"negative", "t.jsonl", "{\"timestamp_ms\": -5}\n", nil, "$F:1: timestamp_ms -5: want a time ≥ 0"},
		{"bad_duration", "t.jsonl", "{\"timestamp_s\": 0, \"audio_duration_s\": 0}\n", nil, "$F:1: audio_duration_s 0: want a duration > 0"},
		{"bad_id_type", "t.jsonl", "{\"timestamp_s\": 0, \"sample_id\": 7}\n", nil, "$F:1: sample_id 7: want a string"},
		{"unknown_id", "t.jsonl", "{\"timestamp_s\": 0}\n{\"timestamp_s\": 1, \"sample_id\": \"zz\"}\n", nil, `$F:2: sample_id "zz" is not in the dataset (3 samples`},
		{"empty", "t.jsonl", "\n# nothing\n", nil, "$F: no arrivals in the trace"},
		{"csv_no_time_column", "t.csv", "when,sample_id\n0,a\n", nil, `$F:1: the header "when,sample_id" has no time column`},
		{"csv_bad_number", "t.csv", "timestamp_ms\n0\n10\nten\n", nil, `$F:4: timestamp_ms "ten": want a number`},
		{"csv_short_row", "t.csv", "timestamp_ms,sample_id\n0,a\n10\n", nil, "$F:3: wrong number of fields"},
		{"missing_file", "", "", nil, "--arrivals replay:$F: no such file or directory"},
		{"with_rate", "t.csv", "timestamp_ms\n0\n", []string{"--rate", "2"}, "is a schedule of its own: drop --concurrency and --rate"},
		{"speed_zero", "t.csv", "timestamp_ms\n0\n", []string{"--replay-speed", "0"}, `--replay-speed "0": want a number > 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "absent.jsonl")
			if tc.file != "" {
				trace = writeTrace(t, tc.file, tc.body)
			}
			_, stderr, code := passCapture(t, srv, ds, append([]string{"--arrivals", "replay:" + trace}, tc.extra...)...)
			want := strings.ReplaceAll(tc.want, "$F", trace)
			if code != exitUsage || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitUsage, want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
				t.Errorf("the error takes %d lines:\n%s", n+1, stderr)
			}
		})
	}
	if srv.Count() != 0 {
		t.Errorf("the server saw %d requests", srv.Count())
	}
}

type fidelityRec struct {
	Level       string  `json:"level"`
	Repeat      int     `json:"repeat"`
	Requests    int     `json:"requests"`
	SendLagP50S float64 `json:"send_lag_p50_s"`
	SendLagP99S float64 `json:"send_lag_p99_s"`
	SendLagMaxS float64 `json:"send_lag_max_s"`
	Lost        []string
}

func fidelityOf(t *testing.T, b *bundle.Bundle) []fidelityRec {
	t.Helper()
	raw, err := json.Marshal(b.Manifest.Extra["schedule_fidelity"])
	if err != nil {
		t.Fatal(err)
	}
	var out []fidelityRec
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("schedule_fidelity %s: %v", raw, err)
	}
	return out
}

func durationsEqual(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d < -time.Microsecond || d > time.Microsecond {
			return false
		}
	}
	return true
}
