package spans

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// DurationNs is EndUnixNs - StartUnixNs (a test helper).
func (s *Span) DurationNs() int64 { return s.EndUnixNs - s.StartUnixNs }

// fileAppender appends to files in dir, one write per call.
type fileAppender struct{ dir string }

func (a fileAppender) AppendRaw(name string, b []byte) error {
	f, err := os.OpenFile(filepath.Join(a.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}

// batch returns a Traces with one span per name, all in trace tid.
func batch(service string, tid byte, names ...string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	for i, n := range names {
		sp := ss.AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{tid, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
		sp.SetSpanID(pcommon.SpanID{tid, 0, 0, 0, 0, 0, 0, byte(i + 1)})
		if i > 0 {
			sp.SetParentSpanID(pcommon.SpanID{tid, 0, 0, 0, 0, 0, 0, 1})
		}
		sp.SetName(n)
		sp.SetStartTimestamp(pcommon.Timestamp(1000 + 10*i))
		sp.SetEndTimestamp(pcommon.Timestamp(2000 + 10*i))
	}
	return td
}

func names(ss []Span) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestRoundTripAndTruncation(t *testing.T) {
	records := [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}}
	tests := []struct {
		name          string
		chop          int // bytes cut off the end of the file
		wantNames     []string
		wantTruncated bool
	}{
		{name: "whole", chop: 0, wantNames: []string{"a", "b", "c", "d", "e", "f"}},
		{name: "last record cut", chop: 5, wantNames: []string{"a", "b", "c"}, wantTruncated: true},
		{name: "only a byte of the last record left", chop: -1, wantNames: []string{"a", "b", "c"}, wantTruncated: true},
		{name: "last record gone whole", chop: -2, wantNames: []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w := NewWriter(fileAppender{dir})
			path := filepath.Join(dir, FileName)
			var sizeBeforeLast int64
			for i, r := range records {
				if i == len(records)-1 {
					st, _ := os.Stat(path)
					sizeBeforeLast = st.Size()
				}
				if err := w.Write(batch("srv", byte(i), r...)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Write(ptrace.NewTraces()); err != nil { // writes nothing
				t.Fatal(err)
			}
			st, _ := os.Stat(path)
			switch {
			case tt.chop > 0:
				os.Truncate(path, st.Size()-int64(tt.chop))
			case tt.chop == -1:
				os.Truncate(path, sizeBeforeLast+1)
			case tt.chop == -2:
				os.Truncate(path, sizeBeforeLast)
			}
			var got []Span
			recs := 0
			truncated, err := Read(path, func(td ptrace.Traces) error {
				got = append(got, Flatten(td)...)
				recs++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tt.chop == 0 && recs != 3 { // the empty traces wrote no record
				t.Errorf("read %d records, want 3", recs)
			}
			if truncated != tt.wantTruncated {
				t.Errorf("truncated = %v, want %v", truncated, tt.wantTruncated)
			}
			if !reflect.DeepEqual(names(got), tt.wantNames) {
				t.Errorf("read %v, want %v", names(got), tt.wantNames)
			}
			all, err := ReadAll(path)
			if err != nil || !reflect.DeepEqual(names(all), tt.wantNames) {
				t.Errorf("ReadAll: %v, %v", names(all), err)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadAll(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	// A whole record that does not decode: length 3, then garbage.
	bad := filepath.Join(dir, FileName)
	w := NewWriter(fileAppender{dir})
	if err := w.Write(batch("srv", 1, "ok")); err != nil {
		t.Fatal(err)
	}
	fileAppender{dir}.AppendRaw(FileName, []byte{3, 0x0a, 0xff, 0xff})
	var n int
	_, err := Read(bad, func(td ptrace.Traces) error { n += td.SpanCount(); return nil })
	if err == nil || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("corrupt record: err = %v, want one naming record 1", err)
	}
	if n != 1 {
		t.Errorf("read %d spans before the corrupt record, want 1", n)
	}
	// An absurd length is not taken for truncation.
	huge := filepath.Join(dir, "huge.otlp")
	os.WriteFile(huge, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 0o644)
	if _, err := Read(huge, func(ptrace.Traces) error { return nil }); err == nil {
		t.Error("absurd record length: no error")
	}
	// fn's error stops the read.
	stop := errors.New("stop")
	if _, err := Read(bad, func(ptrace.Traces) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("fn error: got %v", err)
	}
}

func TestFlatten(t *testing.T) {
	td := batch(ClientService, 7, "asr.request", "upload")
	sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	sp.SetKind(ptrace.SpanKindClient)
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Attributes().PutStr("asrprof.sample_id", "s1")
	sp.Attributes().PutInt("http.response.status_code", 500)
	sp.Attributes().PutDouble("asr.audio_seconds", 1.5)
	sp.Attributes().PutBool("asrprof.warmup", false)
	got := Flatten(td)
	want := []Span{{
		TraceID:     "070102030405060708090a0b0c0d0e0f",
		SpanID:      "0700000000000001",
		Name:        "asr.request",
		Service:     ClientService,
		Kind:        KindClient,
		StartUnixNs: 1000, EndUnixNs: 2000,
		Attrs: map[string]any{
			"asrprof.sample_id":         "s1",
			"http.response.status_code": int64(500),
			"asr.audio_seconds":         1.5,
			"asrprof.warmup":            false,
		},
		StatusCode: StatusError,
	}, {
		TraceID:      "070102030405060708090a0b0c0d0e0f",
		SpanID:       "0700000000000002",
		ParentSpanID: "0700000000000001",
		Name:         "upload",
		Service:      ClientService,
		Kind:         KindUnspecified,
		StartUnixNs:  1010, EndUnixNs: 2010,
		StatusCode: StatusUnset,
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Flatten:\n got %+v\nwant %+v", got, want)
	}
	if !got[0].IsClient() || got[0].DurationNs() != 1000 {
		t.Errorf("IsClient/DurationNs wrong for %+v", got[0])
	}
}
