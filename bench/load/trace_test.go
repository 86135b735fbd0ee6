package load

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseTraceFormats(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []Arrival
	}{
		{"mooncake.jsonl", `{"timestamp": 1000, "input_length": 5, "hash_ids": [1,2]}
{"timestamp": 1250.5}
`, []Arrival{{At: 0, Line: 1}, {At: 250500 * time.Microsecond, Line: 2}}},
		{"secs", `{"timestamp_s": 12.5, "sample_id": "x"}
{"timestamp_s": 13, "audio_duration_s": 3.5, "sample_id": null}
`, []Arrival{{At: 0, SampleID: "x", Line: 1}, {At: 500 * time.Millisecond, AudioS: 3.5, Line: 2}}},
		{"t.csv", "# comment\ntimestamp_ms, sample_id ,audio_duration_s\n5,a,\n15,,2\n", []Arrival{
			{At: 0, SampleID: "a", Line: 3}, {At: 10 * time.Millisecond, AudioS: 2, Line: 4}}},
		{"sniffed_csv", "timestamp_s\n1\n", []Arrival{{At: 0, Line: 2}}},
	} {
		got, err := ParseTrace(strings.NewReader(tc.body), tc.name)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s row %d: %+v, want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestParseTraceErrorsNameTheLine(t *testing.T) {
	_, err := ParseTrace(strings.NewReader("{\"timestamp\": 1}\n\n{\"timestamp\": 0.5}\n"), "x.jsonl")
	var te *TraceError
	if !errors.As(err, &te) || te.File != "x.jsonl" || te.Line != 3 {
		t.Fatalf("err %v, want x.jsonl line 3", err)
	}
}

// Stream gives Schedule's offsets one at a time.
func TestStreamIsSchedule(t *testing.T) {
	for _, a := range []Arrivals{Constant, Poisson} {
		want := Schedule(500, 37, a, 3)
		next := Stream(37, a, 3)
		for i, w := range want {
			if got, ok := next(i); !ok || got != w {
				t.Fatalf("%s offset %d: %v, want %v", a, i, got, w)
			}
		}
	}
}

// OpenFunc ends at the first false and sends on time.
func TestOpenFuncEnds(t *testing.T) {
	var n atomic.Int64
	start := time.Now()
	got := OpenFunc(context.Background(), context.Background(), func(i int) (time.Duration, bool) {
		return time.Duration(i) * 10 * time.Millisecond, i < 5
	}, func(ctx context.Context, i int, intended time.Time) { n.Add(1) })
	if got != 5 || n.Load() != 5 {
		t.Fatalf("started %d, ran %d, want 5", got, n.Load())
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Errorf("5 sends 10 ms apart took %v", el)
	}
}
