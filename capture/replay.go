package capture

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/load"
)

// Trace replay (--arrivals replay:FILE, docs/REPLAY.md): one open-loop
// level, ReplayLevel, that sends a request at each arrival time of a trace
// file (bench/load.ParseTrace) with the sample the row names (its sample id,
// or the closest audio duration, or the next in turn; bench/driver's
// NewReplay), its times divided by ReplaySpeed. Each open-loop pass
// records its schedule fidelity (bundle.Fidelity) in the manifest,
// extra.schedule_fidelity, and says it at the pass's end
// (Session.recordDriver).

// ReplayPrefix starts the --arrivals value that replays a trace.
const ReplayPrefix = "replay:"

// ReplayLevel is the name of a replay capture's one level.
const ReplayLevel = "replay"

// ReplayFile is the trace that c's arrivals replay ("" when they are
// poisson or constant).
func (c *Config) ReplayFile() string {
	if f, ok := strings.CutPrefix(string(c.Arrivals), ReplayPrefix); ok {
		return f
	}
	return ""
}

func isReplay(a load.Arrivals) bool { return strings.HasPrefix(string(a), ReplayPrefix) }

// validateReplay checks --arrivals replay:FILE and --replay-speed; the
// trace itself is read, and its rows checked, by loadReplay.
func (c *Config) validateReplay() error {
	sp := c.ReplaySpeed
	if sp < 0 || math.IsNaN(sp) || math.IsInf(sp, 0) {
		return fmt.Errorf("--replay-speed %g: want a number > 0 (2: the trace in half its time)", sp)
	}
	if !isReplay(c.Arrivals) {
		return errIf(sp != 0 && sp != 1, "--replay-speed scales a replayed trace: give --arrivals replay:FILE")
	}
	file := c.ReplayFile()
	st, err := os.Stat(file)
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return cmp.Or(
		errIf(file == "", "--arrivals replay:FILE: name the trace, e.g. replay:trace.jsonl (docs/REPLAY.md)"),
		errIf(len(c.Concurrency) > 0 || len(c.Rates) > 0,
			"--arrivals %s is a schedule of its own: drop --concurrency and --rate (--replay-speed scales it)", c.Arrivals),
		errIf(c.Search != nil, "--find-max searches --concurrency or --rate levels; it does not combine with --arrivals replay:FILE"),
		c.oneRequestPerSample("--arrivals replay:FILE may"),
		errIf(err != nil, "--arrivals replay:%s: %v", file, err),
		errIf(err == nil && st.IsDir(), "--arrivals replay:%s is a directory: want a JSONL or CSV trace", file),
	)
}

// replayPlan is a loaded trace matched to the dataset.
type replayPlan struct {
	r    *driver.Replay
	rate float64 // mean requests per second, speed applied (3 decimals)
	info map[string]any
}

// loadReplay reads cfg's trace and picks each arrival's sample (nil when
// cfg replays none). A bad row is an ErrInvalidConfig naming file and
// line.
func loadReplay(cfg *Config, items []driver.Item) (*replayPlan, error) {
	file := cfg.ReplayFile()
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: --arrivals replay:%s: %v", ErrInvalidConfig, file, err)
	}
	arr, err := load.ParseTrace(bytes.NewReader(b), file)
	if err != nil {
		return nil, fmt.Errorf("%w: --arrivals: %v", ErrInvalidConfig, err)
	}
	r, err := driver.NewReplay(items, arr, cfg.ReplaySpeed, file)
	if err != nil {
		return nil, fmt.Errorf("%w: --arrivals: %v", ErrInvalidConfig, err)
	}
	by := map[string]int{}
	for _, a := range arr {
		switch {
		case a.SampleID != "":
			by["sample_id"]++
		case a.AudioS > 0:
			by["audio_duration_s"]++
		default:
			by["round_robin"]++
		}
	}
	sum := sha256.Sum256(b)
	speed := cmp.Or(cfg.ReplaySpeed, 1)
	// The level's rate, three decimals as a level name keeps them.
	p := &replayPlan{r: r, rate: math.Round(r.MeanRate()*1000) / 1000}
	p.info = map[string]any{
		"file": file, "sha256": hex.EncodeToString(sum[:]), "arrivals": len(arr), "speed": speed,
		"span_s": r.Span().Seconds(), "mean_rate": p.rate, "matched_by": by,
	}
	return p, nil
}
