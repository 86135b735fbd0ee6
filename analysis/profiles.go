package analysis

import (
	"cmp"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/ianlancetaylor/demangle"

	"github.com/asrprof/asrprof/bundle"
)

// TopFunctions is how many leaf functions a profile summary keeps.
const TopFunctions = 10

// PythonMapping is the mapping of interpreted Python frames in the cpu
// probe's profiles (docs/BUNDLE.md; probe/cpu.PythonFile).
const PythonMapping = "[python]"

// profileSummary is one cpu/<level>-<repeat>.pb.gz, reduced to its hottest
// leaf functions (flat on-CPU time).
type profileSummary struct {
	File   string        `json:"file"`
	Level  string        `json:"level"`
	Repeat int           `json:"repeat"`
	Warmup bool          `json:"warmup"`
	TotalS float64       `json:"total_s"`
	Top    []functionCPU `json:"top"`
	// PythonS is the time of the samples that have a Python frame, and
	// TopPython the hottest Python functions by inclusive-of-native time:
	// each such sample counts for its innermost Python frame, so the C
	// code a Python function called (allocation, the interpreter, a
	// library's kernels launch) is charged to it, as py-spy shows it.
	// Empty when the engine names no Python frames.
	PythonS   float64       `json:"python_s"`
	TopPython []functionCPU `json:"top_python"`
	// Threads are the busiest threads (TopThreads at most), each with
	// its own hottest leaf and Python functions (TopPerThread each).
	Threads []threadCPU `json:"threads"`
	// TopOwn ranks each sample's innermost frame of the server's own
	// code: kernel, vDSO and hypervisor frames (named "[kernel] f",
	// "[vdso] ...", "[hypervisor] f" in Top) are skipped up to the code
	// that called them, so that the hottest code named is code its users
	// can act on. A sample with no such frame counts for none.
	TopOwn []functionCPU `json:"top_own"`
	// SystemS is the time of the samples whose leaf is a kernel, vDSO or
	// hypervisor frame; TruncatedS of those whose stack ends (outermost
	// frame) at an address in no mapping: a frame-pointer walk that lost
	// the chain in code built without frame pointers.
	SystemS    float64 `json:"system_s"`
	TruncatedS float64 `json:"truncated_s"`
}

// TopThreads and TopPerThread bound profileSummary.Threads.
const (
	TopThreads   = 20
	TopPerThread = 3
)

// threadCPU is one thread's share of a profile.
type threadCPU struct {
	TID       int           `json:"tid"`
	Thread    string        `json:"thread"`
	TotalS    float64       `json:"total_s"`
	Top       []functionCPU `json:"top"`
	TopPython []functionCPU `json:"top_python"`
	TopOwn    []functionCPU `json:"top_own"`
}

type functionCPU struct {
	Function string  `json:"function"`
	FlatS    float64 `json:"flat_s"`
	FlatPct  float64 `json:"flat_pct"`
}

// profiles reads the capture's CPU profiles (cached).
func (c *Capture) profiles() ([]profileSummary, error) {
	return c.profs.get(func() ([]profileSummary, error) {
		files, _ := filepath.Glob(c.Bundle.Path(filepath.Join(bundle.CPUDir, "*.pb.gz"))) // sorted
		out := []profileSummary{}
		for _, f := range files {
			s, err := summarizeProfile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	})
}

func summarizeProfile(path string) (profileSummary, error) {
	s := profileSummary{File: filepath.Join(bundle.CPUDir, filepath.Base(path))}
	name := strings.TrimSuffix(filepath.Base(path), ".pb.gz")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		s.Level = name[:i]
		s.Warmup = name[i+1:] == "warmup"
		s.Repeat, _ = strconv.Atoi(name[i+1:]) // 0 for the warmup
	}
	p, vi, scale, err := readProfile(path)
	if err != nil {
		return s, err
	}
	// The profile's times by function, and each thread's.
	type times struct {
		name              string
		total, py         int64
		flat, python, own map[string]int64
	}
	newTimes := func() *times {
		return &times{flat: map[string]int64{}, python: map[string]int64{}, own: map[string]int64{}}
	}
	all, threads := newTimes(), map[int]*times{}
	var system, truncated int64
	for _, smp := range p.Sample {
		v := smp.Value[vi]
		leaf := "[unknown]"
		if len(smp.Location) > 0 {
			leaf = frameName(smp.Location[0])
			if k := frameKind(smp.Location[0]); k == kernelCode || k == hypervisor || k == vdso {
				system += v
			}
			if out := smp.Location[len(smp.Location)-1]; frameKind(out) == noMapping {
				truncated += v
			}
		}
		tid := -1
		if l := smp.Label["tid"]; len(l) > 0 {
			tid, _ = strconv.Atoi(l[0])
		}
		th := threads[tid]
		if th == nil {
			th = newTimes()
			if l := smp.Label["thread"]; len(l) > 0 {
				th.name = l[0]
			}
			threads[tid] = th
		}
		ownName, hasOwn := ownFrame(smp)
		pyName, hasPy := innermostPython(smp)
		for _, t := range []*times{all, th} {
			t.total += v
			t.flat[leaf] += v
			if hasOwn {
				t.own[ownName] += v
			}
			if hasPy {
				t.python[pyName] += v
				t.py += v
			}
		}
	}
	s.TotalS, s.PythonS = float64(all.total)*scale, float64(all.py)*scale
	s.Top = topFunctions(all.flat, all.total, scale, TopFunctions)
	s.TopPython = topFunctions(all.python, all.total, scale, TopFunctions)
	s.TopOwn = topFunctions(all.own, all.total, scale, TopFunctions)
	s.SystemS, s.TruncatedS = float64(system)*scale, float64(truncated)*scale
	for tid, th := range threads {
		s.Threads = append(s.Threads, threadCPU{TID: tid, Thread: th.name, TotalS: float64(th.total) * scale,
			Top: topFunctions(th.flat, th.total, scale, TopPerThread), TopPython: topFunctions(th.python, th.total, scale, TopPerThread),
			TopOwn: topFunctions(th.own, th.total, scale, TopPerThread)})
	}
	slices.SortFunc(s.Threads, func(a, b threadCPU) int { return cmp.Or(cmp.Compare(b.TotalS, a.TotalS), cmp.Compare(a.TID, b.TID)) })
	s.Threads = s.Threads[:min(len(s.Threads), TopThreads)]
	return s, nil
}

// The kinds of frame a profile location is.
const (
	ownCode    = iota // the server's own code: its binaries, libraries, Python
	kernelCode        // the kernel ([kernel.kallsyms])
	hypervisor        // a hypervisor's helper in the guest kernel (paravirtual interrupts, clocks)
	vdso              // the vDSO (clock_gettime and friends)
	noMapping         // an address in no mapping: a broken frame-pointer chain
	lostStack         // the sampler kept no user stack ("[user stack lost]": its stack map was full)
)

// KernelMapping and VDSOMapping are the mapping files of kernel and vDSO
// frames in the cpu probe's profiles (probe/cpu.KernelFile; /proc/PID/maps).
const (
	KernelMapping = "[kernel.kallsyms]"
	VDSOMapping   = "[vdso]"
)

// hypervisorPrefixes are the kernel functions that are a hypervisor's
// paravirtual helpers: time spent there is the host's, not the server's.
var hypervisorPrefixes = []string{"pvm_", "xen_", "hv_", "kvm_", "pv_", "__pv_", "vmware_", "hyperv_", "native_safe_halt"}

// frameKind says what kind of code loc is.
func frameKind(loc *profile.Location) int {
	name := ""
	if len(loc.Line) > 0 && loc.Line[0].Function != nil {
		name = loc.Line[0].Function.Name
	}
	file := ""
	if loc.Mapping != nil {
		file = loc.Mapping.File
	}
	switch {
	case file == KernelMapping && slices.ContainsFunc(hypervisorPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }):
		return hypervisor
	case file == KernelMapping:
		return kernelCode
	case file == VDSOMapping || file == "[vsyscall]" || strings.HasPrefix(name, "[vdso]"):
		return vdso
	case name == "[user stack lost]":
		return lostStack
	case file == "[unknown]" || name == "[unknown]" || (loc.Mapping == nil && name == ""):
		return noMapping
	}
	return ownCode
}

// frameName is how a location reads in the tables: its function, with
// kernel, hypervisor and vDSO code marked as such ("[kernel] schedule",
// "[hypervisor] pvm_irq_enable", "[vdso]+0x7bd"), and C++ and Rust names
// demangled as pprof shows them, without parameters or template
// arguments ("pocketfft::detail::general_r2c()::{lambda()#1}::operator()").
func frameName(loc *profile.Location) string {
	name := "[unknown]"
	if len(loc.Line) > 0 && loc.Line[0].Function != nil {
		name = loc.Line[0].Function.Name
	}
	switch frameKind(loc) {
	case kernelCode:
		return "[kernel] " + name
	case hypervisor:
		return "[hypervisor] " + name
	case vdso:
		if !strings.HasPrefix(name, "[vdso]") {
			return "[vdso] " + name
		}
	case ownCode:
		return demangle.Filter(name, demangle.NoParams, demangle.NoEnclosingParams, demangle.NoTemplateParams)
	}
	return name
}

// ownFrame names the innermost frame of a sample (leaf first) that is the
// server's own code: its innermost Python frame when it has one, else the
// innermost native frame that is neither kernel, vDSO, hypervisor nor in
// no mapping.
func ownFrame(smp *profile.Sample) (string, bool) {
	for _, loc := range smp.Location {
		if frameKind(loc) != ownCode {
			continue
		}
		if loc.Mapping != nil && loc.Mapping.File == PythonMapping && len(loc.Line) > 0 && loc.Line[0].Function != nil {
			return pythonName(loc.Line[0].Function), true
		}
		return frameName(loc), true
	}
	return "", false
}

// innermostPython names the innermost Python frame of a sample (leaf
// first), as "function (file)" with the file's base name.
func innermostPython(smp *profile.Sample) (string, bool) {
	for _, loc := range smp.Location {
		if loc.Mapping == nil || loc.Mapping.File != PythonMapping || len(loc.Line) == 0 || loc.Line[0].Function == nil {
			continue
		}
		return pythonName(loc.Line[0].Function), true
	}
	return "", false
}

// pythonName names a Python function "function (file)", with the file's
// base name.
func pythonName(fn *profile.Function) string {
	if fn.Filename == "" {
		return fn.Name
	}
	return fn.Name + " (" + filepath.Base(fn.Filename) + ")"
}

// readProfile parses the profile at path and picks its value: the
// cpu/nanoseconds sample type when present (else the last), and the
// seconds one unit of it stands for.
func readProfile(path string) (p *profile.Profile, vi int, scale float64, err error) {
	f, err := bundle.OpenFile(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	if p, err = profile.Parse(f); err != nil {
		return nil, 0, 0, err
	}
	vi = len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Unit == "nanoseconds" {
			vi = i
		}
	}
	scale = 1e-9
	if p.SampleType[vi].Unit != "nanoseconds" && p.Period > 0 {
		scale = float64(p.Period) * 1e-9
	}
	return p, vi, scale, nil
}

// topFunctions returns the n largest entries of times, as seconds and as
// a share of total.
func topFunctions(times map[string]int64, total int64, scale float64, n int) []functionCPU {
	names := slices.Collect(maps.Keys(times))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(times[b], times[a]), strings.Compare(a, b)) })
	return valuesOf(names[:min(len(names), n)], func(name string) functionCPU { // [] (not null) for none
		fc := functionCPU{Function: name, FlatS: float64(times[name]) * scale}
		if total > 0 {
			fc.FlatPct = 100 * float64(times[name]) / float64(total)
		}
		return fc
	})
}
