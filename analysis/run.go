package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/asrprof/asrprof/option"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.starlark.net/lib/json"
	sltime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"go.starlark.net/syntax"

	"github.com/asrprof/asrprof/scripts"
	"github.com/asrprof/asrprof/table"
)

// DefaultMaxSteps bounds a script's Starlark execution steps when
// Options.MaxSteps is zero (a 100,000-request stage table takes ~10⁸).
const DefaultMaxSteps = 1 << 33

// Presets are the values of Options.Stages.
var Presets = []string{"auto", "refserver", "vllm", "sglang_omni_events"}

// Options configure a Session.
type Options struct {
	// Stages names the stage preset ("auto" or one of Presets); it is
	// options["stages"] in scripts.
	Stages string
	// Timeout bounds each script's run; 0 means only ctx bounds it.
	Timeout time.Duration
	// MaxSteps bounds each Starlark thread; 0 means DefaultMaxSteps.
	MaxSteps uint64
	// Baseline is the `baseline` capture (compare.star); nil gives None.
	Baseline *Capture
	// LengthBuckets groups the requests by audio length for the buckets
	// analysis; it is options["length_buckets"] ("auto" for the zero value).
	LengthBuckets LengthBuckets
	// MetricsMap is the path of a metrics map file for the server's own
	// /metrics (docs/ANALYSIS.md, "The server's own /metrics"), tried
	// before the built-in one; it is options["metrics_map"] ("" for the
	// built-in map alone).
	MetricsMap string
	// Params add to or override entries of the `options` dict
	// (alpha, knee_threshold, top...). Values are Go scalars.
	Params map[string]any
	// Print receives print() output; nil discards it.
	Print io.Writer
	// Modules adds modules for load() (tests add "assert").
	Modules map[string]starlark.StringDict
	// Setup, when set, is called on every new thread (tests install a
	// reporter).
	Setup func(*starlark.Thread)
}

// Session runs scripts against one capture. Modules that scripts load are
// executed once per session and shared, frozen, between its scripts.
// Scripts may run concurrently (RunScripts does): a script that loads a
// module another is still executing waits for it.
type Session struct {
	c    *Capture
	opts Options

	mu      sync.Mutex // guards modules and every runState.waiting
	modules map[string]*module
	printMu sync.Mutex
}

type module struct {
	done    chan struct{} // closed when globals and err are set
	owner   *runState     // the run executing it, until done
	globals starlark.StringDict
	err     error
}

// NewSession returns a session for c.
func NewSession(c *Capture, opts Options) *Session {
	opts.Stages = cmp.Or(opts.Stages, "auto")
	opts.MaxSteps = cmp.Or(opts.MaxSteps, DefaultMaxSteps)
	return &Session{c: c, opts: opts, modules: map[string]*module{}}
}

// ScriptError is a script's failure, with its Starlark backtrace.
type ScriptError struct {
	Script string
	Err    error
}

func (e *ScriptError) Error() string {
	var ee *starlark.EvalError
	if errors.As(e.Err, &ee) {
		return fmt.Sprintf("script %s failed:\n%s", e.Script, strings.TrimRight(ee.Backtrace(), "\n"))
	}
	return fmt.Sprintf("script %s: %v", e.Script, e.Err)
}

func (e *ScriptError) Unwrap() error { return e.Err }

// origin says where a file came from, for resolving its load()s: the
// embedded scripts, or a directory on disk (a user's script).
type origin struct {
	dir string // "" for embedded
}

// runState is one Run's: its tables, threads and cancellation.
type runState struct {
	ctx    context.Context
	reason func() string

	mu      sync.Mutex
	threads []*starlark.Thread
	tables  []*table.Table

	waiting *module // the module this run waits for another run to load (Session.mu)
}

const (
	localRun    = "asrprof.run"
	localOrigin = "asrprof.origin"
)

// Run runs one script: a built-in name ("sweep", "stages/vllm.star") or the
// path of a .star file, and returns the tables it emitted.
func (s *Session) Run(ctx context.Context, script string) ([]*table.Table, error) {
	src, filename, org, err := resolve(script)
	if err != nil {
		return nil, err
	}
	timeout := s.opts.Timeout
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rs := &runState{ctx: ctx}
	rs.reason = func() string {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeout > 0 {
			return fmt.Sprintf("timed out after %v (raise --timeout)", timeout)
		}
		return fmt.Sprintf("stopped: %v", context.Cause(ctx))
	}
	defer context.AfterFunc(ctx, func() {
		rs.mu.Lock()
		for _, t := range rs.threads {
			t.Cancel(rs.reason())
		}
		rs.mu.Unlock()
	})()
	thread := s.newThread(rs, org, filename)
	_, err = starlark.ExecFileOptions(fileOptions, thread, filename, src, s.predeclared())
	// Tables the capture's Load or this script still write in the
	// background are on disk when Run returns. Not being able to write
	// them is no error of the script's (Tables.Wait says it).
	s.c.Tables.Wait()
	if err != nil {
		return rs.tables, &ScriptError{Script: script, Err: err}
	}
	return rs.tables, nil
}

var fileOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true}

func (s *Session) newThread(rs *runState, org origin, name string) *starlark.Thread {
	t := &starlark.Thread{Name: name, Load: s.load}
	t.Print = func(_ *starlark.Thread, msg string) {
		if s.opts.Print != nil {
			s.printMu.Lock()
			fmt.Fprintln(s.opts.Print, msg)
			s.printMu.Unlock()
		}
	}
	t.SetLocal(localRun, rs)
	t.SetLocal(localOrigin, org)
	t.SetMaxExecutionSteps(s.opts.MaxSteps)
	t.OnMaxSteps = func(t *starlark.Thread) {
		t.Cancel(fmt.Sprintf("exceeded %d execution steps", s.opts.MaxSteps))
	}
	if s.opts.Setup != nil {
		s.opts.Setup(t)
	}
	rs.mu.Lock()
	rs.threads = append(rs.threads, t)
	rs.mu.Unlock()
	if rs.ctx.Err() != nil {
		t.Cancel(rs.reason())
	}
	return t
}

func (s *Session) predeclared() starlark.StringDict {
	opts := starlark.NewDict(4)
	opts.SetKey(starlark.String("stages"), starlark.String(s.opts.Stages))
	opts.SetKey(starlark.String("alpha"), starlark.Float(0.05))
	opts.SetKey(starlark.String("knee_threshold"), starlark.Float(engine.KneeThreshold))
	opts.SetKey(starlark.String("top"), starlark.MakeInt(5))
	opts.SetKey(starlark.String("length_buckets"), starlark.String(s.opts.LengthBuckets.String()))
	opts.SetKey(starlark.String("metrics_map"), starlark.String(s.opts.MetricsMap))
	for _, k := range slices.Sorted(maps.Keys(s.opts.Params)) {
		opts.SetKey(starlark.String(k), toValue(s.opts.Params[k]))
	}
	opts.Freeze()
	return starlark.StringDict{
		"capture":  &captureValue{c: s.c},
		"baseline": noneUnless(s.opts.Baseline != nil, &captureValue{c: s.opts.Baseline}),
		"options":  opts,
		"emit":     starlark.NewBuiltin("emit", emit),
		"struct":   starlark.NewBuiltin("struct", starlarkstruct.Make),
	}
}

// emit(table, ...) hands tables back to the caller, in order.
func emit(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(kw) > 0 {
		return nil, fmt.Errorf("emit: unexpected keyword arguments")
	}
	rs := thread.Local(localRun).(*runState)
	for i, a := range args {
		t, ok := a.(*tableValue)
		if !ok {
			return nil, fmt.Errorf("emit: argument %d is %s, want a table (table.new)", i+1, a.Type())
		}
		t.Freeze()
		rs.mu.Lock()
		rs.tables = append(rs.tables, t.toTable())
		rs.mu.Unlock()
	}
	return starlark.None, nil
}

func builtinModules() map[string]*starlarkstruct.Module {
	return map[string]*starlarkstruct.Module{
		"stats":    statsModule(),
		"preset":   presetModule(),
		"evidence": evidenceModule(),
		"table":    tableModule(),
		"time":     sltime.Module,
		"json":     json.Module,
		"bundle":   bundleModule(), // bundlemod.go

		"attribution":   attributionModule(),   // attributionmod.go
		"blackbox":      blackboxModule(),      // blackboxmod.go
		"lengths":       lengthsModule(),       // lengthsmod.go
		"servermetrics": serverMetricsModule(), // servermetricsmod.go
		"validity":      validityModule(),      // validitymod.go
	}
}

// builtinFunc is a Starlark builtin's Go function.
type builtinFunc = func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error)

// oneString is a builtin of one positional string argument.
func oneString(f func(s string) (starlark.Value, error)) builtinFunc {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		var s string
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &s); err != nil {
			return nil, err
		}
		return f(s)
	}
}

// getFn is get(key, default = None): m's value at key as Starlark's, else
// default.
func getFn(m map[string]any) builtinFunc {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		var key string
		var def starlark.Value = starlark.None
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &key, &def); err != nil {
			return nil, err
		}
		if x, ok := m[key]; ok {
			return toValue(x), nil
		}
		return def, nil
	}
}

// newModule is module name of fns, each a builtin named prefix and its
// member's name ("evidence." + "occupancy"), and of the constants consts.
func newModule(name, prefix string, fns map[string]builtinFunc, consts starlark.StringDict) *starlarkstruct.Module {
	m := &starlarkstruct.Module{Name: name, Members: make(starlark.StringDict, len(fns)+len(consts))}
	maps.Copy(m.Members, consts)
	for k, f := range fns {
		m.Members[k] = starlark.NewBuiltin(prefix+k, f)
	}
	return m
}

// load implements load(): built-in modules by name, otherwise a .star file
// from the embedded scripts or, for a user's script, next to it.
func (s *Session) load(thread *starlark.Thread, name string) (starlark.StringDict, error) {
	if m, ok := s.opts.Modules[name]; ok {
		return m, nil
	}
	if m, ok := builtinModules()[name]; ok {
		d := starlark.StringDict{name: m}
		maps.Copy(d, m.Members)
		return d, nil
	}
	if !strings.HasSuffix(name, ".star") {
		return nil, fmt.Errorf("no module %q (built-in modules: stats, table, preset, time, json; scripts end in .star)", name)
	}
	org, _ := thread.Local(localOrigin).(origin)
	src, filename, child, err := resolveLoad(org, name)
	if err != nil {
		return nil, err
	}
	rs := thread.Local(localRun).(*runState)
	s.mu.Lock()
	if m, ok := s.modules[filename]; ok {
		select {
		case <-m.done:
			s.mu.Unlock()
			return m.globals, m.err
		default:
		}
		// Being loaded. By this run: a cycle. By another run: wait, unless
		// that run waits (perhaps through others) for this one, which is a
		// cycle between them.
		for o := m.owner; o != nil; {
			if o == rs {
				s.mu.Unlock()
				return nil, fmt.Errorf("cycle in load graph at %s", name)
			}
			if o.waiting == nil {
				break
			}
			o = o.waiting.owner
		}
		rs.waiting = m
		s.mu.Unlock()
		select {
		case <-m.done:
		case <-rs.ctx.Done():
		}
		s.mu.Lock()
		rs.waiting = nil
		s.mu.Unlock()
		select {
		case <-m.done:
		default:
			return nil, fmt.Errorf("loading %s: %s", name, rs.reason())
		}
		if m.err != nil {
			// The other run failed or was stopped: try it here, where the
			// error (if it is the script's own) gets this run's backtrace.
			return s.load(thread, name)
		}
		return m.globals, nil
	}
	m := &module{done: make(chan struct{}), owner: rs}
	s.modules[filename] = m
	s.mu.Unlock()
	t := s.newThread(rs, child, filename)
	g, err := starlark.ExecFileOptions(fileOptions, t, filename, src, s.predeclared())
	var ee *starlark.EvalError
	if errors.As(err, &ee) { // a script's own error: its backtrace
		err = errors.New(strings.TrimRight(ee.Backtrace(), "\n"))
	}
	g.Freeze()
	s.mu.Lock()
	m.globals, m.err, m.owner = g, err, nil
	if err != nil { // a failed (perhaps cancelled) load is retried by the next run
		delete(s.modules, filename)
	}
	close(m.done)
	s.mu.Unlock()
	return g, err
}

// embeddedName is how embedded files are named in backtraces.
func embeddedName(p string) string { return "scripts/" + p }

// resolve finds a script to run: a file on disk, or a built-in by name.
func resolve(script string) (src []byte, filename string, org origin, err error) {
	if strings.HasSuffix(script, ".star") || strings.ContainsRune(script, filepath.Separator) {
		if b, err := os.ReadFile(script); err == nil {
			abs, aerr := filepath.Abs(script)
			if aerr != nil {
				abs = script
			}
			return b, script, origin{dir: filepath.Dir(abs)}, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", origin{}, err
		}
	}
	p := Canonical(strings.TrimSuffix(script, ".star")) + ".star"
	b, err := fs.ReadFile(scripts.FS, p)
	if err != nil {
		return nil, "", origin{}, unknownScript(script)
	}
	return b, embeddedName(p), origin{}, nil
}

// ErrUnknownScript is the error of a name that is neither a file nor a
// built-in analysis (nor one of its Aliases): bad input, found by Check
// before anything runs.
var ErrUnknownScript = errors.New("unknown analysis")

// Aliases are other names of built-in analyses: the names their output
// goes by. The diagnosis and its advice are the tables of bottleneck
// (its verdict cites scripts/lib/diagnosis.star).
var Aliases = map[string]string{
	"diagnosis": "bottleneck",
	"advice":    "bottleneck",
}

// Canonical is the built-in that name (an alias or not) stands for.
func Canonical(name string) string { return cmp.Or(Aliases[name], name) }

// Check checks that every script in names resolves, a file or a built-in
// (by name or alias), without running any: the first that does not is an
// ErrUnknownScript that suggests the nearest built-in.
func Check(names []string) error {
	for _, n := range names {
		if _, _, _, err := resolve(n); err != nil {
			return err
		}
	}
	return nil
}

// Dedup is names with the aliases replaced by what they stand for, each
// analysis once, in the order first named.
func Dedup(names []string) []string {
	var out []string
	for _, n := range names {
		c := n
		if !strings.HasSuffix(n, ".star") && !strings.ContainsRune(n, filepath.Separator) {
			c = Canonical(n)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func unknownScript(script string) error {
	if strings.HasSuffix(script, ".star") && strings.ContainsRune(script, filepath.Separator) {
		return fmt.Errorf("%w %q: no such file", ErrUnknownScript, script)
	}
	names := append(Scripts(), slices.Sorted(maps.Keys(Aliases))...)
	if near := option.Nearest(strings.TrimSuffix(script, ".star"), names); near != "" {
		return fmt.Errorf("%w %q (did you mean %s?): not a file, and not a built-in; 'asrprof analyze --list' lists them", ErrUnknownScript, script, near)
	}
	return fmt.Errorf("%w %q: not a file, and not a built-in (%s)", ErrUnknownScript, script, strings.Join(Scripts(), ", "))
}

// resolveLoad finds the file that load(name) means in a file from org. A
// user's script may load files under its own directory (name relative, no
// ".."), which take precedence over the embedded scripts of the same name.
func resolveLoad(org origin, name string) (src []byte, filename string, child origin, err error) {
	clean := path.Clean(name)
	if path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(name, "/") {
		return nil, "", origin{}, fmt.Errorf("load(%q): only paths relative to the script, without \"..\"", name)
	}
	if org.dir != "" {
		p := filepath.Join(org.dir, filepath.FromSlash(clean))
		if b, err := os.ReadFile(p); err == nil {
			return b, p, origin{dir: filepath.Dir(p)}, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", origin{}, err
		}
	}
	b, err := fs.ReadFile(scripts.FS, clean)
	if err != nil {
		where := "the built-in scripts"
		if org.dir != "" {
			where = org.dir + " or " + where
		}
		return nil, "", origin{}, fmt.Errorf("load(%q): not found in %s", name, where)
	}
	return b, embeddedName(clean), origin{}, nil
}

// Scripts lists the built-in analyses by name (stage presets under stages/
// included; library modules under lib/ not).
func Scripts() []string {
	var out []string
	fs.WalkDir(scripts.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".star") || strings.HasPrefix(p, "lib/") || strings.HasSuffix(p, "_test.star") {
			return nil
		}
		out = append(out, strings.TrimSuffix(p, ".star"))
		return nil
	})
	sort.Strings(out)
	return out
}

// Summary returns a built-in script's one-line summary: its first comment
// line.
func Summary(name string) string {
	b, err := fs.ReadFile(scripts.FS, strings.TrimSuffix(name, ".star")+".star")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "#") {
			return strings.TrimSpace(strings.TrimPrefix(l, "#"))
		}
	}
	return ""
}
