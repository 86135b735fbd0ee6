package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/option"
)

// helpOf is a command's --help, which must exit 0 and print to stdout only.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(append(args, "--help")...)
	if code != exitOK || stdout == "" || stderr != "" {
		t.Fatalf("%v --help: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	return stdout
}

// helpEntry is one flag of a help text: its head line and the lines of
// its help under it.
type helpEntry struct {
	name, value string
	lines       []string
}

var helpHead = regexp.MustCompile(`^  --([a-z0-9-]+)(?: ([^ (][^(]*?))?(?: \(default [^)]*\))?$`)

// helpEntries reads the flag entries of a help text.
func helpEntries(t *testing.T, help string) []helpEntry {
	t.Helper()
	var out []helpEntry
	in := false // in an entry: its help lines follow
	for _, l := range strings.Split(help, "\n") {
		if m := helpHead.FindStringSubmatch(l); m != nil {
			out = append(out, helpEntry{name: m[1], value: m[2], lines: []string{l}})
			in = true
			continue
		}
		if in = in && strings.HasPrefix(l, "      "); in {
			out[len(out)-1].lines = append(out[len(out)-1].lines, l)
		}
	}
	return out
}

// asrprof help CMD prints CMD's help, for every command, the same as CMD
// --help; asrprof help alone, the overview.
func TestHelpCommand(t *testing.T) {
	_, overview, _ := runCLI("help")
	if _, top, _ := runCLI("--help"); top != overview || !strings.Contains(overview, "Commands:") {
		t.Fatalf("asrprof help and --help differ:\n%s\n---\n%s", overview, top)
	}
	for _, c := range commands() {
		want := helpOf(t, c.name)
		code, got, stderr := runCLI("help", c.name)
		if code != exitOK || got != want || stderr != "" {
			t.Errorf("asrprof help %s: exit %d, stdout %s help, stderr %q", c.name, code,
				map[bool]string{true: "is its", false: "is not its"}[got == want], stderr)
		}
		if got == overview || !strings.Contains(got, "Usage: asrprof "+c.name) {
			t.Errorf("asrprof help %s prints no help of its own:\n%s", c.name, got)
		}
	}
	if code, _, stderr := runCLI("help", "frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("asrprof help frobnicate: exit %d, %s", code, stderr)
	}
}

// Every command's help shows a flag's value only where it takes one (a
// boolean shows none), and each default once.
func TestHelpFlagsValuesAndDefaults(t *testing.T) {
	defaults := regexp.MustCompile(`\(default|; default|, default|default:|default with`)
	for _, c := range commands() {
		for _, e := range helpEntries(t, helpOf(t, c.name)) {
			entry := strings.Join(e.lines, "\n")
			if n := len(defaults.FindAllString(entry, -1)); n > 1 {
				t.Errorf("%s --%s says its default %d times:\n%s", c.name, e.name, n, entry)
			}
			if e.value == "" {
				// No value shown: it must be a boolean, which takes =VALUE only.
				code, _, stderr := runCLI(c.name, "--"+e.name+"=maybe")
				if code != exitUsage || !strings.Contains(stderr, "want true or false") {
					t.Errorf("%s --%s shows no value but is no boolean: %s", c.name, e.name, stderr)
				}
				continue
			}
			code, _, stderr := runCLI(c.name, "--"+e.name)
			if code != exitUsage || !strings.Contains(stderr, "--"+e.name+" needs a value") {
				t.Errorf("%s --%s shows value %q but takes none: exit %d %s", c.name, e.name, e.value, code, stderr)
			}
		}
	}
	analyze := helpOf(t, "analyze")
	if !strings.Contains(analyze, "\n  --list\n") {
		t.Errorf("analyze --help: --list shows a value:\n%s", analyze)
	}
	for _, e := range helpEntries(t, helpOf(t, "capture")) {
		entry := strings.Join(e.lines, "\n")
		switch e.name {
		case "concurrency":
			if !strings.Contains(entry, "(default "+option.IntList(capture.DefaultLevels).String()) {
				t.Errorf("--concurrency does not say its default:\n%s", entry)
			}
		case "level-gap":
			if !strings.Contains(entry, "default 200ms") || strings.Contains(entry, "0s") {
				t.Errorf("--level-gap:\n%s", entry)
			}
		}
	}
}

// capture --help groups its flags, essential ones first: target and data,
// load, output, then probes, traces and the modes; every flag once.
func TestHelpCaptureGroups(t *testing.T) {
	help := helpOf(t, "capture")
	var titles []string
	for _, l := range strings.Split(help, "\n") {
		if strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " ") && l != "Flags:" && l != "Examples:" && l != "Exit status:" {
			titles = append(titles, l)
		}
	}
	want := []string{"Target and data:", "Load:", "Output:", "Probes (docs/PROBES.md):", "Traces and server events:"}
	if len(titles) < len(want) || !slices.Equal(titles[:len(want)], want) {
		t.Errorf("capture's groups: %q, want them to start %q", titles, want)
	}
	if slices.Contains(titles, otherFlags+":") {
		t.Errorf("capture has flags in no group:\n%s", help[strings.Index(help, otherFlags):])
	}
	if titles[len(titles)-2] != "Advanced:" { // then the runbook's text, after the flags
		t.Errorf("capture's last group: %q, want Advanced", titles)
	}
	entries := helpEntries(t, help)
	var names []string
	seen := map[string]int{}
	for _, e := range entries {
		names = append(names, e.name)
		seen[e.name]++
	}
	for n, k := range seen {
		if k != 1 {
			t.Errorf("--%s appears %d times", n, k)
		}
	}
	if !slices.Equal(names[:3], []string{"target", "dataset", "protocol"}) {
		t.Errorf("capture's first flags: %v", names[:3])
	}
	at := func(n string) int { return slices.Index(names, n) }
	if at("concurrency") > 15 || at("out") > 25 || at("out") < at("concurrency") {
		t.Errorf("--concurrency at %d, --out at %d: buried", at("concurrency"), at("out"))
	}
	// ab and sensitivity lead with their own flags.
	if e := helpEntries(t, helpOf(t, "ab")); e[0].name != "a-cmd" {
		t.Errorf("ab --help starts with --%s", e[0].name)
	}
	if e := helpEntries(t, helpOf(t, "sensitivity")); e[0].name != "server-cmd" {
		t.Errorf("sensitivity --help starts with --%s", e[0].name)
	}
}

// The exit statuses are one table, in every command's help.
func TestHelpExitTable(t *testing.T) {
	tab := exitTable()
	for _, code := range []int{exitOK, exitFailed, exitUsage, exitIncomplete, exitInterrupted} {
		if !regexp.MustCompile(`(?m)^  ` + strconv.Itoa(code) + ` `).MatchString(tab) {
			t.Errorf("exit %d is not in the table:\n%s", code, tab)
		}
	}
	_, top, _ := runCLI("--help")
	if !strings.Contains(top, tab) {
		t.Error("asrprof --help lacks the exit table")
	}
	for _, c := range commands() {
		if h := helpOf(t, c.name); !strings.HasSuffix(h, "\n"+tab) {
			t.Errorf("%s --help does not end with the exit table", c.name)
		}
	}
}

// --format has one vocabulary: text is documented everywhere, table (its
// old name) still taken everywhere.
func TestFlagFormatVocabulary(t *testing.T) {
	for _, cmd := range []string{"capture", "show", "analyze", "compare"} {
		for _, e := range helpEntries(t, helpOf(t, cmd)) {
			if e.name == "format" && (!strings.Contains(e.lines[0], "(default text)") || regexp.MustCompile(`\btable\b`).MatchString(strings.Join(e.lines, " "))) {
				t.Errorf("%s --format:\n%s", cmd, strings.Join(e.lines, "\n"))
			}
		}
	}
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	_, text, _ := runCLI("show", dir, "--format", "text")
	for _, args := range [][]string{{"show", dir, "--format", "table"}, {"show", dir}, {"analyze", dir, "sweep", "--format", "table"}, {"analyze", dir, "sweep"}} {
		if code, out, stderr := runCLI(args...); code != exitOK || out != text {
			t.Errorf("%v: exit %d %s\n%s", args, code, stderr, out)
		}
	}
	for _, f := range []string{"text", "table"} {
		cfg, _, err := parseCapture("capture", []string{"--target", "http://127.0.0.1:1", "--dataset", dir, "--format", f}, nil, nil)
		if err != nil || cfg.Validate() != nil {
			t.Errorf("capture --format %s: %v %v", f, err, cfg.Validate())
		}
	}
}

// Every comma-separated list flag rejects an empty element, naming the
// flag and the element.
func TestFlagListsRejectEmptyElements(t *testing.T) {
	for _, tc := range [][]string{
		{"capture", "--concurrency", "1,,4"},
		{"capture", "--sessions", "1,4,"},
		{"capture", "--rate", ",2"},
		{"capture", "--gpus", "0,,1"},
		{"capture", "--levels", "c1,,c8"},
		{"capture", "--hotwords", "a,,b"},
		{"capture", "--probes", "gpu,,cpu"},
		{"capture", "--provenance-env", "A,,B"},
		{"sensitivity", "--gpu-clocks", "1980,,990"},
	} {
		code, _, stderr := runCLI(tc...)
		if code != exitUsage || !strings.Contains(stderr, tc[1]+` "`+tc[2]+`"`) || !strings.Contains(stderr, "is empty") {
			t.Errorf("%v: exit %d, %s", tc, code, stderr)
		}
	}
	code, _, stderr := runCLI("capture", "--concurrency", "1,x")
	if code != exitUsage || !strings.Contains(stderr, `--concurrency "1,x": element 2, "x", is not an integer`) {
		t.Errorf("--concurrency 1,x: exit %d, %s", code, stderr)
	}
	var l option.IntList
	if err := l.Set(" 1, 8 ,16"); err != nil || !slices.Equal(l, option.IntList{1, 8, 16}) {
		t.Errorf("spaces around elements: %v %v", l, err)
	}
}

// The flag package's errors come out in the --flag spelling, naming the
// flag once, one line.
func TestFlagErrorsSpelling(t *testing.T) {
	singleDash := regexp.MustCompile(`(^|[\s"(])-[a-z]`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"capture", "--concurency", "4"}, "unknown flag --concurency (did you mean --concurrency?)"},
		{[]string{"capture", "-zzz"}, "unknown flag --zzz (see 'asrprof capture --help')"},
		{[]string{"capture", "--out"}, "--out needs a value"},
		{[]string{"capture", "--repeats", "x"}, `--repeats "x": want an integer`},
		{[]string{"capture", "--timeout", "30"}, `--timeout "30": want a duration such as 30s`},
		{[]string{"capture", "--proc-hz", "fast"}, `--proc-hz "fast": want a number`},
		{[]string{"capture", "--warmup=maybe"}, "--warmup=maybe: want true or false"},
		{[]string{"serve", "--remote-idle", "x"}, `--remote-idle "x": want a duration`},
		{[]string{"export", "--sample", "x"}, `--sample "x": want an integer`},
		// A removed flag says what replaced it.
		{[]string{"analyze", "runs/x", "--save-stages"}, "--save-stages is gone: the stage boundaries are in DIR/tables/stages.parquet, and 'asrprof export' derives its stages itself (--stages PRESET)"},
		{[]string{"analyze", "-save-stages=true", "runs/x"}, "asrprof analyze: --save-stages is gone: "},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || singleDash.MatchString(stderr) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q, one line, no -flag", tc.args, code, stderr, tc.want)
		}
	}
}

// Errors follow the exit table: bad input is 2 (an existing --out, a
// missing dataset, a directory that is no bundle), named once.
func TestErrorExitCodes(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	ds := dataset(t, 1)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"capture", "--target", "http://127.0.0.1:1", "--dataset", ds, "--out", dir}, "--out " + dir + ": directory already holds a capture (give --overwrite"},
		{[]string{"capture", "--target", "http://127.0.0.1:1", "--dataset", tmp + "/none.jsonl"}, "asrprof capture: --dataset " + tmp + "/none.jsonl: no such file or directory\n"},
		{[]string{"capture", "--proxy", "127.0.0.1:1", "--target", "http://127.0.0.1:1", "--dataset", ds, "--out", tmp + "/px", "--", "no-such-client"},
			"asrprof capture: the benchmark command after --: exec: \"no-such-client\": executable file not found in $PATH\n"},
		{[]string{"capture", "--server-cmd", "no-such-server --port 1", "--runs", "1", "--target", "http://127.0.0.1:1", "--dataset", ds, "--concurrency", "1", "--out", tmp + "/px"},
			"asrprof capture: bad server command: run run-1: exec: \"no-such-server\": executable file not found in $PATH\n"},
		{[]string{"sensitivity", "--server-cmd", "no-such-server", "--target", "http://127.0.0.1:1", "--dataset", ds, "--concurrency", "1", "--out", tmp + "/px"},
			"asrprof sensitivity: bad server command: run cpu100-1: exec: \"no-such-server\": executable file not found in $PATH\n"},
		{[]string{"show", tmp + "/none"}, tmp + "/none: no such directory"},
		{[]string{"analyze", tmp}, tmp + ": not a capture bundle (no manifest.json)"},
		{[]string{"compare", dir, tmp + "/none"}, tmp + "/none: no such directory"},
		{[]string{"report", tmp + "/none"}, tmp + "/none: no such directory"},
		{[]string{"export", tmp + "/none", "--perfetto", tmp + "/x.json"}, tmp + "/none: no such directory"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
		if _, err := os.Stat(tmp + "/px"); err == nil {
			t.Errorf("%v: a bundle was written", tc.args)
		}
		for _, dup := range []string{"usage: ", "invalid configuration: ", "bad dataset: ", "loading dataset"} {
			if strings.Contains(stderr, dup) {
				t.Errorf("%v: %q", tc.args, stderr)
			}
		}
	}
}

// A dataset error from the capture itself names --dataset and the file
// once.
func TestErrorDatasetNamed(t *testing.T) {
	err := datasetError(capture.Config{Dataset: "d/m.jsonl"}, errorsJoin(capture.ErrBadInput, "loading dataset: open d/m.jsonl: permission denied"))
	if err.Error() != "--dataset d/m.jsonl: permission denied" {
		t.Errorf("%v", err)
	}
	err = datasetError(capture.Config{Dataset: "d"}, errorsJoin(capture.ErrBadInput, "d has no usable samples"))
	if err.Error() != "--dataset d: has no usable samples" {
		t.Errorf("%v", err)
	}
}

func errorsJoin(sentinel error, msg string) error {
	return &reworded{msg: sentinel.Error() + ": " + msg, err: sentinel}
}

// A capture says which levels it runs and why before it starts, and warns
// of a level that cannot have its concurrency in flight.
func TestHelpLevelsLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "levels: c=1,8,16,32,64 (the default; set --concurrency)"},
		{[]string{"--concurrency", "1,4"}, "levels: c=1,4 (--concurrency)"},
		{[]string{"--sessions", "2", "--protocol", "funasr-ws"}, "levels: c=2 (--sessions)"},
		{[]string{"--rate", "2,4.5"}, "levels: rate=2,4.5/s (--rate)"},
		{[]string{"--concurrency", "1", "--rate", "2"}, "levels: c=1 then rate=2/s (--concurrency, --rate)"},
		{[]string{"--find-max", "--slo", "latency=1s"}, "levels: --find-max from c=1 (the default start; set --concurrency)"},
		{[]string{"--proxy", "127.0.0.1:0"}, ""},
	} {
		_, rb, err := parseCapture("capture", append([]string{"--target", "http://127.0.0.1:1", "--dataset", "m.jsonl"}, tc.args...), nil, nil)
		if err != nil || rb.levels != tc.want {
			t.Errorf("%v: %q (%v), want %q", tc.args, rb.levels, err, tc.want)
		}
	}
	_, rb, _ := parseCapture("capture", []string{"--target", "http://x:1", "--dataset", "m", "--concurrency", "1,2,64", "--max-samples", "2"}, nil, nil)
	if want := []string{"warning: c=64 with 2 samples per pass (--max-samples): at most 2 requests in flight"}; !slices.Equal(rb.warnings, want) {
		t.Errorf("warnings %q, want %q", rb.warnings, want)
	}
	_, rb, _ = parseCapture("capture", []string{"--target", "http://x:1", "--dataset", "m", "--concurrency", "8", "--max-samples", "2", "--pass-duration", "5s"}, nil, nil)
	if len(rb.warnings) != 0 {
		t.Errorf("--pass-duration cycles the dataset: %q", rb.warnings)
	}

	// End to end: the line and the warning, on stderr, before the passes.
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	code, _, stderr := runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 3), "--max-samples", "2", "--concurrency", "1,64",
		"--repeats", "1", "--out", t.TempDir()+"/b", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none", "--span-grace", "0s")
	lines := strings.Split(stderr, "\n")
	if code != exitOK || len(lines) < 2 || lines[0] != "levels: c=1,64 (--concurrency)" ||
		lines[1] != "warning: c=64 with 2 samples per pass (--max-samples): at most 2 requests in flight" {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 1), "--repeats", "1", "--quiet",
		"--out", t.TempDir()+"/q", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none", "--span-grace", "0s")
	if code != exitOK || strings.Contains(stderr, "levels:") {
		t.Errorf("--quiet: exit %d, stderr:\n%s", code, stderr)
	}
}
