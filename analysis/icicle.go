package analysis

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/asrprof/asrprof/bundle"
)

// Frame is one node of a flame graph (icicle): a function called along one
// call path, with the on-CPU seconds of the samples under it.
type Frame struct {
	Name     string
	Seconds  float64
	Children []*Frame // largest first
	// CutSeconds (the root only) is the time of the samples whose stack
	// was cut at an address in no mapping (Icicle).
	CutSeconds float64
}

// Icicle merges the CPU profiles of the scored passes of level (every
// level when level is "") into one call tree, root first: the flame graph
// of those passes. Python frames (otel engine) are named "function
// (file)", as the cpu analysis names them; inlined frames are their own
// nodes. Paths under minShare of the total are cut: their time stays in
// their parent. A stack is cut at its first frame (from the leaf) whose
// address lies in no mapping of the profile, which pprof can only name
// [unknown]: a frame-pointer walk that went through code built without
// frame pointers reads garbage from there on, and the flame graph would
// root most samples at such addresses; the sample is drawn from its last
// mapped frame, and the root's CutSeconds counts it. It returns nil when
// the capture has no profiles of those passes.
func (c *Capture) Icicle(level string, minShare float64) (*Frame, error) {
	files, _ := filepath.Glob(c.Bundle.Path(filepath.Join(bundle.CPUDir, "*.pb.gz"))) // sorted
	root := &node{kids: map[string]*node{}}
	var cut int64
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pb.gz")
		i := strings.LastIndexByte(name, '-')
		if i <= 0 || name[i+1:] == "warmup" || (level != "" && name[:i] != level) {
			continue
		}
		if err := addProfile(root, f, &cut); err != nil {
			return nil, err
		}
	}
	if root.v == 0 {
		return nil, nil
	}
	out := root.frame("all", 1e-9, int64(minShare*float64(root.v)))
	out.CutSeconds = float64(cut) * 1e-9
	return out, nil
}

// unmapped reports whether loc is an address in no mapping: no mapping, or
// the profile's catch-all mapping of no range, and no function named.
func unmapped(loc *profile.Location) bool {
	m := loc.Mapping
	if m != nil && (m.Limit > m.Start || m.File == PythonMapping) {
		return false
	}
	return !slices.ContainsFunc(loc.Line, func(l profile.Line) bool {
		return l.Function != nil && l.Function.Name != "" && l.Function.Name != "[unknown]"
	})
}

type node struct {
	v    int64
	kids map[string]*node
}

// add adds v to n's child name (made when n has none) and returns it.
func (n *node) add(name string, v int64) *node {
	c := n.kids[name]
	if c == nil {
		c = &node{kids: map[string]*node{}}
		n.kids[name] = c
	}
	c.v += v
	return c
}

func (n *node) frame(name string, scale float64, min int64) *Frame {
	f := &Frame{Name: name, Seconds: float64(n.v) * scale}
	for k, c := range n.kids {
		if c.v >= min && c.v > 0 {
			f.Children = append(f.Children, c.frame(k, scale, min))
		}
	}
	slices.SortFunc(f.Children, func(a, b *Frame) int {
		return cmp.Or(cmp.Compare(b.Seconds, a.Seconds), strings.Compare(a.Name, b.Name))
	})
	return f
}

// addProfile adds one profile's samples to root, in nanoseconds.
func addProfile(root *node, path string, cut *int64) error {
	p, vi, scale, err := readProfile(path)
	if err != nil {
		return err
	}
	for _, smp := range p.Sample {
		v := int64(float64(smp.Value[vi]) * scale * 1e9) // ns
		root.v += v
		cur := root
		locs := smp.Location
		if k := slices.IndexFunc(locs[min(1, len(locs)):], unmapped); k >= 0 {
			locs = locs[:k+1]
			*cut += v
		}
		for _, loc := range slices.Backward(locs) {
			python := loc.Mapping != nil && loc.Mapping.File == PythonMapping
			for _, l := range slices.Backward(loc.Line) {
				fn := l.Function
				name := "[unknown]"
				if fn != nil && python {
					name = pythonName(fn)
				} else if fn != nil {
					name = fn.Name
				}
				cur = cur.add(name, v)
			}
			if len(loc.Line) == 0 {
				cur = cur.add("[unknown]", v)
			}
		}
	}
	return nil
}
