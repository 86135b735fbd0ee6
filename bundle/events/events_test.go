package events

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseFileName(t *testing.T) {
	tests := []struct {
		name  string
		stage string
		pid   int
		ok    bool
	}{
		{"events_thinker_4242.jsonl", "thinker", 4242, true},
		{"events_audio_encoder_17.jsonl", "audio_encoder", 17, true},
		{"events_thinker.jsonl", "", 0, false},
		{"events_thinker_x.jsonl", "", 0, false},
		{"events_thinker_12.json", "", 0, false},
		{"spans_thinker_12.jsonl", "", 0, false},
	}
	for _, tt := range tests {
		stage, pid, ok := ParseFileName(tt.name)
		if stage != tt.stage || pid != tt.pid || ok != tt.ok {
			t.Errorf("ParseFileName(%q) = %q, %d, %v; want %q, %d, %v", tt.name, stage, pid, ok, tt.stage, tt.pid, tt.ok)
		}
	}
}

func TestImportDir(t *testing.T) {
	src := t.TempDir()
	write(t, src, "events_thinker_4242.jsonl",
		`{"request_id":"transcription-a","stage":"thinker","event_name":"scheduler_queue_enter","timestamp_ns":100,"run_id":"r","pid":4242,"metadata":{"queue_len":3}}`+"\n"+
			`{"request_id":"transcription-a","stage":"thinker","event_name":"scheduler_prefill_start","timestamp_ns":200,"run_id":"r","pid":4242}`+"\n"+
			`{"request_id":"transcription-b","stage":"thinker","event_name":"stage_com`) // killed mid-write
	write(t, src, "events_audio_encoder_17.jsonl",
		`{"request_id":"transcription-a","event_name":"stage_input_received","timestamp_ns":50,"run_id":"r"}`+"\n"+
			"not json\n"+
			"\n"+
			`{"request_id":"transcription-a","timestamp_ns":60}`+"\n"+
			`{"request_id":"transcription-a","event_name":"stage_complete","timestamp_ns":90,"run_id":"r","pid":17}`+"\n")
	write(t, src, "notes.txt", "ignored")
	write(t, src, "events_x.jsonl", "ignored too")

	out := t.TempDir()
	bw, err := bundle.Create(out, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ImportDir(src, bw)
	if err != nil {
		t.Fatal(err)
	}
	bw.Close()
	if st.Files != 2 || st.Events != 4 || st.Malformed != 2 || st.Truncated != 1 {
		t.Errorf("stats %+v, want 2 files, 4 events, 2 malformed, 1 truncated", st)
	}
	wantProblems := []string{"events_audio_encoder_17.jsonl:2: ", "events_audio_encoder_17.jsonl:4: event without event_name"}
	if len(st.Problems) != len(wantProblems) {
		t.Fatalf("problems %q", st.Problems)
	}
	for i, w := range wantProblems {
		if !strings.Contains(st.Problems[i], w) {
			t.Errorf("problem %q does not contain %q", st.Problems[i], w)
		}
	}
	evs, err := bundle.ReadAll[bundle.Event](bw.Path(bundle.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Stage+"/"+e.EventName)
		if e.PID == 0 || e.RequestID != "transcription-a" {
			t.Errorf("event %+v: want a pid and request transcription-a", e)
		}
	}
	want := []string{"audio_encoder/stage_input_received", "audio_encoder/stage_complete", "thinker/scheduler_queue_enter", "thinker/scheduler_prefill_start"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if evs[0].PID != 17 {
		t.Errorf("pid from file name: %d, want 17", evs[0].PID)
	}
	if evs[2].Metadata["queue_len"] != 3.0 {
		t.Errorf("metadata %v", evs[2].Metadata)
	}
}

func TestImportDirMissing(t *testing.T) {
	if _, err := ImportDir(filepath.Join(t.TempDir(), "nope"), nil); err == nil {
		t.Error("missing dir: no error")
	}
}

func TestProfiler(t *testing.T) {
	type call struct{ path, body string }
	var calls []call
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s with %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		calls = append(calls, call{r.URL.Path, string(b)})
		if fail {
			http.Error(w, "profiler already running", http.StatusConflict)
		}
	}))
	defer srv.Close()
	p := &Profiler{URL: srv.URL + "/"}
	ctx := context.Background()
	if err := p.Start(ctx, "run-1", "/tmp/ev"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].path != "/start_request_profile" || calls[1].path != "/stop_request_profile" {
		t.Fatalf("calls %+v", calls)
	}
	var body map[string]string
	if err := json.Unmarshal([]byte(calls[0].body), &body); err != nil || body["run_id"] != "run-1" || body["event_dir"] != "/tmp/ev" {
		t.Errorf("start body %q", calls[0].body)
	}
	fail = true
	err := p.Start(ctx, "run-2", "/tmp/ev")
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "already running") {
		t.Errorf("error answer: %v", err)
	}
}

func FuzzEventLine(f *testing.F) {
	f.Add([]byte(`{"request_id":"transcription-a","stage":"thinker","event_name":"stage_complete","timestamp_ns":1,"run_id":"r","pid":1,"metadata":{}}` + "\n"))
	f.Add([]byte("{\"event_name\":\"x\"}\n{\"event_na"))
	f.Add([]byte("\n\n[1,2]\nnull\n"))
	f.Add([]byte(`{"event_name":"x","pid":1e99,"timestamp_ns":"1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var st Stats
		n := 0
		err := readLines(strings.NewReader(string(data)), "f", &st, func(ev *bundle.Event) error {
			if ev.EventName == "" {
				t.Fatal("event without a name accepted")
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(string(data), "\n") + 1
		if n+st.Malformed+st.Truncated > lines || st.Truncated > 1 || len(st.Problems) > MaxProblems {
			t.Fatalf("%d events, stats %+v from %d lines", n, st, lines)
		}
	})
}
