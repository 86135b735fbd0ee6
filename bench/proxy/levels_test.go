package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/proxy"
	"github.com/asrprof/asrprof/model"
)

// closedLoop simulates a client's closed-loop pass of n requests at
// concurrency c from t0 (ns), each taking dur, the next one sent turn
// after one ends; it returns the records and the pass's end.
func closedLoop(t0 int64, n, c int, dur, turn time.Duration) ([]model.Request, int64) {
	var recs []model.Request
	free := make([]int64, c) // when each slot is free
	for i := range free {
		free[i] = t0 + int64(i)*int64(50*time.Microsecond)
	}
	end := t0
	for i := 0; i < n; i++ {
		k := 0
		for j := range free {
			if free[j] < free[k] {
				k = j
			}
		}
		s := free[k]
		e := s + int64(dur) + int64(i%3)*int64(time.Millisecond)
		recs = append(recs, model.Request{StartUnixNs: s, EndUnixNs: e})
		free[k] = e + int64(turn)
		end = max(end, e)
	}
	return recs, end
}

func TestInferLevels(t *testing.T) {
	ms := time.Millisecond
	type pass struct {
		n, c  int
		pause time.Duration // before the pass
	}
	for _, tc := range []struct {
		name   string
		passes []pass
		names  []string
		want   string // level:repeat:requests ...
	}{
		{"sweep up, no pause", []pass{{8, 1, 0}, {8, 4, 0}, {16, 8, 0}}, nil, "c1:1:8 c4:1:8 c8:1:16"},
		{"sweep down", []pass{{16, 8, 0}, {8, 2, 2 * ms}, {8, 1, 2 * ms}}, nil, "c8:1:16 c2:1:8 c1:1:8"},
		{"repeats split by a pause", []pass{{8, 4, 0}, {8, 4, 300 * ms}, {8, 1, 300 * ms}}, nil, "c4:1:8 c4:2:8 c1:1:8"},
		{"10 at c=4, then c=1", []pass{{10, 4, 0}, {6, 1, 3 * ms}}, nil, "c4:1:10 c1:1:6"},
		{"named", []pass{{8, 1, 0}, {8, 4, 0}}, []string{"c1", "c4"}, "c1:1:8 c4:1:8"},
		{"named repeats without a pause", []pass{{8, 4, 0}, {8, 4, 5 * ms}}, []string{"c4", "c4"}, "c4:1:8 c4:2:8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recs []model.Request
			at := int64(1e18)
			for _, p := range tc.passes {
				at += int64(p.pause)
				rs, end := closedLoop(at, p.n, p.c, 40*ms, 300*time.Microsecond)
				recs = append(recs, rs...)
				at = end + int64(300*time.Microsecond) // the client's turnaround
			}
			phases, err := proxy.InferLevels(recs, proxy.LevelOptions{Names: tc.names})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ph := range phases {
				got = append(got, fmt.Sprintf("%s:%d:%d", ph.Level, ph.Repeat, len(ph.Requests)))
				for _, i := range ph.Requests {
					if recs[i].Level != ph.Level || recs[i].Repeat != ph.Repeat {
						t.Errorf("record %d: level %s repeat %d, phase %s %d", i, recs[i].Level, recs[i].Repeat, ph.Level, ph.Repeat)
					}
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("phases %s, want %s", g, tc.want)
			}
		})
	}
	// A batching server answers a c=4 pass of 10 in batches of 4, 4 and 2:
	// nothing is in flight between batches, and the last batch of 2 is the
	// level's tail, not a level c2 of its own.
	var recs []model.Request
	at := int64(1e18)
	for _, batch := range []int{4, 4, 2, 1, 1, 1, 1} {
		for k := 0; k < batch; k++ {
			recs = append(recs, model.Request{StartUnixNs: at + int64(k)*int64(100*time.Microsecond), EndUnixNs: at + int64(40*ms)})
		}
		at += int64(41 * ms)
	}
	phases, err := proxy.InferLevels(recs, proxy.LevelOptions{})
	if err != nil || len(phases) != 2 || phases[0].Level != "c4" || len(phases[0].Requests) != 10 || phases[1].Level != "c1" || len(phases[1].Requests) != 4 {
		t.Errorf("batched pass: %v %+v", err, phases)
	}
	if _, err := proxy.InferLevels([]model.Request{{StartUnixNs: 1, EndUnixNs: 2}}, proxy.LevelOptions{Names: []string{"c1", "c2"}}); err == nil {
		t.Error("more names than stretches of requests: no error")
	}
}
