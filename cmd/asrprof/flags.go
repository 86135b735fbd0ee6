package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/asrprof/asrprof/option"
	"io"
	"strings"
)

var errHelp = errors.New("help shown")

// newFlagSet is a command's flags, its help head (which ends in
// "Flags:\n") then its flags by name (helpFunc); parse reports their
// errors, and the flag package writes anything else to stderr.
func newFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = helpFunc(fs, head, "", nil)
	return fs
}

// parse parses args with fs. On -h/--help it prints fs.Usage once, to
// stdout, and returns errHelp; other problems become errUsage.
//
// The flag package's own usage dump is silenced: a bad flag gets a
// one-line error that points to --help instead of the whole manual on
// stderr.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelp
	case err != nil:
		return fmt.Errorf("%w: %s (see 'asrprof %s --help')", errUsage, flagError(fs, err), fs.Name())
	}
	return nil
}

// helpFunc is a command's fs.Usage: head (which ends in "Flags:\n"), the
// flags in GNU style (printFlag; in the help groups of opts when it is
// given, else by name), tail, and the exit status table.
func helpFunc(fs *flag.FlagSet, head, tail string, opts []option.Option) func() {
	return func() {
		w := fs.Output()
		fmt.Fprint(w, head)
		if opts != nil {
			printGroups(w, fs, opts)
		} else {
			fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
		}
		if tail != "" {
			fmt.Fprint(w, "\n"+tail)
		}
		fmt.Fprint(w, "\n"+exitTable())
	}
}

// splitArgs separates positional arguments from flags so that flags may
// come before or after them.
func splitArgs(fs *flag.FlagSet, args []string) (pos, flags []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(pos, args[i+1:]...), flags
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return pos, flags
}
