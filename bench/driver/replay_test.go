package driver

import (
	"errors"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/load"
)

func TestNewReplayPicks(t *testing.T) {
	items := []Item{{SampleID: "a", AudioS: 2}, {SampleID: "b", AudioS: 1}, {SampleID: "c", AudioS: 1}, {SampleID: "d", AudioS: 4}}
	arr := []load.Arrival{
		{At: 0, SampleID: "d"},
		{At: time.Second, AudioS: 1.1},       // b and c are 1 s: in turn
		{At: 2 * time.Second, AudioS: 0.2},   // closest is 1 s again: c's turn
		{At: 3 * time.Second, AudioS: 3},     // 2 and 4 tie: the shorter
		{At: 4 * time.Second, AudioS: 100},   // the longest
		{At: 5 * time.Second},                // round-robin: a
		{At: 6 * time.Second},                // b
		{At: 7 * time.Second, SampleID: "a"}, // by id
		{At: 8 * time.Second, AudioS: 1.0},   // b
		{At: 9 * time.Second},                // c
	}
	r, err := NewReplay(items, arr, 2, "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{3, 1, 2, 0, 3, 0, 1, 0, 1, 2}
	for k := range want {
		if r.Items[k] != want[k] {
			t.Errorf("arrival %d: item %d, want %d (%v)", k, r.Items[k], want[k], r.Items)
		}
		if r.Offsets[k] != time.Duration(k)*500*time.Millisecond {
			t.Errorf("arrival %d at %v, want %v at speed 2", k, r.Offsets[k], time.Duration(k)*500*time.Millisecond)
		}
	}
	if r.Span() != 4500*time.Millisecond || r.MeanRate() != 2 {
		t.Errorf("span %v, rate %g", r.Span(), r.MeanRate())
	}
	_, err = NewReplay(items, []load.Arrival{{SampleID: "zz", Line: 7}}, 1, "t.jsonl")
	var te *load.TraceError
	if !errors.As(err, &te) || te.Line != 7 {
		t.Errorf("unknown id: %v", err)
	}
}

func TestFidelity(t *testing.T) {
	if NewFidelity(nil) != nil {
		t.Error("fidelity of nothing")
	}
	lags := make([]float64, 1000)
	for i := range lags {
		lags[i] = 0.0001
	}
	f := NewFidelity(lags)
	if len(f.Lost) != 0 || f.Requests != 1000 || f.SendLagP50S != 0.0001 {
		t.Errorf("%+v", f)
	}
	lags[0] = 0.06 // one very late send: max over its limit, p99 not
	if f := NewFidelity(lags); len(f.Lost) != 1 || f.SendLagMaxS != 0.06 {
		t.Errorf("%+v", f)
	}
	for i := range lags { // NewFidelity sorted them
		lags[i] = 0.0001
		if i < 20 {
			lags[i] = 0.01
		}
	}
	if f := NewFidelity(lags); len(f.Lost) != 1 || f.Lost[0] != "p99 send lag 10.000 ms > 5.000 ms" {
		t.Errorf("%+v", f)
	}
}
