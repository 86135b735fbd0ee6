// Command asrprof drives speech-to-text servers with real audio while it
// records every request, the server's own spans and events, GPU samples and
// host-CPU traces, and turns the recording into tables.
//
// This package only parses flags and picks exit codes; the work is done in
// capture, bench, trace, probe and analysis.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/runbook"
)

// Exit codes; exitStatuses (help.go) says what each means, in --help.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2 // bad flags, bad input, target not answering
	exitIncomplete  = 3 // a runbook (capture --server-cmd/--runs, ab, sensitivity, what-if) ran but a scored run lacks coverage
	exitNoSuccess   = 4 // a capture ran, but a scored level had no successful request (docs/VALIDITY.md)
	exitInterrupted = 130
)

// stopSignals: the first Ctrl-C (or SIGTERM, or the SIGHUP of a closed
// terminal or ssh session) asks the command to stop cleanly (a capture
// finalizes its bundle and stops its server); see command.starts for the
// second. A SIGHUP that nohup ignores stays ignored.
var stopSignals = func() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	stopProfile := selfProfile(os.Stderr)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(code)
}

// selfProfile writes a Go CPU profile of asrprof itself to the file named
// by $ASRPROF_CPUPROFILE, for finding where asrprof's own time goes (see
// docs/PERFORMANCE.md). It returns the function that ends the profile.
func selfProfile(stderr io.Writer) func() {
	path := os.Getenv("ASRPROF_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "asrprof: ASRPROF_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "asrprof: ASRPROF_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "asrprof: ASRPROF_CPUPROFILE: %v\n", err)
		}
	}
}

// errUsage marks errors in the command line itself.
var errUsage = errors.New("usage")

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// starts: the command starts processes in groups of their own (a
	// server, the user's benchmark, co-runners) and must stop them, so
	// every signal waits for that. For the others, once the first signal
	// has asked them to stop, a signal's default action ends the process
	// at once: a second Ctrl-C always works.
	starts bool
}

func commands() []command {
	return []command{
		{"capture", "drive an ASR server through a sweep and record a capture bundle", captureCommand("capture"), true},
		{"ab", "compare two server commands in alternating fresh-server runs", captureCommand("ab"), true},
		{"sensitivity", "restrict the server's CPU and measure how throughput follows (CPU- or GPU-bound?)", runSensitivity, true},
		{"what-if", "act on a bundle's advice (a knob turned) and measure whether its prediction held", runWhatIf, true},
		{"show", "print the sweep table of a capture bundle", runShow, false},
		{"analyze", "run Starlark analyses over a capture bundle and print their tables", runAnalyze, false},
		{"compare", "compare two capture bundles level by level (ratio, Mann-Whitney U)", runCompare, false},
		{"report", "write a capture (or two compared) as one self-contained HTML report", runReport, false},
		{"export", "send a capture's traces to Jaeger (OTLP) or write Perfetto JSON", runExport, false},
		{"doctor", "check what profiling needs on this machine and target", runDoctor, false},
		{"serve", "run as a daemon: captures over a JSON API, live Prometheus /metrics, remote probes", runServe, true},
		{"version", "print asrprof's version", runVersion, false},
	}
}

const mainUsage = `asrprof drives a speech-to-text server with real audio and records, on one
clock, every request, the server's spans and events, GPU samples and host-CPU
traces into a capture bundle; then it turns the bundle into tables.

Usage:
  asrprof <command> [flags]

Commands:
%s
Examples:
  # Sweep a local server at three concurrency levels, 3 scored repeats each:
  asrprof capture --target http://127.0.0.1:8000 --dataset data/manifest.jsonl \
      --concurrency 1,8,16 --out runs/today

  # Print the sweep table of an existing bundle as Markdown:
  asrprof show runs/today --format markdown

  # Stage decomposition and dominant costs; then every request in Perfetto:
  asrprof analyze runs/today stages bottleneck
  asrprof export runs/today --perfetto runs/today.json

  # What the probes may do on this machine:
  asrprof doctor --target http://127.0.0.1:8000

Run 'asrprof help <command>' (or 'asrprof <command> --help') for a command's
flags.

`

func usage(w io.Writer) {
	var list string
	for _, c := range commands() {
		list += fmt.Sprintf("  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, list)
	fmt.Fprint(w, exitTable())
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if args[0] == "help" && len(args) > 1 { // asrprof help CMD: CMD's help
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	case "-version", "--version": // as Go tools answer it
		return run(ctx, append([]string{"version"}, args[1:]...), stdout, stderr)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if !c.starts {
			context.AfterFunc(ctx, func() { signal.Reset(stopSignals...) })
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, errHelp):
			return exitOK
		case errors.Is(err, capture.ErrInterrupted):
			fmt.Fprintln(stderr, "asrprof: interrupted; the bundle was finalized with complete=false")
			return exitInterrupted
		case ctx.Err() != nil: // stopped by the signal, not failed
			fmt.Fprintf(stderr, "asrprof %s: interrupted\n", c.name)
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "asrprof %s: %s\n", c.name, errorText(err))
		switch {
		case errors.Is(err, errNoSuccess): // before incomplete: a run that measured nothing
			return exitNoSuccess
		case errors.Is(err, runbook.ErrIncomplete):
			return exitIncomplete
		case errors.Is(err, errUsage), errors.Is(err, capture.ErrTargetUnreachable),
			errors.Is(err, capture.ErrBadInput), errors.Is(err, capture.ErrInvalidConfig),
			errors.Is(err, runbook.ErrBadPlan), errors.Is(err, runbook.ErrBadCommand),
			errors.Is(err, runbook.ErrNoAdvice), errors.Is(err, runbook.ErrBadAdvice),
			errors.Is(err, bundle.ErrExists), errors.Is(err, analysis.ErrUnknownScript):
			return exitUsage
		}
		return exitFailed
	}
	// An unknown command gets a suggestion and the list of commands, not
	// the whole manual.
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if near := option.Nearest(strings.TrimLeft(args[0], "-"), names); near != "" {
		fmt.Fprintf(stderr, "asrprof: unknown command %q (did you mean %s?)\n", args[0], near)
	} else {
		fmt.Fprintf(stderr, "asrprof: unknown command %q; the commands: %s\n", args[0], strings.Join(names, ", "))
	}
	fmt.Fprintln(stderr, "Run 'asrprof --help' for usage.")
	return exitUsage
}

// errorText is err as the one line asrprof prints: without the prefixes
// of the sentinels that only pick the exit status ("usage: ", "invalid
// configuration: "); the message after them names the flag or file.
func errorText(err error) string {
	for msg := err.Error(); ; {
		m := strings.TrimPrefix(strings.TrimPrefix(msg, errUsage.Error()+": "), capture.ErrInvalidConfig.Error()+": ")
		if m == msg {
			return msg
		}
		msg = m
	}
}
