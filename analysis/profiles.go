package analysis

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/asrprof/asrprof/trace/bundle"
)

// TopFunctions is how many leaf functions a profile summary keeps.
const TopFunctions = 10

// profileSummary is one cpu/<level>-<repeat>.pb.gz, reduced to its hottest
// leaf functions (flat on-CPU time).
type profileSummary struct {
	File   string        `json:"file"`
	Level  string        `json:"level"`
	Repeat int           `json:"repeat"`
	Warmup bool          `json:"warmup"`
	TotalS float64       `json:"total_s"`
	Top    []functionCPU `json:"top"`
}

type functionCPU struct {
	Function string  `json:"function"`
	FlatS    float64 `json:"flat_s"`
	FlatPct  float64 `json:"flat_pct"`
}

// profiles reads the capture's CPU profiles (cached).
func (c *Capture) profiles() ([]profileSummary, error) {
	c.rowsMu.Lock()
	defer c.rowsMu.Unlock()
	if c.profs != nil {
		return c.profs, nil
	}
	files, _ := filepath.Glob(c.Bundle.Path(filepath.Join(bundle.CPUDir, "*.pb.gz")))
	sort.Strings(files)
	out := []profileSummary{}
	for _, f := range files {
		s, err := summarizeProfile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	c.profs = out
	return out, nil
}

func summarizeProfile(path string) (profileSummary, error) {
	s := profileSummary{File: filepath.Join(bundle.CPUDir, filepath.Base(path))}
	name := strings.TrimSuffix(filepath.Base(path), ".pb.gz")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		s.Level = name[:i]
		if rep := name[i+1:]; rep == "warmup" {
			s.Warmup = true
		} else {
			for _, ch := range rep {
				s.Repeat = s.Repeat*10 + int(ch-'0')
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return s, err
	}
	vi := len(p.SampleType) - 1 // cpu/nanoseconds when present
	for i, st := range p.SampleType {
		if st.Unit == "nanoseconds" {
			vi = i
		}
	}
	flat := map[string]int64{}
	var total int64
	for _, smp := range p.Sample {
		v := smp.Value[vi]
		total += v
		leaf := "[unknown]"
		if len(smp.Location) > 0 && len(smp.Location[0].Line) > 0 && smp.Location[0].Line[0].Function != nil {
			leaf = smp.Location[0].Line[0].Function.Name
		}
		flat[leaf] += v
	}
	scale := 1e-9
	if p.SampleType[vi].Unit != "nanoseconds" && p.Period > 0 {
		scale = float64(p.Period) * 1e-9
	}
	s.TotalS = float64(total) * scale
	names := make([]string, 0, len(flat))
	for n := range flat {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if flat[names[i]] != flat[names[j]] {
			return flat[names[i]] > flat[names[j]]
		}
		return names[i] < names[j]
	})
	for _, n := range names[:min(len(names), TopFunctions)] {
		fc := functionCPU{Function: n, FlatS: float64(flat[n]) * scale}
		if total > 0 {
			fc.FlatPct = 100 * float64(flat[n]) / float64(total)
		}
		s.Top = append(s.Top, fc)
	}
	return s, nil
}
