package main

import (
	"errors"
	"flag"
	"math"
	"strconv"

	"github.com/asrprof/asrprof/capture"
)

// addPassFlags registers the length of a pass and trace replay on fs
// (docs/REPLAY.md), writing into cfg; cfg's values are the defaults. It
// must be called after --arrivals is defined: its help gains replay:FILE.
func addPassFlags(fs *flag.FlagSet, cfg *capture.Config) {
	if a := fs.Lookup("arrivals"); a != nil {
		a.Usage += ";\nreplay:FILE sends at the arrival times of a trace (JSONL or CSV: timestamp in ms as Mooncake's,\ntimestamp_ms or timestamp_s; sample_id or audio_duration_s picks the sample), one level named\nreplay, its times divided by --replay-speed (docs/REPLAY.md)"
	}
	fs.IntVar(&cfg.PassRequests, "pass-requests", cfg.PassRequests, "send `N` requests a pass, cycling the dataset (0: every sample once); with --pass-duration,\nwhichever ends first")
	fs.DurationVar(&cfg.PassDuration, "pass-duration", cfg.PassDuration, "send for `DURATION` a pass, cycling the dataset (0: every sample once); requests in flight\nthen finish. Closed loop: none is handed out after it; open loop: the schedule ends there")
	fs.Func("replay-speed", "--arrivals replay:FILE: divide the trace's times by `X` (2: twice as fast) (default 1)", func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0) || math.IsInf(x, 0) {
			return errors.New("want a number > 0, such as 2")
		}
		cfg.ReplaySpeed = x
		return nil
	})
}
