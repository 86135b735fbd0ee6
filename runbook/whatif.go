package runbook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
)

// What-if (asrprof what-if, docs/CAPACITY.md): the diagnosis's advice
// tested by acting on it. The advice is a table named "advice" that an
// analysis of a bundle emits, one row per level and verdict; what-if
// turns its knob into a server flag, reruns the bundle's capture at that
// level with the server as it was (side A) and as changed (side B), and
// sets the prediction beside what B measured.

// ErrNoAdvice: the analysis of a bundle emitted no advice table.
var ErrNoAdvice = errors.New("no advice table")

// ErrBadAdvice wraps errors in an advice table's rows.
var ErrBadAdvice = errors.New("bad advice table")

// WhatIfLog is the file at the top of what-if's --out that gets the runs'
// full progress; stderr gets a few lines a round.
const WhatIfLog = "whatif.log"

// Knob names, as the advice table's knob column spells them.
const (
	KnobMaxRunning   = "max_running"
	KnobBuildWorkers = "build_workers"
	KnobPrefillBatch = "prefill_batch"
	KnobHostWork     = "host_work"
	KnobCUDAGraphs   = "cuda_graphs"
)

// KnobKind is how a knob's new value becomes a flag.
type KnobKind string

const (
	// KnobValue: the flag takes the advice's to value.
	KnobValue KnobKind = "value"
	// KnobSwitch: the flag is there (to ≠ 0) or not (to = 0).
	KnobSwitch KnobKind = "switch"
	// KnobScaled: the flag's value is multiplied by to / from.
	KnobScaled KnobKind = "scaled"
)

// Knob is one knob and the reference server's flag for it.
type Knob struct {
	Name string
	Kind KnobKind
	// Flag is refserver/refserver.py's flag; Default its value where the
	// command does not give it (refserver's argparse default; a test
	// checks them against refserver.py).
	Flag    string
	Default string
}

// Knobs are the knobs an advice table may name, with the reference
// server's flags.
func Knobs() []Knob {
	return []Knob{
		{KnobMaxRunning, KnobValue, "--max-running-requests", "8"},
		{KnobBuildWorkers, KnobValue, "--build-workers", "2"},
		{KnobPrefillBatch, KnobScaled, "--prefill-batch", "1"},
		{KnobHostWork, KnobScaled, "--host-step-ms", "0.0"},
		{KnobCUDAGraphs, KnobSwitch, "--cuda-graphs", ""},
	}
}

func knobNamed(name string) (Knob, bool) {
	for _, k := range Knobs() {
		if k.Name == name {
			return k, true
		}
	}
	return Knob{}, false
}

func knobNames() string {
	var n []string
	for _, k := range Knobs() {
		n = append(n, k.Name)
	}
	return strings.Join(n, ", ")
}

// ParseKnobFlag reads one --knob NAME=FLAG: the knob (one of Knobs) and
// its server's flag (starting with -).
func ParseKnobFlag(s string) (name, flag string, err error) {
	name, flag, ok := strings.Cut(s, "=")
	name, flag = strings.TrimSpace(name), strings.TrimSpace(flag)
	if !ok || name == "" || flag == "" {
		return "", "", fmt.Errorf("%w: --knob %q: want NAME=FLAG, e.g. max_running=--max-running-requests", ErrBadPlan, s)
	}
	if _, ok := knobNamed(name); !ok {
		return "", "", fmt.Errorf("%w: --knob %q: unknown knob %q (want %s)", ErrBadPlan, s, name, knobNames())
	}
	if !strings.HasPrefix(flag, "-") || strings.ContainsAny(flag, " =") {
		return "", "", fmt.Errorf("%w: --knob %q: the flag %q must start with - and hold no blank or =", ErrBadPlan, s, flag)
	}
	return name, flag, nil
}

// adviceMetrics maps the advice's metric names onto runbook's metrics
// (Metrics) and the factor from runbook's unit to the advice's.
var adviceMetrics = map[string]struct {
	key   string
	scale float64
	label string
}{
	"requests_per_s":  {"requests_per_s", 1, "req/s"},
	"latency_mean_ms": {"latency_mean_s", 1000, "latency mean (ms)"},
	"latency_p95_ms":  {"latency_p95_s", 1000, "latency p95 (ms)"},
}

// ParseAdvice reads the advice table t (where is its source, for errors)
// as bundle.WhatIfAdvice rows (table.Decode, by their col tags). A missing
// column, a cell of the wrong type, a knob outside Knobs or a metric
// outside requests_per_s, latency_mean_ms and latency_p95_ms is an error
// naming the row (1-based) and the column.
func ParseAdvice(t *table.Table, where string) ([]bundle.WhatIfAdvice, error) {
	if t.Values == nil && len(t.Rows) > 0 {
		return nil, fmt.Errorf("%w: %s: the table has no typed cells", ErrBadAdvice, where)
	}
	out, err := table.Decode[bundle.WhatIfAdvice](t)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadAdvice, where, err)
	}
	for i, a := range out {
		if a.Level == "" {
			return nil, fmt.Errorf("%w: %s row %d: the level is empty", ErrBadAdvice, where, i+1)
		}
		if a.Knob != "" {
			if _, ok := knobNamed(a.Knob); !ok {
				return nil, fmt.Errorf("%w: %s row %d (%s), column knob: unknown knob %q (want %s, or empty)", ErrBadAdvice, where, i+1, a.Level, a.Knob, knobNames())
			}
			if _, ok := adviceMetrics[a.Metric]; !ok {
				return nil, fmt.Errorf("%w: %s row %d (%s), column metric: %q is not requests_per_s, latency_mean_ms or latency_p95_ms", ErrBadAdvice, where, i+1, a.Level, a.Metric)
			}
		}
	}
	return out, nil
}

// levelOrder sorts level names by load: concurrency, then rate; names
// that are neither sort first.
func levelOrder(name string) float64 {
	c, r, ok := model.ParseLevel(name)
	switch {
	case !ok:
		return -1
	case c > 0:
		return float64(c)
	}
	return 1e6 + r
}

// PickAdvice is the row what-if acts on: at level (""): the highest level
// with a knob), the first row with a knob. knob is false when the level's
// verdicts suggest none; the row returned is then its first.
func PickAdvice(rows []bundle.WhatIfAdvice, level string) (a bundle.WhatIfAdvice, knob bool, err error) {
	if len(rows) == 0 {
		return bundle.WhatIfAdvice{}, false, fmt.Errorf("%w: the advice table has no rows", ErrNoAdvice)
	}
	if level == "" {
		best := -1
		for i, r := range rows {
			if r.Knob != "" && (best < 0 || levelOrder(r.Level) > levelOrder(rows[best].Level)) {
				best = i
			}
		}
		if best < 0 {
			return rows[0], false, nil
		}
		return rows[best], true, nil
	}
	if i := slices.IndexFunc(rows, func(r bundle.WhatIfAdvice) bool { return r.Level == level && r.Knob != "" }); i >= 0 {
		return rows[i], true, nil
	}
	if i := slices.IndexFunc(rows, func(r bundle.WhatIfAdvice) bool { return r.Level == level }); i >= 0 {
		return rows[i], false, nil
	}
	var levels []string
	for _, r := range rows {
		if !slices.Contains(levels, r.Level) {
			levels = append(levels, r.Level)
		}
	}
	return bundle.WhatIfAdvice{}, false, fmt.Errorf("%w: --level %s: the advice has no row for it (its levels: %s)", ErrBadPlan, level, strings.Join(levels, ", "))
}

// EditCommand applies advice a to the server command argv: the knob's flag
// from flags (--knob), else the reference server's, which is taken only
// where the command runs refserver/refserver.py or already has that flag.
// A value knob's flag gets a.To; a switch is there when a.To ≠ 0; a
// scaled knob's value (the command's, else refserver's default) is
// multiplied by a.To / a.From. The flag's value is replaced where the
// command has it (--flag V or --flag=V), else appended.
func EditCommand(argv []string, a bundle.WhatIfAdvice, flags map[string]string) (bundle.WhatIfEdit, error) {
	k, ok := knobNamed(a.Knob)
	if !ok {
		return bundle.WhatIfEdit{}, fmt.Errorf("%w: unknown knob %q (want %s)", ErrBadPlan, a.Knob, knobNames())
	}
	e := bundle.WhatIfEdit{Knob: k.Name, Flag: k.Flag, Kind: string(k.Kind)}
	user := false
	if f, ok := flags[k.Name]; ok {
		e.Flag, user = f, true
	}
	at, val, eq := findFlag(argv, e.Flag)
	if !user && at < 0 && !slices.ContainsFunc(argv, func(w string) bool { return filepath.Base(w) == "refserver.py" }) {
		return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s: the server command has no %s and does not run refserver/refserver.py, whose flag that is; name your server's flag with --knob %s=--its-flag",
			ErrBadPlan, k.Name, k.Flag, k.Name)
	}
	if a.To == nil {
		return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s at %s: the advice gives no to value", ErrBadAdvice, k.Name, a.Level)
	}
	out := slices.Clone(argv)
	switch k.Kind {
	case KnobSwitch:
		e.Old, e.New = onOff(at >= 0), onOff(*a.To != 0)
		switch {
		case at >= 0 && *a.To == 0:
			out = slices.Delete(out, at, at+1)
			e.Where = "removed"
		case at < 0 && *a.To != 0:
			out = append(out, e.Flag)
			e.Where = "appended"
		default:
			e.Where = "unchanged"
		}
		e.Argv = out
		return e, nil
	case KnobScaled:
		cur := val
		if at < 0 {
			if user {
				return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s is scaled from the command's %s, which the command does not give", ErrBadPlan, k.Name, e.Flag)
			}
			cur = k.Default
		}
		x, err := strconv.ParseFloat(cur, 64)
		if err != nil {
			return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s: %s %q is not a number to scale", ErrBadPlan, k.Name, e.Flag, cur)
		}
		if a.From == nil || *a.From == 0 {
			return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s at %s: a scaled knob needs a from value other than 0 (to / from scales %s)", ErrBadAdvice, k.Name, a.Level, e.Flag)
		}
		if x == 0 {
			return bundle.WhatIfEdit{}, fmt.Errorf("%w: knob %s: %s is 0 in the command (or by default): scaling it by %g leaves it 0", ErrBadPlan, k.Name, e.Flag, *a.To / *a.From)
		}
		e.Old, e.New = cur, formatValue(x**a.To / *a.From)
	default:
		e.Old, e.New = val, formatValue(*a.To)
	}
	e.Where = "replaced"
	switch {
	case at >= 0 && eq:
		out[at] = e.Flag + "=" + e.New
	case at >= 0 && at+1 < len(out):
		out[at+1] = e.New
	case at >= 0:
		out = append(out, e.New)
	default:
		out = append(out, e.Flag, e.New)
		e.Where = "appended"
	}
	e.Argv = out
	return e, nil
}

// findFlag finds flag in argv (as "--flag V" or "--flag=V"; the last one
// counts, as argparse and Go's flag take it): its index, value and form.
func findFlag(argv []string, flag string) (at int, val string, eq bool) {
	at = -1
	for i, w := range argv {
		switch {
		case w == flag:
			at, eq, val = i, false, ""
			if i+1 < len(argv) {
				val = argv[i+1]
			}
		case strings.HasPrefix(w, flag+"="):
			at, eq, val = i, true, w[len(flag)+1:]
		}
	}
	return at, val, eq
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func formatValue(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatInt(int64(x), 10)
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}

// JoinCommand writes argv as one command line that SplitCommand reads
// back: words with blanks or shell characters single-quoted.
func JoinCommand(argv []string) string {
	out := make([]string, len(argv))
	for i, w := range argv {
		if w == "" || strings.ContainsAny(w, " \t\n'\"\\|&;<>()$`*?[]#~") {
			w = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		out[i] = w
	}
	return strings.Join(out, " ")
}

// RerunConfig is the capture of the bundle in dir again, at level only:
// its manifest's recorded configuration (capture.ConfigFromRecord) with
// one level, its own output (out, overwrite, format), the headers of out
// (a manifest records none) and no pid, raw directory or proxy. A proxy or probes-only capture cannot be rerun.
func RerunConfig(dir, level string, out capture.Config) (capture.Config, error) {
	b, err := bundle.Open(dir)
	if err != nil {
		return capture.Config{}, fmt.Errorf("%w: %v", capture.ErrBadInput, err)
	}
	c, err := capture.ConfigFromRecord(b.Manifest.Config)
	if err != nil {
		return capture.Config{}, fmt.Errorf("%w: %s: %v", capture.ErrBadInput, b.Path(bundle.ManifestFile), err)
	}
	if c.Proxy != "" || c.ProbesOnly {
		return capture.Config{}, fmt.Errorf("%w: %s is a proxy or probes-only capture: asrprof drove no load to repeat", capture.ErrBadInput, dir)
	}
	lvs := c.Levels()
	i := slices.IndexFunc(lvs, func(lv capture.SweepPoint) bool { return lv.Name == level })
	if i < 0 {
		var names []string
		for _, lv := range lvs {
			names = append(names, lv.Name)
		}
		return capture.Config{}, fmt.Errorf("%w: level %s is not one of %s's levels (%s)", ErrBadPlan, level, dir, strings.Join(names, ", "))
	}
	c.Concurrency, c.Rates = nil, nil
	switch lv := lvs[i]; {
	case lv.Concurrency > 0:
		c.Concurrency = []int{lv.Concurrency}
	case lv.Rate > 0:
		c.Rates = []float64{lv.Rate}
	default:
		return capture.Config{}, fmt.Errorf("%w: level %s of %s is a replay: what-if reruns closed- and open-loop levels", ErrBadPlan, level, dir)
	}
	c.Search = nil
	c.PID, c.SaveRawDir = 0, ""
	c.Out, c.Overwrite, c.Format, c.Quiet = out.Out, out.Overwrite, cmp.Or(out.Format, "text"), out.Quiet
	c.Headers = out.Headers
	if _, err := os.Stat(c.Dataset); err != nil {
		return capture.Config{}, fmt.Errorf("%w: the dataset %s's manifest records: %v (what-if runs from the directory the capture ran in, or with an absolute --dataset there)", capture.ErrBadInput, dir, err)
	}
	return c, nil
}

// WhatIfConfig is an `asrprof what-if` session.
type WhatIfConfig struct {
	// Runbook's Capture holds only the output: Out (the what-if's
	// directory), Overwrite, Format; the rest comes from the bundle.
	// Its Lifecycle, Finish and the rest are each run's.
	Runbook Config
	Bundle  string    // the bundle whose advice is tested
	Server  ServerCmd // the server as the bundle measured it
	Level   string    // "": the highest level with a knob
	Knobs   map[string]string
	Rounds  int    // ≥ 1
	Order   string // each round's runs, as ab's --order ("": DefaultOrder)
	Warm    bool   // an unscored warm run of each side first
	DryRun  bool
	// Advice reads the advice table of the bundle in dir (asrprof: the
	// bottleneck analysis, or --advice SCRIPT); ErrNoAdvice when the
	// analysis emitted none.
	Advice func(ctx context.Context, dir string) (*table.Table, error)
}

// WhatIf tests the advice: each round reads the advice of the last bundle
// (round 1: the given one; then the last B run of the round before) at
// the level, edits the server command by its knob, and runs the round's
// runbook (a fresh server a run, the order's A and B runs, Run); the
// rounds stop at wc.Rounds or where the verdict suggests no knob. stdout
// gets the what-if table in the --format, stderr a few lines a round (the
// runs' progress goes to whatif.log), and whatif.json the rounds.
func WhatIf(ctx context.Context, wc WhatIfConfig, stdout, stderr io.Writer) (*bundle.WhatIfReport, error) {
	if wc.Rounds < 1 {
		return nil, fmt.Errorf("%w: --rounds %d: want 1 or more", capture.ErrInvalidConfig, wc.Rounds)
	}
	if len(wc.Server.Argv) == 0 {
		return nil, fmt.Errorf("%w: what-if needs the server's command (--server-cmd): it starts the server as it is and as changed", ErrBadCommand)
	}
	wc.Order = cmp.Or(wc.Order, DefaultOrder)
	out := wc.Runbook.Capture.Out
	// A dry run writes nothing: it may name a what-if's directory.
	if err := checkOut(out, bundle.WhatIfFile, "what-if", wc.Runbook.Capture.Overwrite || wc.DryRun); err != nil {
		return nil, err
	}
	var knobs []string // --knob's, for the record
	for k, v := range wc.Knobs {
		knobs = append(knobs, k+"="+v)
	}
	slices.Sort(knobs)
	rep := &bundle.WhatIfReport{Schema: Schema, Bundle: wc.Bundle, Knobs: knobs, Rounds: []bundle.WhatIfRound{}}
	src, cur, level := wc.Bundle, wc.Server, wc.Level
	var logf *os.File               // whatif.log, made when the first round runs
	defer func() { logf.Close() }() // nil: no log (Close answers os.ErrInvalid)
	var runErr error
	// nothing ends the rounds where round r's advice leaves nothing to
	// try: an error in round 1, after it the reason they stopped.
	nothing := func(r int, why string) {
		if r == 1 {
			runErr = fmt.Errorf("%w: nothing to try: %s", ErrBadPlan, why)
		} else {
			rep.Stopped = "round " + strconv.Itoa(r) + ": " + why
		}
	}
	for r := 1; r <= wc.Rounds; r++ {
		t, err := wc.Advice(ctx, src)
		if err != nil {
			runErr = fmt.Errorf("round %d: the advice of %s: %w", r, src, err)
			break
		}
		rows, err := ParseAdvice(t, src+"'s advice")
		if err != nil {
			runErr = fmt.Errorf("round %d: %w", r, err)
			break
		}
		a, knob, err := PickAdvice(rows, level)
		if err != nil {
			runErr = fmt.Errorf("round %d: %w", r, err)
			break
		}
		if !knob {
			why := fmt.Sprintf("%s's verdict at %s (%s) suggests no knob", src, model.LevelLabel(a.Level), orNone(a.Cause))
			if level == "" {
				why = src + "'s advice suggests no knob at any level (--advice SCRIPT gives advice of your own)"
			}
			nothing(r, why)
			break
		}
		level = a.Level
		rep.Level = level
		edit, err := EditCommand(cur.Argv, a, wc.Knobs)
		if err != nil {
			runErr = fmt.Errorf("round %d: %w", r, err)
			break
		}
		if edit.Where == "unchanged" {
			nothing(r, fmt.Sprintf("%s's verdict at %s (%s) asks for %s, which the server command already has", src, model.LevelLabel(a.Level), orNone(a.Cause), editText(edit)))
			break
		}
		next := ServerCmd{Command: JoinCommand(edit.Argv), Argv: edit.Argv}
		capOut := wc.Runbook.Capture
		capOut.Out = filepath.Join(out, fmt.Sprintf("round-%d", r))
		capCfg, err := RerunConfig(wc.Bundle, level, capOut)
		if err != nil {
			runErr = err
			break
		}
		if rep.Capture == nil {
			if rep.Capture, err = capCfg.Record(); err != nil {
				runErr = err
				break
			}
		}
		plan, err := ABPlan(wc.Order, wc.Warm, cur, next)
		if err != nil {
			runErr = err
			break
		}
		rd := bundle.WhatIfRound{Round: r, From: src, Advice: a, Edit: edit, CommandA: cur.Shown().Command, CommandB: next.Shown().Command, Runbook: capOut.Out}
		rd.Edit.Argv = secret.Args(edit.Argv)
		if wc.DryRun {
			dryRun(stdout, rd, capCfg, plan, wc)
			if wc.Rounds > 1 {
				fmt.Fprintf(stdout, "rounds 2 to %d: each from the advice of the round before's last B run; a dry run cannot know them\n", wc.Rounds)
			}
			return rep, nil
		}
		if logf == nil {
			if logf, err = createLog(out, WhatIfLog); err != nil {
				return nil, err
			}
		}
		var dirs []string
		for _, p := range plan {
			dirs = append(dirs, p.Dir)
		}
		fmt.Fprintf(stderr, "what-if round %d at %s: %s: %s (%s); %d runs (%s), a fresh server each; their progress: %s\n",
			r, level, orNone(a.Cause), editText(edit), orNone(a.Change), len(plan), strings.Join(dirs, " "), filepath.Join(out, WhatIfLog))
		rc := wc.Runbook
		rc.Capture, rc.Plan = capCfg, plan
		rb, err := Run(ctx, rc, logf, logf)
		if rb != nil {
			measure(&rd, rb, a)
		}
		if err != nil {
			rd.Error = err.Error()
		}
		rep.Rounds = append(rep.Rounds, rd)
		fmt.Fprintln(stderr, roundLine(rd))
		if err != nil {
			runErr = fmt.Errorf("round %d: %w", r, err)
			break
		}
		if r == wc.Rounds {
			rep.Stopped = fmt.Sprintf("--rounds %d done", wc.Rounds)
			break
		}
		if why := worse(rd); why != "" {
			// The next round would start from the changed command: a
			// sequence that got worse would only build on the loss.
			rep.Stopped = fmt.Sprintf("round %d: %s; the next round would start from it", r, why)
			break
		}
		for _, p := range plan {
			if p.Side == "B" && p.Scored {
				src = filepath.Join(capOut.Out, p.Dir) // the last B run
			}
		}
		cur = next
	}
	if runErr != nil {
		rep.Stopped = "error: " + firstLine(runErr.Error())
		if len(rep.Rounds) == 0 && logf == nil {
			return rep, runErr // nothing ran: no whatif.json
		}
	}
	runErr = cmp.Or(runErr, os.MkdirAll(out, 0o755))
	return rep, answer(runErr, filepath.Join(out, bundle.WhatIfFile), rep, []*table.Table{WhatIfTable(rep)}, &wc.Runbook.Capture, stdout, stderr, "what-if")
}

func editText(e bundle.WhatIfEdit) string {
	if e.Kind != string(KnobSwitch) && e.Old == "" {
		return fmt.Sprintf("%s (not in the command) → %s", e.Flag, e.New)
	}
	return fmt.Sprintf("%s %s → %s", e.Flag, e.Old, e.New)
}

// measure fills the round's before and after from the runbook's A/B
// comparison (Compare: one comparison path with asrprof ab).
func measure(rd *bundle.WhatIfRound, rb *Report, a bundle.WhatIfAdvice) {
	rd.Complete = rb.Verdict.Complete
	m := adviceMetrics[a.Metric]
	for _, c := range rb.Compare {
		if c.Level != a.Level || c.Metric != m.key {
			continue
		}
		rd.Before, rd.After = new(c.MeanA*m.scale), new(c.MeanB*m.scale)
		for _, x := range c.A {
			rd.BeforeN = append(rd.BeforeN, x*m.scale)
		}
		for _, x := range c.B {
			rd.AfterN = append(rd.AfterN, x*m.scale)
		}
		rd.P, rd.Delta = new(c.P), c.Delta()
		// The ratio within this experiment, not after against the
		// bundle's old value: side A drifts between runs and days.
		if j, ok := JudgeRatio(a, rd.BeforeN, rd.AfterN); ok {
			rd.Judgement = &j
			rd.Inside, rd.ErrorPct = new(j.Inside), new(j.ErrorPct)
		}
	}
}

// JudgeRatio sets the measured ratio of the runs b over the runs a against the
// advice's prediction. ok is false where the advice has no prediction, no
// interval or no now to make a ratio of, or a side has no runs.
func JudgeRatio(adv bundle.WhatIfAdvice, a, b []float64) (j bundle.WhatIfJudgement, ok bool) {
	if adv.Predicted == nil || adv.Lo == nil || adv.Hi == nil || adv.Now == nil || *adv.Now == 0 || len(a) == 0 || len(b) == 0 {
		return bundle.WhatIfJudgement{}, false
	}
	ma, mb := stats.Mean(a), stats.Mean(b)
	if ma == 0 {
		return bundle.WhatIfJudgement{}, false
	}
	now := *adv.Now
	j = bundle.WhatIfJudgement{PredictedRatio: *adv.Predicted / now, Lo: *adv.Lo / now, Hi: *adv.Hi / now, MeasuredRatio: mb / ma}
	if j.Lo > j.Hi {
		j.Lo, j.Hi = j.Hi, j.Lo
	}
	j.JudgedLo, j.JudgedHi = j.Lo, j.Hi
	if s, ok := summary.AASpread(a); ok { // the one A/A rule (ab's too)
		j.AASpread = &s
		j.JudgedLo = min(j.JudgedLo, j.PredictedRatio*(1-s))
		j.JudgedHi = max(j.JudgedHi, j.PredictedRatio*(1+s))
	}
	j.Inside = j.MeasuredRatio >= j.JudgedLo && j.MeasuredRatio <= j.JudgedHi
	if j.PredictedRatio != 0 {
		j.ErrorPct = (j.MeasuredRatio - j.PredictedRatio) / j.PredictedRatio * 100
	}
	return j, true
}

// worse says how the round's change made its metric worse (req/s fell,
// or the latency rose), or "" where it did not or was not measured. Any
// step the wrong way counts: with one run a side a small one may be noise
// (rerun with more runs, --order ABBA), but no round builds on it.
func worse(rd bundle.WhatIfRound) string {
	if rd.Before == nil || rd.After == nil {
		return ""
	}
	label := adviceMetrics[rd.Advice.Metric].label
	higherBetter := rd.Advice.Metric == "requests_per_s"
	if (higherBetter && *rd.After < *rd.Before) || (!higherBetter && *rd.After > *rd.Before) {
		return fmt.Sprintf("the change made %s worse (before %s, after %s)", label, table.Format(*rd.Before), table.Format(*rd.After))
	}
	return ""
}

func roundLine(rd bundle.WhatIfRound) string {
	a := rd.Advice
	s := fmt.Sprintf("what-if round %d: %s", rd.Round, adviceMetrics[a.Metric].label)
	if rd.Before == nil || rd.After == nil {
		s += ": not measured"
	} else {
		s += fmt.Sprintf(" before %s, after %s", table.Format(*rd.Before), table.Format(*rd.After))
		if a.Predicted != nil {
			s += ", predicted " + predictedText(a)
		}
		if j := rd.Judgement; j != nil {
			s += fmt.Sprintf("; B/A %s against %s [%s–%s]; %s (%+.1f %%)", table.Format(j.MeasuredRatio), table.Format(j.PredictedRatio),
				table.Format(j.JudgedLo), table.Format(j.JudgedHi), map[bool]string{true: "inside", false: "outside"}[j.Inside], j.ErrorPct)
		}
	}
	if rd.Error != "" {
		s += "; " + firstLine(rd.Error)
	}
	return s
}

func predictedText(a bundle.WhatIfAdvice) string {
	if a.Predicted == nil {
		return "-"
	}
	s := table.Format(*a.Predicted)
	if a.Lo != nil && a.Hi != nil {
		s += " [" + table.Format(*a.Lo) + "–" + table.Format(*a.Hi) + "]"
	}
	return s
}

// WhatIfTable is what-if's answer: a row a round, the prediction beside
// what the changed server measured.
func WhatIfTable(rep *bundle.WhatIfReport) *table.Table {
	t := &table.Table{
		Name:  "whatif",
		Title: "What-if: the advice acted on; predicted [interval] beside the server as it was (before) and as changed (after), rerun now",
		Columns: []string{"round", "level", "verdict", "change", "metric", "predicted [lo–hi]", "before", "after",
			"predicted B/A [judged lo–hi]", "measured B/A", "A/A spread", "measured in interval", "error"},
	}
	for _, rd := range rep.Rounds {
		a := rd.Advice
		change := editText(rd.Edit)
		if a.Change != "" {
			change = a.Change + " (" + change + ")"
		}
		var ratio, measured, aa, errPct any = "-", nil, nil, nil
		in := "-"
		if j := rd.Judgement; j != nil {
			ratio = fmt.Sprintf("%s [%s–%s]", table.Format(j.PredictedRatio), table.Format(j.JudgedLo), table.Format(j.JudgedHi))
			measured = j.MeasuredRatio
			errPct = fmt.Sprintf("%+.1f %%", j.ErrorPct)
			in = map[bool]string{true: "yes", false: "no"}[j.Inside]
			if j.AASpread != nil {
				aa = fmt.Sprintf("%.1f %%", 100**j.AASpread)
			}
		}
		t.AddRow(rd.Round, model.LevelLabel(a.Level), orNone(a.Cause), change, adviceMetrics[a.Metric].label, predictedText(a), ptrCell(rd.Before), ptrCell(rd.After), ratio, measured, aa, in, errPct)
		if j := rd.Judgement; j != nil {
			n := fmt.Sprintf("round %d: judged on the ratio B/A within this experiment (%d A and %d B runs, interleaved): measured %s against predicted %s [%s–%s]",
				rd.Round, len(rd.BeforeN), len(rd.AfterN), table.Format(j.MeasuredRatio), table.Format(j.PredictedRatio), table.Format(j.Lo), table.Format(j.Hi))
			if a.Coverage != nil {
				n += fmt.Sprintf(" (its interval claims %.0f %%)", 100**a.Coverage)
			}
			if j.AASpread != nil {
				n += fmt.Sprintf(", widened to the A/A spread %.1f %% where it is narrower", 100**j.AASpread)
			} else {
				n += "; one A run: the A/A spread is not measured and sets no floor (--order ABA measures it)"
			}
			t.Notes = append(t.Notes, n)
		}
		if a.Predicted == nil && a.Basis != "" {
			t.Notes = append(t.Notes, fmt.Sprintf("round %d: no prediction: %s", rd.Round, a.Basis))
		}
		if a.Now != nil {
			t.Notes = append(t.Notes, fmt.Sprintf("round %d: the advice's bundle measured %s (%s); before is side A, the same command rerun now", rd.Round, table.Format(*a.Now), rd.From))
		}
		if rd.P != nil {
			t.Notes = append(t.Notes, fmt.Sprintf("round %d: before %v, after %v over the runs: %s (Mann-Whitney U p = %.3g)", rd.Round, fmtList(rd.BeforeN), fmtList(rd.AfterN), rd.Delta, *rd.P))
			if n := summary.PowerNote([]summary.Comparison{{A: rd.BeforeN, B: rd.AfterN}}, summary.DefaultAlpha, "runs"); n != "" {
				t.Notes = append(t.Notes, fmt.Sprintf("round %d: %s", rd.Round, n))
			}
		}
		if !rd.Complete {
			t.Notes = append(t.Notes, fmt.Sprintf("round %d: INCOMPLETE: a run lacks coverage (%s)", rd.Round, filepath.Join(rd.Runbook, File)))
		}
	}
	if rep.Stopped != "" {
		t.Notes = append(t.Notes, "stopped: "+rep.Stopped)
	}
	return t
}

func fmtList(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = table.Format(x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// dryRun prints what round 1 would run.
func dryRun(w io.Writer, rd bundle.WhatIfRound, c capture.Config, plan []RunSpec, wc WhatIfConfig) {
	a := rd.Advice
	fmt.Fprintf(w, "what-if %s at %s: %s: %s\n", wc.Bundle, model.LevelLabel(a.Level), orNone(a.Cause), orNone(a.Change))
	fmt.Fprintf(w, "knob %s: %s (%s)\n", a.Knob, editText(rd.Edit), rd.Edit.Where)
	if a.Predicted != nil {
		fmt.Fprintf(w, "predicted %s: %s\n", a.Metric, predictedText(a))
	}
	fmt.Fprintf(w, "each run: a fresh server, then a capture of %s at %s, %d repeats, into %s/<run>/\n", c.Dataset, model.LevelLabel(a.Level), c.Repeats, c.Out)
	for _, p := range plan {
		scored := ""
		if !p.Scored {
			scored = " (warm, not scored)"
		}
		fmt.Fprintf(w, "  %s%s: %s\n", p.Dir, scored, p.Server.Shown().Command)
	}
}
