package runbook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/probe/doctor"
	"github.com/asrprof/asrprof/table"
)

// Schema is runbook.json's schema value.
const Schema = "asrprof.runbook/v1"

// File is the name of the runbook record at the top of the output dir.
const File = "runbook.json"

// RunFile is the per-run record written into each sub-bundle.
const RunFile = "server.json"

// DefaultRuns is the plan when a server command is given and --runs is not.
const DefaultRuns = "warm,1,2,3"

// ErrIncomplete means the runbook ran but a scored run lacks coverage (or
// did not run); the verdict lists where.
var ErrIncomplete = errors.New("runbook incomplete")

// ErrBadPlan wraps errors in --runs or --order.
var ErrBadPlan = errors.New("bad run plan")

// ServerCmd is one server command as given and as split.
type ServerCmd struct {
	Command string   `json:"command"`
	Argv    []string `json:"argv"`
}

// Shown is the command as records, logs and progress lines give it: its
// credentials hidden (secret.Args: an --api-key's value, a VLLM_API_KEY=
// assignment), otherwise as given.
func (s ServerCmd) Shown() ServerCmd {
	argv := secret.Args(s.Argv)
	if slices.Equal(argv, s.Argv) {
		return s
	}
	return ServerCmd{Command: JoinCommand(argv), Argv: argv}
}

// RunSpec is one planned run.
type RunSpec struct {
	Name   string    `json:"name"`           // "warm", "1", ...
	Side   string    `json:"side,omitempty"` // "A" or "B" in an A/B session
	Scored bool      `json:"scored"`
	Dir    string    `json:"dir"` // sub-bundle, relative to the output dir
	Server ServerCmd `json:"-"`
}

var runName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ParseRuns parses a --runs list such as "warm,1,2,3". "warm" (and any
// name starting with "warm") is recorded but not scored; sub-bundles are
// run-<name>.
func ParseRuns(list string, server ServerCmd) ([]RunSpec, error) {
	var out []RunSpec
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !runName.MatchString(n) {
			return nil, fmt.Errorf("%w: --runs %q: run name %q may hold only letters, digits, . _ -", ErrBadPlan, list, n)
		}
		if slices.ContainsFunc(out, func(r RunSpec) bool { return r.Name == n }) {
			return nil, fmt.Errorf("%w: --runs %q: %q twice", ErrBadPlan, list, n)
		}
		out = append(out, RunSpec{Name: n, Scored: !strings.HasPrefix(n, "warm"), Dir: "run-" + n, Server: server})
	}
	if !slices.ContainsFunc(out, func(r RunSpec) bool { return r.Scored }) {
		return nil, fmt.Errorf("%w: --runs %q has no scored run (warm runs are never scored)", ErrBadPlan, list)
	}
	return out, nil
}

// ABPlan plans an A/B session: with warm, one unscored run of A then of B
// (A-warm, B-warm), then the order's letters, numbered per side (ABBA
// gives A-1, B-1, B-2, A-2).
func ABPlan(order string, warm bool, a, b ServerCmd) ([]RunSpec, error) {
	order = strings.ToUpper(strings.TrimSpace(order))
	if strings.Trim(order, "AB") != "" {
		return nil, fmt.Errorf("%w: --order %q: use only the letters A and B", ErrBadPlan, order)
	}
	if !strings.Contains(order, "A") || !strings.Contains(order, "B") {
		return nil, fmt.Errorf("%w: --order %q: needs at least one A and one B", ErrBadPlan, order)
	}
	srv := map[string]ServerCmd{"A": a, "B": b}
	var out []RunSpec
	if warm {
		for _, s := range []string{"A", "B"} {
			out = append(out, RunSpec{Name: "warm", Side: s, Dir: s + "-warm", Server: srv[s]})
		}
	}
	count := map[string]int{}
	for _, c := range order {
		s := string(c)
		count[s]++
		n := strconv.Itoa(count[s])
		out = append(out, RunSpec{Name: n, Side: s, Scored: true, Dir: s + "-" + n, Server: srv[s]})
	}
	return out, nil
}

// Lifecycle says how servers are started, checked and stopped.
type Lifecycle struct {
	// HealthURL is polled until 200 ("": the target + /health).
	HealthURL      string        `json:"health_url"`
	StartupTimeout time.Duration `json:"startup_timeout_s"`
	StopGrace      time.Duration `json:"stop_grace_s"`
	// GPUFreeMiB: after a stop, every GPU's used memory must drop below
	// this within GPUFreeTimeout (checked only where NVML works).
	GPUFreeMiB     uint64        `json:"gpu_free_mib"`
	GPUFreeTimeout time.Duration `json:"gpu_free_timeout_s"`
	// Reuse measures a server that already answers on the target's port
	// instead of refusing to start; it is neither started nor stopped.
	Reuse bool `json:"reuse_server"`
}

// Config is a whole runbook: a capture configuration for every run (its
// Out is the top-level directory), how to handle servers, and the plan.
type Config struct {
	Capture       capture.Config
	Lifecycle     Lifecycle
	Plan          []RunSpec
	ProvenanceEnv []string // names (trailing * for a prefix); nil: DefaultProvenanceEnv
	CacheDirs     []string
	// GPUs reads GPU memory; nil: NVML.
	GPUs GPUReader
	// Env is the servers' environment; nil: os.Environ().
	Env []string
	// GPUPoll is the GPU-free poll period (0: 2 s).
	GPUPoll time.Duration
	// Finish is each run's end-of-capture hook: the tables its capture
	// prints (to stderr) and the HTML report written into its bundle; nil:
	// none (capture.Session.OnFinish).
	Finish capture.Finish
	// Around, when set, is called once a run's server is healthy, before
	// its capture, with the server's pid (asrprof sensitivity restricts
	// the server's CPU there); the function it returns is called after the
	// capture, before the stop, and may add to the run's record. An error
	// stops the run as a lifecycle failure would.
	Around func(spec RunSpec, pid int) (after func(rec *RunRecord), err error)
	// GPUCoRunner, when set, runs beside each run's capture (started once
	// the server is healthy, stopped after the capture); Run checks first,
	// before any server starts, that it can run here (torch with CUDA).
	GPUCoRunner *GPUCoRunner
}

// RunRecord is what happened in one run.
type RunRecord struct {
	RunSpec
	PID    int  `json:"pid"`
	Reused bool `json:"reused,omitempty"`
	// Unix ns: server start, healthy, capture end, server stopped.
	StartUnixNs   int64       `json:"start_unix_ns"`
	HealthyUnixNs int64       `json:"healthy_unix_ns,omitempty"`
	CaptureEndNs  int64       `json:"capture_end_unix_ns,omitempty"`
	StoppedUnixNs int64       `json:"stopped_unix_ns,omitempty"`
	StartupS      float64     `json:"startup_s,omitempty"`
	Provenance    *Provenance `json:"provenance,omitempty"`
	GPUAfterStop  []GPU       `json:"gpu_after_stop,omitempty"`
	Complete      bool        `json:"complete"`
	Finished      bool        `json:"finished"`
	Incomplete    []string    `json:"incomplete,omitempty"`
	Error         string      `json:"error,omitempty"`
	Notes         []string    `json:"notes,omitempty"`
	// Extra is what Config.Around recorded (sensitivity: the CPU limit).
	Extra map[string]any `json:"extra,omitempty"`

	ran     bool // a capture produced an outcome
	results model.Results
}

// Report is runbook.json.
type Report struct {
	Schema      string               `json:"schema"`
	Mode        string               `json:"mode"` // "runs" or "ab"
	Target      string               `json:"target"`
	Out         string               `json:"out"`
	StartUnixNs int64                `json:"start_unix_ns"`
	EndUnixNs   int64                `json:"end_unix_ns,omitempty"`
	Lifecycle   map[string]any       `json:"lifecycle"`
	Capture     map[string]any       `json:"capture"`
	Runs        []RunRecord          `json:"runs"`
	Verdict     Verdict              `json:"verdict"`
	Summary     []MetricSummary      `json:"summary"`
	Compare     []summary.Comparison `json:"compare,omitempty"`
	Error       string               `json:"error,omitempty"`
	Notes       []string             `json:"notes,omitempty"`
}

// Run carries out the plan: for each run a fresh server (unless reused), a
// full capture into its own sub-bundle, the server stopped and the GPUs
// freed; then the verdict and summary, printed to stdout in the capture's
// --format and written to runbook.json. Each run's tables go to stdout
// too, before the summary (tables on stdout, progress and notes on
// stderr, as every command prints them).
//
// Errors: a lifecycle failure (port busy, server exited or never healthy,
// GPU not freed) stops the plan and is returned after runbook.json is
// written; an interrupted run returns capture.ErrInterrupted; a plan that
// ran to its end but lacks coverage returns ErrIncomplete. The report is
// returned in every case where the runbook began.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Report, error) {
	capCfg := cfg.Capture
	capCfg.Overwrite = false
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	out := cfg.Capture.Out
	if err := checkOut(out, File, "runbook", cfg.Capture.Overwrite); err != nil {
		return nil, err
	}
	for _, r := range cfg.Plan {
		dir := filepath.Join(out, r.Dir)
		if _, err := os.Stat(dir); err == nil {
			if !cfg.Capture.Overwrite {
				return nil, fmt.Errorf("%w: %s exists (use --overwrite to replace it)", bundle.ErrExists, dir)
			}
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("removing old run %s: %w", dir, err)
			}
		}
	}
	if cfg.GPUCoRunner != nil {
		if err := cfg.GPUCoRunner.Check(ctx); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", out, err)
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.ProvenanceEnv == nil {
		cfg.ProvenanceEnv = DefaultProvenanceEnv
	}
	cfg.GPUs = cmp.Or(cfg.GPUs, NVML(nil))
	cfg.GPUPoll = cmp.Or(cfg.GPUPoll, 2*time.Second)
	capRec, err := cfg.Capture.Record() // as each run's manifest records it
	if err != nil {
		return nil, err
	}
	// runbook.json's "lifecycle": the Lifecycle as its json tags name it
	// (option.Fields, the record of every options table), the health URL
	// resolved, and the cache dirs.
	lc := cfg.Lifecycle
	lc.HealthURL = HealthURL(cfg.Capture.Target, lc.HealthURL)
	lcRec := option.Fields(lc)
	lcRec["cache_dirs"] = cfg.CacheDirs
	rep := &Report{
		Schema: Schema, Mode: "runs", Target: cfg.Capture.Target, Out: out,
		StartUnixNs: time.Now().UnixNano(), Lifecycle: lcRec, Capture: capRec,
		Runs: []RunRecord{}, Summary: []MetricSummary{},
	}
	if slices.ContainsFunc(cfg.Plan, func(r RunSpec) bool { return r.Side != "" }) {
		rep.Mode = "ab"
	}
	var runErr error
	for i, spec := range cfg.Plan {
		if !cfg.Capture.Quiet {
			fmt.Fprintf(stderr, "== run %s (%d of %d) ==\n", spec.Dir, i+1, len(cfg.Plan))
		}
		rec, err := runOne(ctx, &cfg, capCfg, spec, stdout, stderr)
		rep.Runs = append(rep.Runs, rec)
		err = cmp.Or(err, bundle.WriteJSON(filepath.Join(out, spec.Dir, RunFile), rec))
		if err != nil {
			runErr = fmt.Errorf("run %s: %w", spec.Dir, err)
			break
		}
		if werr := bundle.WriteJSON(filepath.Join(out, File), rep); werr != nil {
			runErr = werr
			break
		}
	}
	finish(rep, &cfg)
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	rep.EndUnixNs = time.Now().UnixNano()
	runErr = answer(runErr, filepath.Join(out, File), rep, reportTables(rep), &cfg.Capture, stdout, stderr, "runbook")
	if runErr != nil {
		return rep, runErr
	}
	if !rep.Verdict.Complete {
		return rep, fmt.Errorf("%w: %d coverage gaps (see the verdict above and %s)", ErrIncomplete, len(rep.Verdict.Gaps), filepath.Join(out, File))
	}
	return rep, nil
}

func checkConfig(cfg *Config) error {
	if len(cfg.Plan) == 0 {
		return fmt.Errorf("%w: no runs planned", ErrBadPlan)
	}
	if cfg.Capture.Out == "" {
		return errNoOut
	}
	probe := cfg.Capture
	probe.Out = filepath.Join(cfg.Capture.Out, "x")
	if err := probe.Validate(); err != nil {
		return err
	}
	for _, r := range cfg.Plan {
		if len(r.Server.Argv) == 0 && !cfg.Lifecycle.Reuse {
			return fmt.Errorf("%w: run %s has no server command", ErrBadCommand, r.Dir)
		}
		if len(r.Server.Argv) > 0 { // refused before any run, not after a bundle is begun
			if _, err := exec.LookPath(r.Server.Argv[0]); err != nil {
				return fmt.Errorf("%w: run %s: %v", ErrBadCommand, r.Dir, err)
			}
		}
	}
	if cfg.Lifecycle.StartupTimeout <= 0 || cfg.Lifecycle.StopGrace < 0 || cfg.Lifecycle.GPUFreeTimeout < 0 {
		return fmt.Errorf("%w: --startup-timeout must be > 0, --stop-grace and --gpu-free-timeout ≥ 0", capture.ErrInvalidConfig)
	}
	if u, err := url.Parse(HealthURL(cfg.Capture.Target, cfg.Lifecycle.HealthURL)); err != nil || u.Host == "" {
		return fmt.Errorf("%w: --health-url %q: not a URL", capture.ErrInvalidConfig, cfg.Lifecycle.HealthURL)
	}
	return nil
}

// runOne does one run: server up, capture, server down, GPU free.
func runOne(ctx context.Context, cfg *Config, capCfg capture.Config, spec RunSpec, stdout, stderr io.Writer) (RunRecord, error) {
	rec := RunRecord{RunSpec: spec, StartUnixNs: time.Now().UnixNano()}
	dir := filepath.Join(cfg.Capture.Out, spec.Dir)
	progress := stderr // the run's progress lines; --quiet leaves errors and tables
	if cfg.Capture.Quiet {
		progress = io.Discard
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rec, fmt.Errorf("creating %s: %w", dir, err)
	}
	lc := cfg.Lifecycle
	busy, addr, err := PortAnswers(ctx, cfg.Capture.Target)
	if err != nil {
		return rec, err
	}
	var srv *Server
	// fail ends a run that failed before its capture: the server stopped
	// (where it was started), the error recorded.
	fail := func(err error) (RunRecord, error) {
		if srv != nil {
			if serr := srv.Stop(context.WithoutCancel(ctx), lc.StopGrace); serr != nil {
				err = errors.Join(err, serr)
			}
			rec.StoppedUnixNs = time.Now().UnixNano()
		}
		rec.Error = err.Error()
		return rec, err
	}
	switch {
	case busy && !lc.Reuse:
		return fail(fmt.Errorf("%w: %s is taken before the server was started (another server, or one left over: stop it, or pass --reuse-server to measure it as it is)", ErrPortBusy, addr))
	case busy:
		rec.Reused = true
		rec.PID = cfg.Capture.PID
		if rec.PID == 0 {
			if port, perr := doctor.TargetPort(cfg.Capture.Target); perr == nil {
				rec.PID, _ = proctree.FindListener(port)
			}
		}
		env := cfg.Env
		if e := procStrings(rec.PID, "environ"); e != nil {
			env = e
		}
		argv := procStrings(rec.PID, "cmdline")
		command := cmp.Or(strings.Join(argv, " "), "(reused server, command unknown)")
		rec.Provenance = Describe(ctx, command, argv, env, cfg.ProvenanceEnv, cfg.CacheDirs)
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rec.Provenance.setGPUs(cfg.GPUs.GPUs(gctx))
		cancel()
		rec.Notes = append(rec.Notes, fmt.Sprintf("--reuse-server: %s already answered; that server (pid %d) was measured as it is, not restarted", addr, rec.PID))
		fmt.Fprintf(progress, "reusing the server on %s (pid %d)\n", addr, rec.PID)
	default:
		// As the seed runbooks do before each start: the GPUs must be free
		// (a server left over from elsewhere would share them).
		g, err := WaitGPUFree(ctx, cfg.GPUs, lc.GPUFreeMiB, lc.GPUFreeTimeout, cfg.GPUPoll)
		if err != nil && !isNotSupported(err) {
			return fail(fmt.Errorf("before the start: %w", err))
		}
		rec.Provenance = Describe(ctx, spec.Server.Command, spec.Server.Argv, cfg.Env, cfg.ProvenanceEnv, cfg.CacheDirs)
		rec.Provenance.setGPUs(g, err)
		if srv, err = StartServer(spec.Server.Argv, cfg.Env, filepath.Join(dir, LogFile), lc.StopGrace); err != nil {
			return fail(err)
		}
		rec.PID = srv.PID
		rec.StartUnixNs = srv.Started.UnixNano()
		health := HealthURL(cfg.Capture.Target, lc.HealthURL)
		fmt.Fprintf(progress, "server pid %d started: %s; waiting up to %s for %s\n", srv.PID, spec.Server.Shown().Command, lc.StartupTimeout, health)
		if srv.GuardErr != nil {
			fmt.Fprintf(progress, "server pid %d: %v\n", srv.PID, srv.GuardErr)
			rec.Notes = append(rec.Notes, srv.GuardErr.Error())
		}
		if err := srv.WaitHealthy(ctx, health, lc.StartupTimeout); err != nil {
			rec, err = fail(err)
			if ctx.Err() != nil {
				return rec, fmt.Errorf("%w: while waiting for the server", capture.ErrInterrupted)
			}
			return rec, err
		}
		rec.HealthyUnixNs = time.Now().UnixNano()
		rec.StartupS = time.Since(srv.Started).Seconds()
		fmt.Fprintf(progress, "server healthy after %.1f s\n", rec.StartupS)
	}
	if rec.PID > 0 {
		if cpus, err := cpulimit.CPUs(rec.PID); err == nil {
			rec.Provenance.CPUs = CPUList(cpus) // "0-3,8"
		} else {
			rec.Provenance.Notes = append(rec.Provenance.Notes, err.Error())
		}
	}

	var after func(*RunRecord)
	if cfg.Around != nil {
		if after, err = cfg.Around(spec, rec.PID); err != nil {
			return fail(err)
		}
	}
	capCfg.Out = dir
	capCfg.PID = rec.PID
	if capCfg.SaveRawDir != "" {
		// Each run's raw records apart, under the run's name.
		capCfg.SaveRawDir = filepath.Join(capCfg.SaveRawDir, filepath.Base(dir))
	}
	var corunner *RunningGPUCoRunner
	if cfg.GPUCoRunner != nil {
		if corunner, err = cfg.GPUCoRunner.Start(ctx, dir); err != nil {
			return fail(err)
		}
		fmt.Fprintf(progress, "GPU co-runner started: %g of the GPU's time (%s)\n", cfg.GPUCoRunner.Share, filepath.Join(dir, GPUCoRunnerLog))
	}
	o, capErr := capture.New(capCfg, stdout, stderr).OnFinish(cfg.Finish).Run(ctx) // its tables on stdout, progress on stderr
	rec.CaptureEndNs = time.Now().UnixNano()
	if o != nil {
		rec.ran = true
		rec.results = o.Results
		rec.Complete, rec.Finished = o.Manifest.Complete, o.Manifest.Finished
		rec.Incomplete = o.Manifest.Incomplete
	}
	if after != nil {
		after(&rec)
	}

	errs := []error{capErr}
	if corunner != nil {
		rep, err := corunner.Stop()
		if rep != nil {
			if rec.Extra == nil {
				rec.Extra = map[string]any{}
			}
			rec.Extra["gpu_corunner"] = rep
		}
		errs = append(errs, err)
	}
	if srv != nil {
		if srv.Exited() && capErr == nil {
			rec.Notes = append(rec.Notes, "the server exited during the capture ("+exitText(srv.waitErr)+")")
		}
		errs = append(errs, srv.Stop(context.WithoutCancel(ctx), lc.StopGrace))
		rec.StoppedUnixNs = time.Now().UnixNano()
		if !errors.Is(capErr, capture.ErrInterrupted) {
			g, err := WaitGPUFree(ctx, cfg.GPUs, lc.GPUFreeMiB, lc.GPUFreeTimeout, cfg.GPUPoll)
			if isNotSupported(err) {
				rec.Notes = append(rec.Notes, "GPU memory not checked after the stop: "+err.Error())
			} else {
				rec.GPUAfterStop = g
				errs = append(errs, err)
			}
		}
	}
	err = errors.Join(errs...)
	if err != nil {
		rec.Error = err.Error()
	}
	return rec, err
}

// procStrings reads a NUL-separated file of /proc/PID (cmdline, environ):
// nil where there is no such process or the file is empty.
func procStrings(pid int, name string) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

var errNoOut = fmt.Errorf("%w: --out is required", capture.ErrInvalidConfig)

// checkOut says whether a session (Run, Sensitivity, WhatIf) may write
// its record (file, a what) at the top of out: out is given and, unless
// overwrite, holds no such record yet.
func checkOut(out, file, what string, overwrite bool) error {
	if out == "" {
		return errNoOut
	}
	if _, err := os.Stat(filepath.Join(out, file)); err == nil && !overwrite {
		return fmt.Errorf("%w: %s already holds a %s (use --overwrite to replace it)", bundle.ErrExists, out, what)
	}
	return nil
}

// createLog makes out and, at its top, the session's log (name), which
// gets its runs' full progress.
func createLog(out, name string) (*os.File, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", out, err)
	}
	return os.Create(filepath.Join(out, name))
}

// answer ends a session: its record rec written to path, its tables
// rendered to stdout in c's format, and stderr told where the record is
// ("what: path"; not under --quiet, which leaves it out with the
// progress). It returns err, else the first error of these.
func answer(err error, path string, rec any, tables []*table.Table, c *capture.Config, stdout, stderr io.Writer, what string) error {
	err = cmp.Or(err, bundle.WriteJSON(path, rec))
	err = cmp.Or(err, table.Render(stdout, c.Format, tables...))
	if !c.Quiet {
		fmt.Fprintf(stderr, "%s: %s\n", what, path)
	}
	return err
}
