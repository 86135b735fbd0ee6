package driver_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

func tone(seconds float64) []byte {
	s := make([]int16, int(seconds*16000))
	for i := range s {
		s[i] = int16(math.Round(0.3 * 32768 * math.Sin(2*math.Pi*300*float64(i)/16000)))
	}
	return audiotest.WAV16(16000, 1, s...)
}

// TestRealtimePassGoesOnAfterAClosedSession runs a pass of four sessions
// where the server closes the second one mid-session.
func TestRealtimePassGoesOnAfterAClosedSession(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{CloseAfterS: 0.3, CloseOn: func(n int) bool { return n == 2 }})
	c, err := protocol.New("funasr-ws", protocol.Options{Target: srv.URL, Pace: protocol.PaceNone})
	if err != nil {
		t.Fatal(err)
	}
	var items []driver.Item
	for _, id := range []string{"a", "b", "c", "d"} {
		items = append(items, driver.Item{SampleID: id, FileName: id + ".wav", Audio: tone(1), AudioS: 1, Ref: fakeasr.DefaultText, Lang: "en"})
	}
	d := &driver.Driver{Client: c, Items: items, Lang: "en", Timeout: 10 * time.Second}
	p := d.Run(context.Background(), context.Background(), driver.Level{Name: "c1", Concurrency: 1}, 1, false)
	if len(p.Records) != 4 {
		t.Fatalf("%d records, want 4: the pass must go on", len(p.Records))
	}
	failed := 0
	for _, r := range p.Records {
		if r.Status != model.StatusOK {
			failed++
			if r.ErrorKind != model.FailConnection || !strings.Contains(r.Error, "closed the session") {
				t.Errorf("failed session: kind %q error %q", r.ErrorKind, r.Error)
			}
			continue
		}
		if r.FirstUpdateS == nil || r.FinalAfterStopS == nil || r.LagP95S == nil || r.AudioS != 1 || r.Partials == 0 || r.Finals == 0 {
			t.Errorf("session %s lacks realtime fields: %+v", r.SampleID, r)
		}
		if !r.Scored || r.Errors == nil || r.Errors.Sub+r.Errors.Del+r.Errors.Ins != 0 {
			t.Errorf("session %s: hyp %q scored %v errors %+v", r.SampleID, r.Hyp, r.Scored, r.Errors)
		}
	}
	if failed != 1 {
		t.Errorf("%d failed sessions, want 1", failed)
	}
}
