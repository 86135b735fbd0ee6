package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

var errHelp = errors.New("help shown")

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// floatList is a comma-separated list of numbers.
type floatList []float64

func (l *floatList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return strings.Join(s, ",")
}

func (l *floatList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", f)
		}
		*l = append(*l, x)
	}
	return nil
}

// parse parses args with fs, turning -h into errHelp and other problems
// into errUsage. The flag package prints its own messages to fs.Output().
//
// The flag package's own usage dump is silenced: --help is printed once, to
// stdout, by the caller, and a bad flag gets a one-line error that points
// to --help instead of the whole manual on stderr.
func parse(fs *flag.FlagSet, args []string) error {
	fs.Init(fs.Name(), flag.ContinueOnError)
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return fmt.Errorf("%w: %v (see 'asrprof %s --help')", errUsage, err, fs.Name())
	}
	return nil
}

// printFlags writes fs's flags in GNU style (--name VALUE) with their help.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, use := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if name != "" {
			head += " " + name
		}
		fmt.Fprintln(w, head)
		for _, line := range strings.Split(use, "\n") {
			fmt.Fprintf(w, "      %s\n", line)
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			fmt.Fprintf(w, "      (default %s)\n", f.DefValue)
		}
	})
}
