package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/table"
)

// otherFlags is the title of the flags that no group holds.
const otherFlags = "Other flags"

// printGroups writes the flags of fs in the help groups of opts (a
// command's options in the order --help shows them: the groups in order of
// first use, each option under its own), then those of fs that opts does
// not hold, under otherFlags.
func printGroups(w io.Writer, fs *flag.FlagSet, opts []option.Option) {
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.ContainsFunc(opts, func(o option.Option) bool { return o.Name == f.Name }) {
			opts = append(opts, option.Option{Name: f.Name, Group: otherFlags})
		}
	})
	for _, g := range option.Groups(opts) {
		fmt.Fprintf(w, "\n%s:\n", g)
		for _, o := range opts {
			if f := fs.Lookup(o.Name); o.Group == g && f != nil {
				printFlag(w, f)
			}
		}
	}
}

// printFlag writes one flag in GNU style: "--name VALUE (default D)" (no
// VALUE for a boolean flag, no default when it is the zero value), then
// its help, indented.
func printFlag(w io.Writer, f *flag.Flag) {
	name, use := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if isBool(f) {
		name = "" // a backquoted word in a boolean's help names no value
	}
	if name != "" && name == f.DefValue {
		// The backquoted choice is the default: name the value by the
		// flag (--format FORMAT (default text)), the default once.
		name = strings.ToUpper(f.Name[strings.LastIndex(f.Name, "-")+1:])
	}
	if name != "" {
		head += " " + name
	}
	// No default for a zero value (a flag whose zero means something else
	// says so in its help, once).
	if !slices.Contains([]string{"", "0", "0s", "false", "[]"}, f.DefValue) {
		head += " (default " + f.DefValue + ")"
	}
	fmt.Fprintln(w, head)
	for _, line := range strings.Split(strings.TrimRight(use, "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight("      "+line, " "))
	}
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// checkFormat checks a --format value (option.Format: one vocabulary,
// table.Formats; "table", the old name of text, is still taken).
func checkFormat(format string) error {
	if table.CheckFormat(format) != nil {
		return fmt.Errorf("%w: --format %q: want text, markdown, csv, tsv or json", errUsage, format)
	}
	return nil
}

// Exit statuses, the one table every command follows (exitTable prints it
// into --help).
var exitStatuses = []struct {
	code    int
	meaning string
}{
	{exitOK, "success"},
	{exitFailed, "the run failed (a write error, a probe that recorded nothing, a server\nthat did not start or stop, GPUs not freed, the --proxy command failed,\na --gpu-corunner that cannot run here or ran no kernel)"},
	{exitUsage, "bad flags or input (an unknown or malformed flag, a missing or bad file\nor bundle, an --out that holds a bundle, a target that does not answer,\nno advice table or a knob what-if cannot map to a flag)"},
	{exitIncomplete, "a runbook (--server-cmd, --runs, ab, sensitivity, what-if) ran, but a\nscored run lacks coverage"},
	{exitNoSuccess, "the capture ran, but a scored level had no successful request (every\nrequest failed: the validity table counts them by cause, docs/VALIDITY.md);\nthe bundle is written"},
	{exitInterrupted, "interrupted (Ctrl-C, SIGTERM, SIGHUP); a capture's bundle is finalized with\ncomplete=false, and the servers it started are stopped; the commands that\nstart nothing quit at once on a second Ctrl-C"},
}

// exitTable is the exit status table of --help.
func exitTable() string {
	var b strings.Builder
	b.WriteString("Exit status:\n")
	for _, e := range exitStatuses {
		fmt.Fprintf(&b, "  %-4d %s\n", e.code, strings.ReplaceAll(e.meaning, "\n", "\n       "))
	}
	return b.String()
}

// The flag package's errors, which spell a flag with one dash.
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	flagBadValue  = regexp.MustCompile(`^invalid value ("(?:[^"\\]|\\.)*") for flag -+([^:]+): (.*)$`)
	flagBadBool   = regexp.MustCompile(`^invalid boolean value ("(?:[^"\\]|\\.)*") for -+([^:]+): (.*)$`)
	flagBadBoolNm = regexp.MustCompile(`^invalid boolean flag (\S+): (.*)$`)
)

// goneFlags are flags that were removed, by command and flag, with what
// to do instead: giving one is a usage error that says so.
var goneFlags = map[string]string{
	"analyze --save-stages": "the stage boundaries are in DIR/tables/stages.parquet, and 'asrprof export' derives its stages itself (--stages PRESET)",
}

// flagError rewords an error of fs.Parse in the --flag spelling, naming
// the flag once: `--repeats "x": want an integer`.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		if why, ok := goneFlags[fs.Name()+" --"+m[1]]; ok {
			return "--" + m[1] + " is gone: " + why
		}
		if near := nearestFlag(fs, m[1]); near != "" {
			return "unknown flag --" + m[1] + " (did you mean --" + near + "?)"
		}
		return "unknown flag --" + m[1]
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return "--" + m[1] + " needs a value"
	}
	if m := flagBadBool.FindStringSubmatch(msg); m != nil {
		v, err := strconv.Unquote(m[1])
		if err != nil {
			v = m[1]
		}
		return "--" + m[2] + "=" + v + ": want true or false"
	}
	if m := flagBadBoolNm.FindStringSubmatch(msg); m != nil {
		return "--" + m[1] + ": " + m[2]
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		name, reason := m[2], m[3]
		if reason == "parse error" || reason == "value out of range" {
			reason = valueWant(fs.Lookup(name), reason)
		}
		return "--" + name + " " + m[1] + ": " + reason
	}
	return strings.ReplaceAll(msg, " -", " --")
}

// nearestFlag is the flag of fs whose name is nearest name
// (option.Nearest), or "".
func nearestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return option.Nearest(name, names)
}

// valueWant says what a flag of f's type takes, for the flag package's
// bare "parse error".
func valueWant(f *flag.Flag, reason string) string {
	if f == nil {
		return reason
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return reason
	}
	out := ""
	if reason == "value out of range" {
		out = "out of range; "
	}
	switch g.Get().(type) {
	case time.Duration:
		return out + "want a duration such as 30s, 500ms or 2m"
	case int, int64:
		return out + "want an integer"
	case uint, uint64:
		return out + "want a non-negative integer"
	case float64:
		return out + "want a number"
	}
	return reason
}
