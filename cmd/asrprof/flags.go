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
	elems, err := splitList(v)
	if err != nil {
		return err
	}
	for i, f := range elems {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("element %d, %q, is not an integer", i+1, f)
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
	elems, err := splitList(v)
	if err != nil {
		return err
	}
	for i, f := range elems {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return fmt.Errorf("element %d, %q, is not a number", i+1, f)
		}
		*l = append(*l, x)
	}
	return nil
}

// splitList splits the value of a comma-separated list flag into its
// elements, spaces around them trimmed. An empty element (1,,4 or a
// trailing comma) is an error naming it; an empty value is no elements.
// Every list flag parses its value with it.
func splitList(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	elems := strings.Split(v, ",")
	for i, e := range elems {
		if elems[i] = strings.TrimSpace(e); elems[i] == "" {
			return nil, fmt.Errorf("element %d is empty", i+1)
		}
	}
	return elems, nil
}

// parse parses args with fs. On -h/--help it prints fs.Usage once, to
// stdout, and returns errHelp; other problems become errUsage.
//
// The flag package's own usage dump is silenced: a bad flag gets a
// one-line error that points to --help instead of the whole manual on
// stderr.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := parseQuiet(fs, args)
	if err == errHelp {
		fs.SetOutput(stdout)
		fs.Usage()
	}
	return err
}

func parseQuiet(fs *flag.FlagSet, args []string) error {
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
		return fmt.Errorf("%w: %s (see 'asrprof %s --help')", errUsage, flagError(fs, err), fs.Name())
	}
	return nil
}

// printFlags writes fs's flags in GNU style (--name VALUE) with their
// help, by name (printFlag); a command with many flags groups them
// (flagGroups).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
}

// helpFunc is a command's fs.Usage: the head of text (which ends in
// "Flags:\n"), the flags (in groups when groups is not nil), the tail of
// text, and the exit status table.
func helpFunc(fs *flag.FlagSet, text func() (head, tail string), groups *flagGroups) func() {
	return func() {
		w := fs.Output()
		head, tail := text()
		fmt.Fprint(w, head)
		if groups != nil {
			groups.print(w)
		} else {
			printFlags(w, fs)
		}
		if tail != "" {
			fmt.Fprint(w, "\n"+tail)
		}
		fmt.Fprint(w, "\n"+exitTable())
	}
}

// text is a help text without a tail, for helpFunc.
func text(head string) func() (string, string) { return func() (string, string) { return head, "" } }

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
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		}
	}
	return pos, flags
}
