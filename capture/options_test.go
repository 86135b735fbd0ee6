package capture

import (
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/option"
)

// parseOptions parses args as the capture flags of the table, on top of
// DefaultConfig.
func parseOptions(t *testing.T, args []string) Config {
	t.Helper()
	c := DefaultConfig()
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	f := NewFlags(&c)
	for _, o := range Options() {
		o.Define(fs, &c, f)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if err := f.Finish(); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return c
}

// Every field the manifest's config records has an option that sets it
// (but Command, the arguments after --), every option names a field of
// Config (or is a --find-max knob), and no two options share a name.
func TestOptions(t *testing.T) {
	byField := map[string][]string{}
	names := map[string]bool{}
	for _, o := range Options() {
		if names[o.Name] {
			t.Errorf("--%s is in the table twice", o.Name)
		}
		names[o.Name] = true
		if o.Group == "" || o.Usage == "" {
			t.Errorf("--%s has no group or no help", o.Name)
		}
		if o.Field == "" {
			if !strings.Contains(o.Usage, "--find-max") {
				t.Errorf("--%s sets no field and is no --find-max knob", o.Name)
			}
			continue
		}
		if _, ok := reflect.TypeFor[Config]().FieldByName(o.Field); !ok {
			t.Errorf("--%s: Config has no field %s", o.Name, o.Field)
		}
		byField[o.Field] = append(byField[o.Field], o.Name)
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		name := option.JSONName(f)
		if name == "-" || f.Name == "Command" {
			continue
		}
		opts := byField[f.Name]
		if len(opts) == 0 {
			t.Errorf("the manifest records %s (%q), but no option sets it", f.Name, name)
		}
		if _, ok := option.Fields(DefaultConfig())[name]; !ok && len(opts) > 0 {
			t.Errorf("--%s: the manifest's config has no %q", opts[0], name)
		}
	}
	// The defaults of the flags are DefaultConfig: nothing given, nothing changed.
	if got := parseOptions(t, nil); !reflect.DeepEqual(got, DefaultConfig()) {
		t.Errorf("no flags:\n%+v\nwant DefaultConfig:\n%+v", got, DefaultConfig())
	}
	// Each kind of value reaches its field.
	c := parseOptions(t, []string{"--concurrency", "1,8", "--rate", "2.5", "--timeout", "30s", "--seed", "9", "--warmup",
		"--hotwords", "a, b", "--agent", "http://a", "--agent", "http://b", "--columns", "id=k", "--replay-speed", "2",
		"--pid", "42", "--probes", "cpu,gpu", "--slo", "latency=1s", "--find-max", "--arrivals", "constant", "--sessions", "4"})
	if !slices.Equal(c.Concurrency, []int{4}) || !slices.Equal(c.Rates, []float64{2.5}) || c.Timeout != 30*time.Second || c.Seed != 9 || !c.Warmup ||
		!slices.Equal(c.Hotwords, []string{"a", "b"}) || !slices.Equal(c.Agents, []string{"http://a", "http://b"}) || c.Columns.ID != "k" ||
		c.ReplaySpeed != 2 || c.PID != 42 || !slices.Equal(c.Probes, []string{"cpu", "gpu"}) || c.SLO.String() != "latency=1s" ||
		c.Search == nil || c.Search.Tolerance != 0.1 || !c.Search.Relative || c.Arrivals != "constant" {
		t.Errorf("parsed: %+v (search %+v)", c, c.Search)
	}
}

// agentArgs parse back, by the same table, into the agent's half of the
// configuration: its options as given, probes-only, and nothing else.
func TestAgentArgs(t *testing.T) {
	def := DefaultConfig()
	if got := agentArgs(&def); !slices.Equal(got, []string{"--probes-only=true"}) {
		t.Errorf("agentArgs of the defaults = %q, want only --probes-only=true", got)
	}
	c := DefaultConfig()
	c.Target, c.PID, c.GPUs, c.Probes = "http://10.0.0.2:8000", 42, []int{0, 2}, []string{"cpu", "gpu"}
	c.ProcHz, c.CPUHz, c.CPUEngine, c.BPFStats, c.GPUPCIe = 2.5, 49, "fp", true, true
	c.GPMWindow, c.ServerMetrics, c.ServerMetricsInterval = 250*time.Millisecond, "off", 2*time.Second
	c.Dataset, c.Concurrency, c.Repeats, c.Agents = "m.jsonl", []int{8}, 2, []string{"http://10.0.0.2:7070"} // the driver's, not the agent's
	args := agentArgs(&c)
	for _, a := range args {
		if a == "--bpf-stats" || a == "--gpu-pcie" {
			t.Errorf("boolean %s without =true: %q", a, args)
		}
	}
	got := parseOptions(t, args)
	want := DefaultConfig()
	want.ProbesOnly = true
	for _, o := range Options() {
		if o.Agent && o.Field != "ProbesOnly" {
			reflect.ValueOf(&want).Elem().FieldByName(o.Field).Set(reflect.ValueOf(c).FieldByName(o.Field))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("agentArgs %q parse into\n%+v\nwant\n%+v", args, got, want)
	}
}

// TestNumberLists: IntList and FloatList (one NumberList) parse and print
// their elements as strconv does, and name a bad element by its kind.
func TestNumberLists(t *testing.T) {
	var il option.IntList
	if err := il.Set(" 1, 8 ,1000000"); err != nil || !slices.Equal(il, option.IntList{1, 8, 1000000}) || il.String() != "1,8,1000000" {
		t.Errorf("IntList: %v %q, %v", il, il.String(), err)
	}
	var fl option.FloatList
	if err := fl.Set("0.5, 2,1e6,1e21"); err != nil || !slices.Equal(fl, option.FloatList{0.5, 2, 1e6, 1e21}) || fl.String() != "0.5,2,1e+06,1e+21" {
		t.Errorf("FloatList: %v %q, %v", fl, fl.String(), err)
	}
	for _, c := range []struct {
		v     flag.Value
		in    string
		error string
	}{
		{&il, "1,x", `element 2, "x", is not an integer`},
		{&il, "1,2.5", `element 2, "2.5", is not an integer`},
		{&fl, "x", `element 1, "x", is not a number`},
		{&fl, "1,,2", `element 2 is empty`},
	} {
		if err := c.v.Set(c.in); err == nil || err.Error() != c.error {
			t.Errorf("Set(%q) = %v, want %s", c.in, err, c.error)
		}
	}
	if err := il.Set(""); err != nil || len(il) != 0 || il.String() != "" {
		t.Errorf("empty IntList: %v %q, %v", il, il.String(), err)
	}
}
