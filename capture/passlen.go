package capture

import (
	"cmp"

	"github.com/asrprof/asrprof/bench/driver"
)

// The length of a pass (--pass-requests, --pass-duration; docs/REPLAY.md):
// by default a pass sends every sample of the dataset once. With
// PassRequests it sends that many requests, and with PassDuration it
// sends for that long, cycling the dataset in its order (as vegeta's
// -duration cycles its targets), under either loop; with both, whichever
// ends first. Requests in flight when the pass stops sending finish, so
// its wall time is the sending time plus the last request's latency.

// validatePassLength checks the pass's length and its replayed schedule.
func (c *Config) validatePassLength() error {
	var once error // a pass of a given length sends a sample any number of times
	if c.PassRequests > 0 || c.PassDuration > 0 {
		once = c.oneRequestPerSample("--pass-requests and --pass-duration")
	}
	return cmp.Or(
		errIf(c.PassRequests < 0, "--pass-requests %d: must be ≥ 0 (0: the dataset once)", c.PassRequests),
		errIf(c.PassDuration < 0, "--pass-duration %v: must be ≥ 0 (0: the dataset once)", c.PassDuration),
		once, c.validateReplay(),
	)
}

// oneRequestPerSample refuses the options whose files hold one line per
// sample and pass when a pass may send a sample several times, or not at
// all.
func (c *Config) oneRequestPerSample(what string) error {
	return cmp.Or(
		errIf(c.Task == TaskTranscribeDiarize, "%s send samples more or less than once a pass; --task transcribe-diarize scores each sample once per pass", what),
		errIf(c.SaveRawDir != "", "%s send samples more or less than once a pass; --save-raw-dir writes one line per sample (SGLang-Omni's shape): drop one", what),
	)
}

// passLevel is the driver's level for a pass at lv: lv's loop, the pass's
// length, and for the replay level its schedule (and lv with the replay's
// mean rate, which the manifest and the metrics record).
func (s *Session) passLevel(lv SweepPoint) (SweepPoint, driver.Level) {
	cfg := &s.cfg
	var replay *driver.Replay
	if s.replay != nil && lv.Name == ReplayLevel {
		lv.Rate = s.replay.rate
		replay = s.replay.r
	}
	dl := driver.Level{Name: lv.Name, Concurrency: lv.Concurrency, Rate: lv.Rate, Arrivals: cfg.Arrivals, Seed: cfg.Seed,
		Requests: cfg.PassRequests, Duration: cfg.PassDuration, Replay: replay}
	return lv, dl
}
