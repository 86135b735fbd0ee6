package model

import (
	"slices"
	"strings"
	"testing"
)

func TestLevelNames(t *testing.T) {
	for _, c := range []struct {
		name, label string
		conc        int
		rate        float64
		ok          bool
	}{
		{"c8", "c=8", 8, 0, true},
		{"c128", "c=128", 128, 0, true},
		{"r2.5", "rate=2.5/s", 0, 2.5, true},
		{"r300", "rate=300/s", 0, 300, true},
		{"proxy", "proxy", 0, 0, false},
		{"c", "c", 0, 0, false},
		{"cx", "cx", 0, 0, false},
		{"burst", "burst", 0, 0, false},
		{"replay", "replay", 0, 0, false}, // a replayed trace's level, not "rate=eplay/s"
		{"rx", "rx", 0, 0, false},
	} {
		n, r, ok := ParseLevel(c.name)
		if n != c.conc || r != c.rate || ok != c.ok {
			t.Errorf("ParseLevel(%q) = %d, %g, %v; want %d, %g, %v", c.name, n, r, ok, c.conc, c.rate, c.ok)
		}
		if got := LevelLabel(c.name); got != c.label {
			t.Errorf("LevelLabel(%q) = %q, want %q", c.name, got, c.label)
		}
	}
	if got := ConcurrencyLevel(16); got != "c16" {
		t.Errorf("ConcurrencyLevel(16) = %q", got)
	}
	for r, want := range map[float64]string{2.5: "r2.5", 10: "r10", 0.125: "r0.125", 1.23456: "r1.235"} {
		if got := RateLevel(r); got != want {
			t.Errorf("RateLevel(%g) = %q, want %q", r, got, want)
		}
	}
}

// Levels sort by load: closed loop by requests in flight, then open loop
// by rate; names that are not levels last, in their order.
func TestCompareLevels(t *testing.T) {
	lvs := []string{"proxy", "r2", "c16", "r0.5", "c4", "other", "c1"}
	slices.SortStableFunc(lvs, CompareLevels)
	if got := strings.Join(lvs, " "); got != "c1 c4 c16 r0.5 r2 proxy other" {
		t.Errorf("sorted %s", got)
	}
}
