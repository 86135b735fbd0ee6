package capture

import (
	"cmp"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// Search is the --find-max search (docs/CAPACITY.md): the highest
// concurrency (closed loop: the capture's --concurrency gives the start)
// or rate (open loop: --rate) whose SLO attainment stays at or above
// Attainment in every repeat. It doubles the level until a level fails,
// then bisects between the highest level that passed and the lowest that
// failed until they are within Tolerance.
type Search struct {
	// Attainment is the share of requests (0..1) that must meet the SLO
	// in every repeat of a level for the level to pass.
	Attainment float64 `json:"attainment"`
	// Tolerance is how close the passing and the failing level must be
	// for the search to stop: requests in flight (closed loop) or req/s
	// (open loop); with Relative, a fraction of the passing level.
	Tolerance float64 `json:"tolerance"`
	Relative  bool    `json:"tolerance_relative,omitempty"`
	// Max is the highest level tried (0: 1024 in flight, 1000 req/s).
	Max float64 `json:"max,omitempty"`
}

// DefaultSearch is --find-max with no other search flags.
func DefaultSearch() Search { return Search{Attainment: 0.99, Tolerance: 1} }

// ParseTolerance reads --tolerance: a number (requests in flight, or
// req/s) or a percentage of the passing level ("10%").
func ParseTolerance(s string) (tol float64, relative bool, err error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(x > 0) || x >= 100 {
			return 0, false, fmt.Errorf("--tolerance %q: want a percentage between 0 and 100, such as 10%%", s)
		}
		return x / 100, true, nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || !(x > 0) || math.IsInf(x, 0) {
		return 0, false, fmt.Errorf("--tolerance %q: want a number > 0 (requests in flight or req/s) or a percentage such as 10%%", s)
	}
	return x, false, nil
}

// validateCapacity checks --slo and --find-max.
func (c *Config) validateCapacity() error {
	if err := c.SLO.Check(c.Protocol, protocol.IsRealtime(c.Protocol)); err != nil {
		return fmt.Errorf("--%v", err)
	}
	s := c.Search
	if s == nil {
		return nil
	}
	if err := cmp.Or(
		errIf(c.SLO.IsZero(), "--find-max needs --slo: the limits a level must meet (e.g. --slo latency=1s)"),
		errIf(len(c.Concurrency)+len(c.Rates) != 1,
			"--find-max searches one loop from one start: give one --concurrency (closed loop) or one --rate (open loop), not %d levels", len(c.Concurrency)+len(c.Rates)),
		errIf(!(s.Attainment > 0 && s.Attainment <= 1),
			"--attainment %g: want a share in (0, 1], such as 0.99", s.Attainment),
		errIf(!(s.Tolerance > 0), "--tolerance %g: must be > 0", s.Tolerance),
		errIf(s.Max < 0, "--find-max-limit %g: must be ≥ 0", s.Max),
	); err != nil {
		return err
	}
	m := s.limit(len(c.Rates) > 0)
	return errIf(m < c.start(), "--find-max-limit %g is below the start %g", m, c.start())
}

func (c *Config) start() float64 {
	if len(c.Rates) > 0 {
		return c.Rates[0]
	}
	return float64(c.Concurrency[0])
}

func (s *Search) limit(open bool) float64 {
	switch {
	case s.Max > 0:
		return s.Max
	case open:
		return 1000
	}
	return 1024
}

// searcher plans the levels of a search: pure, so tests drive it with
// made-up attainments.
type searcher struct {
	cfg    Search
	open   bool
	start  float64
	lo, hi float64 // highest passing, lowest failing (0: none yet)
	res    bundle.SearchResult
	next   float64 // the level to run next (0: done)
	phase  string
}

func newSearcher(cfg *Config) *searcher {
	s := &searcher{cfg: *cfg.Search, open: len(cfg.Rates) > 0, start: cfg.start(), phase: "bracket"}
	s.res = bundle.SearchResult{Loop: "closed", SLO: cfg.SLO.String(), Attainment: s.cfg.Attainment, Tolerance: s.cfg.Tolerance, Relative: s.cfg.Relative, Probes: []bundle.SearchProbe{}}
	if s.open {
		s.res.Loop = "open"
	}
	s.next = s.round(s.start)
	return s
}

// round keeps levels representable: whole requests in flight, rates to
// the millisecond-per-request digits Config.Levels names them by.
func (s *searcher) round(x float64) float64 {
	if !s.open {
		return math.Max(1, math.Floor(x))
	}
	return math.Round(x*1000) / 1000
}

// level is the next level to run, false when the search is over.
func (s *searcher) level() (SweepPoint, bool) {
	if s.next <= 0 {
		return SweepPoint{}, false
	}
	if s.open {
		return SweepPoint{Name: model.RateLevel(s.next), Rate: s.next}, true
	}
	return SweepPoint{Name: model.ConcurrencyLevel(int(s.next)), Concurrency: int(s.next)}, true
}

// record takes the outcome of the level just run and plans the next.
func (s *searcher) record(lr model.LevelResult, requests int) {
	v := s.next
	p := bundle.SearchProbe{Level: lr.Level, Value: v, Phase: s.phase, Attainment: 1, Requests: requests,
		LatencyP95S: lr.LatencyP95S.Mean}
	if lr.GoodputReqS != nil {
		p.GoodputReqS = lr.GoodputReqS.Mean
	}
	for _, pm := range lr.PerRepeat {
		a := 0.0
		if pm.SLOAttainment != nil {
			a = *pm.SLOAttainment
		}
		p.PerRepeat = append(p.PerRepeat, a)
		p.Attainment = math.Min(p.Attainment, a)
		p.RequestsPerSec += pm.RequestsPerS / float64(len(lr.PerRepeat))
	}
	if len(lr.PerRepeat) == 0 {
		p.Attainment = 0
	}
	p.Pass = len(lr.PerRepeat) > 0 && p.Attainment >= s.cfg.Attainment
	s.res.Probes = append(s.res.Probes, p)
	s.res.Requests += requests
	if p.Pass {
		s.lo = v
	} else {
		s.hi = v
	}
	s.next = s.plan()
	s.res.Answer, s.res.Upper = s.lo, s.hi
	s.res.Done = s.next == 0
}

func (s *searcher) plan() float64 {
	limit := s.cfg.limit(s.open)
	switch {
	case s.hi == 0: // every level so far passed: double
		if s.lo >= limit {
			s.res.Note = fmt.Sprintf("every level up to the limit %s passed: the answer is a lower bound (raise --find-max-limit)", s.fmt(limit))
			return 0
		}
		return s.round(math.Min(2*s.lo, limit))
	case s.lo == 0: // every level so far failed: halve (open loop) or give up at 1
		if !s.open && s.hi <= 1 {
			s.res.Note = "even one request in flight misses the SLO"
			return 0
		}
		if s.open && s.hi <= s.start/64 {
			s.res.Note = fmt.Sprintf("even %s req/s misses the SLO", s.fmt(s.hi))
			return 0
		}
		return s.round(s.hi / 2)
	}
	s.phase = "bisect"
	if s.closed() {
		return 0
	}
	mid := s.round((s.lo + s.hi) / 2)
	if mid <= s.lo || mid >= s.hi {
		return 0
	}
	return mid
}

// closed reports whether the interval [lo, hi) is within the tolerance.
func (s *searcher) closed() bool {
	tol := s.cfg.Tolerance
	if s.cfg.Relative {
		tol *= s.lo
	}
	return s.hi-s.lo <= tol
}

func (s *searcher) fmt(x float64) string {
	if s.open {
		return strconv.FormatFloat(x, 'g', -1, 64) + " req/s"
	}
	return strconv.FormatFloat(x, 'g', -1, 64) + " in flight"
}

// PrintSearch writes the search's path and answer for people.
func PrintSearch(w io.Writer, r *bundle.SearchResult) {
	what, unit := "concurrency", ""
	if r.Loop == "open" {
		what, unit = "rate", " req/s"
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	fmt.Fprintf(w, "Search for the highest %s meeting %s in ≥ %s %% of requests (every repeat):\n", what, r.SLO, num(100*r.Attainment))
	for i, p := range r.Probes {
		verdict := "fail"
		if p.Pass {
			verdict = "pass"
		}
		reps := make([]string, len(p.PerRepeat))
		for j, a := range p.PerRepeat {
			reps[j] = fmt.Sprintf("%.1f", 100*a)
		}
		fmt.Fprintf(w, "  %2d. %-7s %-8s attainment %s %% (worst %.1f %%)  goodput %.2f req/s  p95 %.3f s  %d requests  %s\n",
			i+1, p.Phase, p.Level, strings.Join(reps, "/"), 100*p.Attainment, p.GoodputReqS, p.LatencyP95S, p.Requests, verdict)
	}
	tol := num(r.Tolerance) + unit
	if r.Relative {
		tol = num(100*r.Tolerance) + " %"
	}
	switch {
	case r.Answer == 0 && !r.Done:
		fmt.Fprintf(w, "Answer: none yet: interrupted before a level passed\n")
	case r.Answer == 0:
		fmt.Fprintf(w, "Answer: none: no level tried meets the SLO (%s)\n", r.Note)
	case r.Upper == 0 && !r.Done:
		fmt.Fprintf(w, "Answer: %s ≥ %s%s (interrupted before a level failed: a lower bound)\n", what, num(r.Answer), unit)
	case r.Upper == 0:
		fmt.Fprintf(w, "Answer: %s ≥ %s%s (%s)\n", what, num(r.Answer), unit, r.Note)
	default:
		state := "within the tolerance " + tol
		if !r.Done {
			state = "interrupted before the interval closed to " + tol
		}
		fmt.Fprintf(w, "Answer: %s %s%s: the SLO's limit lies in [%s, %s)%s, %s (%.3g ± %.3g)\n",
			what, num(r.Answer), unit, num(r.Answer), num(r.Upper), unit, state, (r.Answer+r.Upper)/2, (r.Upper-r.Answer)/2)
	}
	fmt.Fprintf(w, "Cost: %d requests over %d levels\n", r.Requests, len(r.Probes))
}

// levels are runPasses's levels: the configured list, or the search's
// next probe once the last one is done (searcher.record).
func (s *Session) levels() iter.Seq[SweepPoint] {
	if s.search == nil {
		return slices.Values(s.cfg.Levels())
	}
	return func(yield func(SweepPoint) bool) {
		for {
			lv, ok := s.search.level()
			if !ok || !yield(lv) {
				return
			}
		}
	}
}
