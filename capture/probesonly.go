package capture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
)

// ProbesOnlyLevel is the level name of a probes-only capture's periods
// (their repeats count 1, 2, ...).
const ProbesOnlyLevel = "probes"

// validateProbesOnly checks a capture without a driver: it needs probes,
// a process or a target to find one by (the gpu probe alone needs
// neither), and a positive period.
func (c *Config) validateProbesOnly() error {
	u, err := url.Parse(c.Target)
	return cmp.Or(
		errIf(c.Dataset != "" || len(c.Concurrency) > 0 || len(c.Rates) > 0, "--probes-only sends no requests: drop --dataset, --concurrency and --rate"),
		errIf(len(c.Agents) > 0, "--probes-only runs the probes here: run it on the agent's host instead of giving --agent"),
		errIf(c.noProbes(), "--probes-only with --probes none has nothing to record"),
		errIf(c.Target != "" && (err != nil || u.Host == ""), "--target %q: want a base URL such as http://127.0.0.1:8000", c.Target),
		// The probes watch this process and nothing else: one that does not
		// exist would have them record nothing until --duration ends.
		errIf(c.PID > 0 && errors.Is(syscall.Kill(c.PID, 0), syscall.ESRCH), "--pid %d: no such process on this host", c.PID),
		errIf(c.Duration < 0, "--duration %v: must be ≥ 0 (0: until stopped)", c.Duration),
		errIf(c.Period < 0 || (c.Period > 0 && c.Period < 100*time.Millisecond), "--period %v: want at least 100ms", c.Period),
		errIf(c.Out == "", "--out is required"),
	)
}

// validateRemote checks the --agent URLs.
func (c *Config) validateRemote() error {
	if len(c.Agents) > 0 && c.noProbes() {
		return fmt.Errorf("--agent runs the probes on the agent: drop --probes none, or drop --agent")
	}
	for _, a := range c.Agents {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--agent %q: want the base URL of an asrprof serve, such as http://10.0.0.2:7070", a)
		}
	}
	return nil
}

// ProbeRun is the probes of a capture without its driver: a probes-only
// capture (Session.Run, periods on a timer) or an agent's half of a
// remote capture (asrprof serve, periods given by the remote driver). It
// is the capture skeleton (capture/skeleton.go) without a tracing side:
// a bundle with the probes' files and a manifest. Its methods may be
// called from several goroutines; they are serialized.
type ProbeRun struct {
	skeleton

	calls   sync.Mutex    // serializes Begin, End and Finish
	current *probe.Period // the period begun and not yet ended
	done    *Outcome
}

// StartProbeRun creates cfg.Out and starts the probes of cfg (which must
// be ProbesOnly). obs, when not nil, sees every record the probes write.
// Notes go to stderr. It fails when no probe could start: a probes-only
// capture that records nothing is no capture.
func StartProbeRun(ctx context.Context, cfg Config, obs Observer, stderr io.Writer) (*ProbeRun, error) {
	if !cfg.ProbesOnly {
		return nil, fmt.Errorf("%w: a probe run needs ProbesOnly", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &ProbeRun{skeleton: skeleton{cfg: cfg, stdout: io.Discard, stderr: stderr, obs: obs}}
	if err := r.open(ctx, buildFingerprint(cfg.Target, nil, "", 0), 0, nil); err != nil {
		r.close()
		return nil, err
	}
	if len(r.pset.running) == 0 {
		r.manifest.Incomplete = append(r.manifest.Incomplete, "no probe could start")
		r.saveManifest()
		r.close()
		return nil, fmt.Errorf("no probe could start here (%v); see 'asrprof doctor'", r.pset.status)
	}
	return r, nil
}

// Status is each probe's state: "on", or why it is off or failed.
func (r *ProbeRun) Status() map[string]string {
	r.calls.Lock()
	defer r.calls.Unlock()
	return maps.Clone(r.pset.status)
}

// Begin starts a period. A period still open is ended first.
func (r *ProbeRun) Begin(ctx context.Context, p probe.Period) error {
	r.calls.Lock()
	defer r.calls.Unlock()
	if r.done != nil {
		return errors.New("the probe run has finished")
	}
	if r.current != nil {
		prev := *r.current
		prev.EndUnixNs = p.StartUnixNs
		r.endLocked(ctx, prev)
	}
	r.pset.begin(p)
	r.current = &p
	return nil
}

// End ends the period p begun with Begin and returns what each probe
// recorded in it.
func (r *ProbeRun) End(ctx context.Context, p probe.Period) (map[string]uint64, error) {
	r.calls.Lock()
	defer r.calls.Unlock()
	if r.done != nil {
		return nil, errors.New("the probe run has finished")
	}
	if r.current == nil || r.current.Level != p.Level || r.current.Repeat != p.Repeat || r.current.Warmup != p.Warmup {
		return nil, fmt.Errorf("period %s repeat %d was not begun", p.Level, p.Repeat)
	}
	return r.endLocked(ctx, p), nil
}

func (r *ProbeRun) endLocked(ctx context.Context, p probe.Period) map[string]uint64 {
	r.end(ctx, p)
	counts := map[string]uint64{}
	for _, pr := range r.pset.running {
		counts[pr.Name()] = r.pset.periodCount(pr)
	}
	r.current = nil
	r.mu.Lock()
	r.manifest.Levels = append(r.manifest.Levels, model.LevelRun{
		Level: p.Level, Repeat: p.Repeat, Warmup: p.Warmup,
		StartUnixNs: p.StartUnixNs, EndUnixNs: p.EndUnixNs, WallS: float64(p.EndUnixNs-p.StartUnixNs) / 1e9,
	})
	r.mu.Unlock()
	if err := r.saveManifest(); err != nil {
		r.say("manifest: " + err.Error())
	}
	return counts
}

// Finish ends an open period and finalizes the bundle (the skeleton's
// finalize: probes stopped, manifest verdict, tables, the end hook). It
// may be called more than once; later calls return the first outcome.
func (r *ProbeRun) Finish(ctx context.Context) (*Outcome, error) {
	r.calls.Lock()
	defer r.calls.Unlock()
	if r.done != nil {
		return r.done, nil
	}
	if r.current != nil {
		p := *r.current
		p.EndUnixNs = time.Now().UnixNano()
		r.endLocked(ctx, p)
	}
	r.mu.Lock()
	if scoredPasses(r.manifest.Levels) == 0 {
		r.manifest.Incomplete = append(r.manifest.Incomplete, "no probe period ran")
	}
	r.mu.Unlock()
	var err error
	r.done, err = r.finalize(ctx, nil, false, nil)
	return r.done, err
}

// runProbesOnly is Session.Run for a probes-only capture: periods of
// cfg.Period until cfg.Duration ends or ctx is cancelled (the normal end
// of a capture without a duration: its last period is shorter).
func (s *Session) runProbesOnly(ctx context.Context) (*Outcome, error) {
	cfg := &s.cfg
	run, err := StartProbeRun(ctx, *cfg, s.obs, s.stderr)
	if err != nil {
		return nil, err
	}
	defer run.close() // a period that failed; after Finish, nothing
	period := cmp.Or(cfg.Period, DefaultPeriod)
	var end <-chan time.Time
	if cfg.Duration > 0 {
		end = time.After(cfg.Duration)
	}
	if !cfg.Quiet {
		until := "stopped (Ctrl-C)"
		if cfg.Duration > 0 {
			until = cfg.Duration.String() + " have passed (or Ctrl-C)"
		}
		fmt.Fprintf(s.stderr, "probes only: periods of %v until %s\n", period, until)
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	stopped := false
	for i := 1; !stopped; i++ {
		p := probe.Period{Level: ProbesOnlyLevel, Repeat: i, StartUnixNs: time.Now().UnixNano()}
		if err := run.Begin(ctx, p); err != nil {
			return nil, err
		}
		select {
		case <-tick.C:
		case <-end:
			stopped = true
		case <-ctx.Done():
			stopped = true
		}
		p.EndUnixNs = time.Now().UnixNano()
		counts, err := run.End(context.WithoutCancel(ctx), p)
		if err != nil {
			return nil, err
		}
		if !cfg.Quiet {
			fmt.Fprintf(s.stderr, "period %d: records: %s\n", i,
				joinSorted(counts, ", ", func(n string, c uint64) string { return fmt.Sprintf("%s %d", n, c) }))
		}
	}
	run.stdout, run.onFinish = s.stdout, s.onFinish // its end hook writes the report
	return run.Finish(context.WithoutCancel(ctx))
}
