package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// The run's validity checks (docs/VALIDITY.md): what a capture says about
// itself before any verdict. Each check reads only the capture's own
// records (requests.jsonl, the passes, the manifest's levels, NVML's
// utilization samples) and fires on a trap, staying silent otherwise:
//   - failures: failed requests counted by cause; a scored level with no
//     success fails the run;
//   - warmup: the first pass at a level slower than the same samples later
//     (a first-pass-slower regime), and whether the repeats converged;
//   - cache: samples much faster on every sighting after their first (a
//     cache keyed by content answering replayed inputs);
//   - outliers: one request dominating its pass;
//   - sample_size: intervals on req/s, latency and WER, and a warning where
//     the interval on a level-to-level change holds the knee's threshold;
//   - cotenants: the GPU busy while no request of the capture was in flight,
//     another process's kernels on it, or other processes' CPU time on the
//     cores the server ran on;
//   - overload: an open-loop level whose server fell behind the offered
//     rate while its queue grew.
//
// The thresholds, and why each is where it is:
const (
	// DriftRatio: a pass is slower than the same samples' sightings in the
	// level's other passes when its latency sum is this many times theirs.
	// Repeats of a steady server on a shared 2-core host differ by up to
	// ~20 % (docs/PERFORMANCE.md); half again is beyond that noise.
	DriftRatio = 1.5
	// DriftMinS: and when it is slower by at least this much a request on
	// average: a 1.5× change of a 10 ms answer (a cached one) is the
	// host's scheduling noise, not a regime. It must also exceed the
	// noise: the 95 % t half-width of a difference of two means of the
	// level's requests, each with the spread of its other passes' latencies
	// (a server whose requests vary by ±200 ms moves a pass's mean by that
	// much by chance).
	DriftMinS = 0.05
	// ConvergeShare: two scored repeats converged when their req/s differ
	// by at most this share of their mean (3× the 5 % typical spread of a
	// steady server's repeats here, so noise alone rarely says "did not").
	ConvergeShare = 0.15
	// CacheRatio: a sample is answered from a cache when every later
	// sighting at its first level took at most 1/CacheRatio of its first.
	// Requiring every later sighting (not their median) keeps a noisy
	// sample out; 2× is beyond a steady sample's spread over repeats.
	CacheRatio = 2.0
	// CacheShare: the capture is in a cache-hit regime when this share of
	// its repeated samples is answered from a cache. A server slow for its
	// first few requests (drift) makes those few look cached; three
	// quarters asks for most samples, which drift of part of a pass does
	// not give.
	CacheShare = 0.75
	// OutlierRatio: the slowest request dominates its pass when its
	// latency is at least this many times the pass's median; with N
	// requests it then holds at least OutlierRatio/(OutlierRatio+N-1) of
	// the latency sum (4/11 with 8). Noisy steady servers here reach
	// max/median ≈ 2.
	OutlierRatio = 4.0
	// OutlierMinRequests: a pass needs this many successes for its median
	// to stand for the others.
	OutlierMinRequests = 4
	// Confidence is the level of every interval the checks give.
	Confidence = 0.95
	// RepeatsForT: req/s's interval is Student's t over the scored repeats
	// from this many; with fewer (t's quantile is 12.7 for two, so any
	// noise spans every conclusion) it stands on the requests instead: a
	// closed loop's throughput is its concurrency over its mean latency
	// (Little's law), so req/s takes the mean latency's relative interval;
	// an open loop's is a count of completions in the pass's time,
	// relative error 1/√n.
	RepeatsForT = 3
	// BootstrapResamples: for the p95 and WER intervals (percentile
	// bootstrap, fixed seed, so a capture's intervals do not change
	// between analyses).
	BootstrapResamples = 1000
	// OverloadAchieved: an open-loop pass fell behind when it completed
	// fewer than this share of the offered rate over its wall time (the
	// wall includes draining the last requests, which costs a few percent
	// on a server that keeps up).
	OverloadAchieved = 0.85
	// OverloadGrowth: and its queue grew when the mean latency of its last
	// third of requests (by intended send time) is this many times that of
	// its first third; a server that keeps up shows a ratio near 1.
	OverloadGrowth = 2.0
	// CoTenantGPUIdle: the GPU is busy for someone else when NVML's mean
	// utilization over the samples with no request in flight is at least
	// this (percent). A served model's own idle GPU reads 0 %; 20 points
	// is NVML's disagreement with a kernel union (docs/GPU.md: 4 points)
	// several times over.
	CoTenantGPUIdle = 20.0
	// CoTenantMinSamples: NVML samples needed with nothing in flight.
	CoTenantMinSamples = 5
	// CoTenantSMPct: another process ran kernels on the target's GPU when
	// NVML's per-process samples give it this SM share (percent) in at
	// least CoTenantProcSamples samples of a level's scored passes (a
	// monitoring tool's process reads 0 %; a matmul loop beside a server
	// read 82 % on the H200, docs/GPU.md).
	CoTenantSMPct       = 10.0
	CoTenantProcSamples = 2
	// CoTenantCPUShare: other processes held the cores the server ran on
	// when their CPU time there (the cores' busy time from /proc/stat
	// less the target tree's and asrprof's own, plus steal) is at least
	// this share of those cores' time over a level's scored passes. A
	// CPU-bound server that gets half of its cores works at half speed
	// while it competes. It reads presence, not harm: on this
	// repository's shared 2-core host the other engineers' work alone
	// read 80-93 % of the test servers' cores (docs/VALIDITY.md).
	CoTenantCPUShare = 0.5
	// CoTenantCoreShare: the server ran on a core when at least this share
	// of its CPU time in the level's scored passes was put there (the
	// proc probe's samples put a thread's time on the core it was on at
	// the next one, so a thread that moves leaves crumbs elsewhere).
	CoTenantCoreShare = 0.05
	// CoTenantMinCPUS: and when it used at least this much CPU (seconds)
	// in them at all; a server that did not run has no cores to share.
	CoTenantMinCPUS = 0.02
	// KneeThreshold is the knee's rule by default (the knee_threshold
	// option of the analyses, lib/knee.star): throughput rising less than
	// this share from one level to the next while latency rises more.
	KneeThreshold = 0.10
	// FailureMessageChars: a server's message is trimmed to this.
	FailureMessageChars = 100
)

// The checks, in the order they print.
const (
	CheckFailures   = "failures"
	CheckWarmup     = "warmup"
	CheckCache      = "cache"
	CheckOutliers   = "outliers"
	CheckSampleSize = "sample_size"
	CheckCoTenants  = "cotenants"
	CheckOverload   = "overload"
)

// ValidityChecks lists the checks in print order.
var ValidityChecks = []string{CheckFailures, CheckWarmup, CheckCache, CheckOutliers, CheckSampleSize, CheckCoTenants, CheckOverload}

// Severities of a finding.
const (
	// SeverityFail: the level's numbers stand on nothing (no success):
	// the diagnosis refuses its verdict, and the capture exits non-zero.
	SeverityFail = "fail"
	// SeverityWarn: the verdict stands, qualified by the finding.
	SeverityWarn = "warn"
	// SeverityNote: worth knowing, undercuts nothing (a warmup pass that
	// absorbed a slow start).
	SeverityNote = "note"
)

// ValidityInput is what Validity reads.
type ValidityInput struct {
	Reqs   []model.Request  // every request, warmup included
	Levels []model.LevelRun // the passes in run order
	// KneeThreshold is the knee's rule (lib/knee.star, the
	// knee_threshold option): throughput rising less than this share
	// from one level to the next.
	KneeThreshold float64
	GPU           []bundle.GPURecord // NVML utilization samples (ReadGPU; nil: no gpu probe)
	// GPUProcs are NVML's per-process samples, the target's and others'
	// (gpu.jsonl's kind proc).
	GPUProcs []bundle.GPURecord // gpu.jsonl's per-process samples (ReadGPU)
	// Cores are the proc probe's per-core records (proc_cpus.jsonl; nil:
	// no proc probe).
	Cores []bundle.CPURecord
	// Models are the ids the target's /v1/models listed, and Model the
	// one the requests named ("": none), for a failure that names the
	// model.
	Models []string
	Model  string
	// PIDUnknown is why the capture did not know the server's process
	// (the manifest's target_pid_how), "" where it did: the co-tenant
	// checks cannot tell the target from others without it.
	PIDUnknown string
}

// Finding is one check that fired.
type Finding struct {
	Check    string `json:"check"`
	Severity string `json:"severity"`
	// Level is the level it concerns ("" for the whole capture).
	Level string `json:"level,omitempty"`
	// Text is the finding for people, one line; Fix what to do.
	Text string `json:"text"`
	Fix  string `json:"fix,omitempty"`
	// PassesAffected of PassesScored: the scored passes it concerns.
	PassesAffected int `json:"passes_affected,omitempty"`
	PassesScored   int `json:"passes_scored,omitempty"`
	// Sample names the sample it concerns (outliers), "" for none.
	Sample string `json:"sample,omitempty"`
}

// FailureCause is one cause of failed requests at a level.
type FailureCause struct {
	Level string `json:"level"`
	Cause string `json:"cause"` // "HTTP 404: the server's message", "timeout", ...
	Count int    `json:"count"`
}

// LevelIntervals are a scored level's intervals; each one's N is what it
// stands on: passes (req/s) or requests.
type LevelIntervals struct {
	Level      string           `json:"level"`
	Passes     int              `json:"passes"`
	OK         int              `json:"ok"`
	Failed     int              `json:"failed"`
	ReqS       bundle.Estimate  `json:"req_s"`                 // over scored passes (t), or from the requests (RepeatsForT)
	ReqSBasis  string           `json:"req_s_basis,omitempty"` // "repeats" or "requests"
	LatMeanS   bundle.Estimate  `json:"latency_mean_s"`        // over successful requests (t)
	LatP95S    bundle.Estimate  `json:"latency_p95_s"`         // bootstrap over requests
	WER        *bundle.Estimate `json:"wer,omitempty"`         // bootstrap over scored requests; nil without references
	Converged  *bool            `json:"converged,omitempty"`
	ConvergeBy float64          `json:"converge_spread,omitempty"` // the last two repeats' req/s difference over their mean
}

// ValidityResult is the capture's validity: the findings (checks that
// fired), the checks that ran and those that could not, and the numbers
// the findings stand on.
type ValidityResult struct {
	Findings  []Finding         `json:"findings"`
	Ran       []string          `json:"ran"`
	NotRun    map[string]string `json:"not_run,omitempty"` // check → why
	Failures  []FailureCause    `json:"failures,omitempty"`
	Intervals []LevelIntervals  `json:"intervals,omitempty"`
	// FailedLevels are the scored levels without one successful request.
	FailedLevels []string `json:"failed_levels,omitempty"`
	// CPUShares are the co-tenant check's readings of the cores the
	// server ran on, per scored level, fired or not.
	CPUShares []CPUShare `json:"cpu_shares,omitempty"`
}

// CPUShare is who used the cores the server ran on over a level's scored
// passes, as shares of those cores' time.
type CPUShare struct {
	Level  string  `json:"level"`
	Cores  []int   `json:"cores"`
	Target float64 `json:"target"` // the target's process tree
	Self   float64 `json:"self"`   // asrprof's own process
	Others float64 `json:"others"` // everyone else, steal included
}

// Fired reports whether check fired at level (or for the whole capture).
func (v *ValidityResult) Fired(check, level string) bool {
	return slices.ContainsFunc(v.Findings, func(f Finding) bool { return f.Check == check && (f.Level == level || f.Level == "") })
}

type vPassKey struct {
	level  string
	repeat int
	warmup bool
}

// Validity runs the checks over in.
func Validity(in ValidityInput) *ValidityResult {
	v := &ValidityResult{Findings: []Finding{}, NotRun: map[string]string{}}
	passes := map[vPassKey][]int{} // request indexes per pass, in start order
	for i, r := range in.Reqs {
		k := vPassKey{r.Level, r.Repeat, r.Warmup}
		passes[k] = append(passes[k], i)
	}
	for _, ix := range passes {
		slices.SortFunc(ix, func(a, b int) int { return cmp.Compare(in.Reqs[a].StartUnixNs, in.Reqs[b].StartUnixNs) })
	}
	var levels []string // scored levels in run order
	for _, l := range in.Levels {
		if !l.Warmup && !slices.Contains(levels, l.Level) {
			levels = append(levels, l.Level)
		}
	}
	c := &checker{in: in, v: v, passes: passes, levels: levels}
	c.failures()
	c.overload() // before warmup: an overloaded level's latencies are its queue's
	cached := c.cache()
	c.warmup(cached)
	c.outliers()
	c.sampleSize() // after outliers: a step an outlier widens is its
	c.cotenants()
	c.byCoTenants()
	slices.SortStableFunc(v.Findings, func(a, b Finding) int { // in print order
		return cmp.Compare(slices.Index(ValidityChecks, a.Check), slices.Index(ValidityChecks, b.Check))
	})
	v.Ran = slices.DeleteFunc(slices.Clone(ValidityChecks), func(ch string) bool { return v.NotRun[ch] != "" }) // every reason says something
	if len(v.NotRun) == 0 {
		v.NotRun = nil
	}
	return v
}

type checker struct {
	in     ValidityInput
	v      *ValidityResult
	passes map[vPassKey][]int
	levels []string // the scored levels in run order (in.Levels are the passes)
}

func (c *checker) ok(i int) bool { return c.in.Reqs[i].Status == model.StatusOK }

// reqs are the indexes of pass l's requests, in start order.
func (c *checker) reqs(l model.LevelRun) []int {
	return c.passes[vPassKey{l.Level, l.Repeat, l.Warmup}]
}

// okReqs are the indexes of pass l's successful requests, in start order.
func (c *checker) okReqs(l model.LevelRun) []int {
	return slices.DeleteFunc(slices.Clone(c.reqs(l)), func(i int) bool { return !c.ok(i) })
}

// scored are the scored passes of level, in run order.
func (c *checker) scored(level string) []model.LevelRun {
	return slices.DeleteFunc(slices.Clone(c.in.Levels), func(l model.LevelRun) bool { return l.Level != level || l.Warmup })
}

func (c *checker) add(f Finding) { c.v.Findings = append(c.v.Findings, f) }

// failures counts failed requests by cause per level; a scored level
// without a success fails.
func (c *checker) failures() {
	for _, lv := range c.levels {
		counts := map[string]int{}
		sc := c.scored(lv)
		f := Finding{Check: CheckFailures, Level: lv, Severity: SeverityWarn, PassesScored: len(sc)}
		total, ok, backlog := 0, 0, 0
		for _, p := range sc {
			n := ok
			for _, i := range c.reqs(p) {
				total++
				if c.ok(i) {
					ok++
					continue
				}
				r := &c.in.Reqs[i]
				cause := FailureCauseOf(r)
				counts[cause]++
				if (cause == "connection reset" || cause == "connection closed early") && r.ConnectedUnixNs > 0 && slowConnect(float64(r.ConnectedUnixNs-r.StartUnixNs)/1e9) {
					backlog++
				}
			}
			if ok-n < len(c.reqs(p)) {
				f.PassesAffected++
			}
		}
		if total == ok {
			continue
		}
		causes := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
			return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
		})
		var parts []string
		for _, k := range causes {
			c.v.Failures = append(c.v.Failures, FailureCause{Level: lv, Cause: k, Count: counts[k]})
			parts = append(parts, fmt.Sprintf("%d × %s", counts[k], k))
		}
		if ok == 0 {
			f.Severity = SeverityFail
			c.v.FailedLevels = append(c.v.FailedLevels, lv)
			f.Text = fmt.Sprintf("all %d requests failed: %s; the level measured no transcription, so it has no verdict", total, strings.Join(parts, ", "))
			f.Fix = "check --target (host, port), --endpoint (the path) and the server's log; requests.jsonl has every error"
			switch {
			// a refusal (4xx) that names the model: not "HTTP 503: model
			// is still loading"
			case len(c.in.Models) > 0 && slices.ContainsFunc(causes, func(k string) bool {
				return strings.HasPrefix(k, "HTTP 4") && strings.Contains(strings.ToLower(k), "model")
			}):
				f.Fix = fmt.Sprintf("the requests named %s and the server lists %s at /v1/models: give --model with one it lists", cmp.Or(c.in.Model, "no model"), strings.Join(c.in.Models, ", "))
			case slices.ContainsFunc(causes, func(k string) bool { return strings.HasPrefix(k, "HTTP 401") || strings.HasPrefix(k, "HTTP 403") }):
				f.Fix = `the server refused the requests' credentials: give its API key with --header "Authorization: Bearer KEY" (vLLM's and SGLang's --api-key)`
			}
		} else {
			f.Text = fmt.Sprintf("%d of %d requests failed: %s; the level's numbers stand on the %d that succeeded", total-ok, total, strings.Join(parts, ", "), ok)
			f.Fix = "the server's log says why; failed requests are left out of latency and WER but count against throughput's successes"
		}
		if backlog > 0 { // reset or closed after a SYN sent again: the listen backlog was full
			f.Text += fmt.Sprintf("; %d of them waited a second or more for their connection (a SYN dropped and sent again), then were reset or closed: the server's listen backlog was full at this concurrency", backlog)
			f.Fix = "a listen backlog as large as the concurrency (socketserver's request_queue_size is 5 in Python's http.server; uvicorn's --backlog), or connections kept alive"
		}
		c.add(f)
	}
}

var httpStatusPrefix = regexp.MustCompile(`^http status (\d+):\s*`)

// FailureCauseOf names why r failed, for people: "HTTP 404: the
// server's message" (its JSON error field when it sent one, trimmed),
// "timeout", "connection reset", or the error kind and message.
func FailureCauseOf(r *model.Request) string {
	msg := strings.TrimSpace(r.Error)
	switch r.ErrorKind {
	case model.FailTimeout:
		return "timeout"
	case model.FailCanceled:
		return "canceled (the capture stopped)"
	case model.FailConnection:
		for _, c := range [][2]string{{"reset", "connection reset"}, {"refused", "connection refused"}, {"EOF", "connection closed early"},
			{"broken pipe", "connection closed during the upload (broken pipe: the server may have answered before reading it)"}} {
			if strings.Contains(msg, c[0]) {
				return c[1]
			}
		}
	}
	if r.HTTPStatus >= 400 || httpStatusPrefix.MatchString(msg) {
		status := r.HTTPStatus
		if m := httpStatusPrefix.FindStringSubmatch(msg); m != nil {
			status, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		if s := serverMessage(msg); s != "" && !strings.EqualFold(s, fmt.Sprintf("HTTP %d", status)) {
			return fmt.Sprintf("HTTP %d: %s", status, trim(s))
		}
		return fmt.Sprintf("HTTP %d", status)
	}
	kind := strings.ReplaceAll(cmp.Or(r.ErrorKind, "failed"), "_", " ")
	if msg == "" {
		return kind
	}
	return kind + ": " + trim(msg)
}

// serverMessage is the message in a server's error body: the "error",
// "detail" or "message" field of a JSON object (or of its "error"
// object), else the body itself.
func serverMessage(body string) string {
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) != nil {
		return body
	}
	for _, k := range []string{"error", "detail", "message"} {
		switch x := m[k].(type) {
		case string:
			return x
		case map[string]any:
			if s, ok := x["message"].(string); ok {
				return s
			}
		}
	}
	return body
}

func trim(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > FailureMessageChars {
		return string(r[:FailureMessageChars-1]) + "…"
	}
	return s
}

// cache finds the samples answered from a cache: slower at their first
// sighting than at every later one at the same level by CacheRatio. It
// returns the requests that were such first sightings (to leave out of
// the warmup check when the regime is there).
func (c *checker) cache() map[int]bool {
	by := map[string][]int{} // each sample's sightings: its successful requests
	for i, r := range c.in.Reqs {
		if c.ok(i) {
			by[r.SampleID] = append(by[r.SampleID], i)
		}
	}
	first := map[int]bool{}
	cachedSample := map[string]bool{}
	repeated := 0
	var ratios []float64
	for id, ix := range by {
		slices.SortFunc(ix, func(a, b int) int { return cmp.Compare(c.in.Reqs[a].StartUnixNs, c.in.Reqs[b].StartUnixNs) })
		f := &c.in.Reqs[ix[0]]
		var later []float64
		for _, i := range ix[1:] {
			if c.in.Reqs[i].Level == f.Level {
				later = append(later, c.in.Reqs[i].LatencyS)
			}
		}
		if len(later) == 0 {
			continue
		}
		repeated++
		if m := slices.Max(later); m > 0 {
			ratios = append(ratios, f.LatencyS/m)
		}
		if slices.Max(later)*CacheRatio <= f.LatencyS {
			cachedSample[id] = true
			first[ix[0]] = true
		}
	}
	if repeated == 0 {
		c.v.NotRun[CheckCache] = "no sample was sent twice at one level"
		return nil
	}
	if float64(len(cachedSample)) < CacheShare*float64(repeated) {
		return nil
	}
	// the scored passes whose requests were mostly later sightings of
	// cached samples
	affected, scored := 0, 0
	for _, l := range c.in.Levels {
		if l.Warmup {
			continue
		}
		scored++
		ok, hit := c.okReqs(l), 0
		for _, i := range ok {
			if cachedSample[c.in.Reqs[i].SampleID] && !first[i] {
				hit++
			}
		}
		if len(ok) > 0 && 2*hit >= len(ok) {
			affected++
		}
	}
	c.add(Finding{Check: CheckCache, Severity: SeverityWarn, PassesAffected: affected, PassesScored: scored,
		Text: fmt.Sprintf("cache-hit regime: %d of %d repeated samples took at most 1/%g of their first time on every later sighting (first over slowest later: median %.1f×); %d of %d scored passes ran mostly on such repeats",
			len(cachedSample), repeated, CacheRatio, stats.Percentile(ratios, 50), affected, scored),
		Fix: "send unique inputs per repeat (a dataset as large as all the passes, --pass-requests with fresh audio), or turn the server's cache off"})
	return first
}

// warmup compares each level's passes with the same samples' sightings in
// its other passes: the first pass slower is a first-pass-slower regime;
// the last two scored repeats' req/s say whether the repeats converged.
func (c *checker) warmup(skip map[int]bool) {
	ran := false
	for _, lv := range c.levels {
		runs := slices.DeleteFunc(slices.Clone(c.in.Levels), func(l model.LevelRun) bool { return l.Level != lv }) // warmup first
		li := c.levelIntervals(lv)
		if sc := c.scored(lv); len(sc) >= 2 {
			a, b := c.passReqS(sc[len(sc)-2]), c.passReqS(sc[len(sc)-1])
			if m := (a + b) / 2; m > 0 {
				spread := math.Abs(a-b) / m
				conv := spread <= ConvergeShare
				li.Converged, li.ConvergeBy = &conv, spread
			}
		}
		if len(runs) < 2 || c.v.Fired(CheckOverload, lv) {
			continue // (an overloaded level's latency is the pass's length)
		}
		here, other := map[string][]float64{}, map[string][]float64{} // sample → latencies in the first pass, in the others
		// the first pass's connections that waited for a SYN's retry
		slow := 0
		for pi, l := range runs {
			into := other
			if pi == 0 {
				into = here
			}
			for _, i := range c.okReqs(l) {
				if r := &c.in.Reqs[i]; !skip[i] {
					into[r.SampleID] = append(into[r.SampleID], r.LatencyS)
					if pi == 0 && r.ConnectedUnixNs > 0 && slowConnect(float64(r.ConnectedUnixNs-r.StartUnixNs)/1e9) {
						slow++
					}
				}
			}
		}
		// the first pass against the others, over the samples they share
		var own, ref float64
		var others []float64 // the other passes' latencies, for the noise
		n := 0
		for id, h := range here {
			if o := other[id]; len(o) > 0 {
				own += stats.Mean(h)
				ref += stats.Percentile(o, 50)
				others = append(others, o...)
				n++
			}
		}
		if n == 0 || !(ref > 0) {
			continue
		}
		ran = true
		// noise: the half-width of the t interval of a difference of
		// two means of n requests, each with the other passes' spread
		noise := 0.0
		if sd, ok := stats.StdDev(others); ok && n > 1 {
			noise = stats.StudentTQuantile(0.975, n-1) * sd * math.Sqrt(2/float64(n))
		}
		r0 := own / ref
		if r0 < DriftRatio || (own-ref)/float64(n) < max(DriftMinS, noise) {
			continue
		}
		first := runs[0]
		conv := "one scored repeat: convergence not measured"
		if li.Converged != nil && !*li.Converged {
			conv = fmt.Sprintf("the scored repeats did not converge (the last two differ by %.0f %% in req/s)", 100*li.ConvergeBy)
		} else if li.Converged != nil {
			conv = fmt.Sprintf("the last two scored repeats converged (within %.0f %% in req/s)", 100*li.ConvergeBy)
		}
		if slow > 0 {
			conv += fmt.Sprintf("; %d of its requests waited a second or more for a new connection (a SYN sent again: the blackbox analysis's connection setup)", slow)
		}
		f := Finding{Check: CheckWarmup, Level: lv, PassesScored: len(c.scored(lv))}
		if first.Warmup {
			f.Severity = SeverityNote
			f.Text = fmt.Sprintf("first-pass-slower regime: the warmup pass took %.1f× the same samples' later time; the warmup absorbed it; %s", r0, conv)
		} else {
			f.Severity, f.PassesAffected = SeverityWarn, 1
			f.Text = fmt.Sprintf("first-pass-slower regime: scored repeat %d took %.1f× the same samples' time in the level's other passes; %s", first.Repeat, r0, conv)
			f.Fix = "run a warmup pass (--warmup) and enough repeats that the last ones agree (--repeats 3 or more)"
		}
		c.add(f)
	}
	if !ran {
		c.v.NotRun[CheckWarmup] = "no level has two passes with a sample in common"
	}
}

// ChecksByLoad are the checks that compare a level's passes with each other: a
// co-tenant that slows them unevenly may fire them.
var ChecksByLoad = []string{CheckWarmup, CheckOutliers, CheckSampleSize}

// byCoTenants says, in each warning of ChecksByLoad at a level where the
// co-tenant check warned too, that the co-tenant may be its cause: the
// reader then fixes the co-tenant before reading the passes' spread as
// the server's.
func (c *checker) byCoTenants() {
	loaded := map[string]bool{}
	for _, f := range c.v.Findings {
		if f.Check == CheckCoTenants && f.Severity == SeverityWarn {
			loaded[f.Level] = true
		}
	}
	for i := range c.v.Findings {
		if f := &c.v.Findings[i]; loaded[f.Level] && f.Severity == SeverityWarn && slices.Contains(ChecksByLoad, f.Check) {
			f.Text += "; other processes shared the server's cores at this level (the co-tenants finding), which slows passes unevenly: this may be theirs"
		}
	}
}

// passReqS is the pass's successes over its wall time.
func (c *checker) passReqS(l model.LevelRun) float64 {
	wall := l.Wall()
	if wall <= 0 {
		return 0
	}
	return float64(len(c.okReqs(l))) / wall
}

// outliers names a sample whose request dominates its passes.
func (c *checker) outliers() {
	ran := false
	for _, lv := range c.levels {
		type hit struct { // sums over the passes the sample dominates
			n                                    int
			ratio, lat, med, shareSum, shareWall float64
		}
		bySample := map[string]*hit{}
		scored := c.scored(lv)
		for _, l := range scored {
			var lats []float64
			ok := c.okReqs(l)
			for _, i := range ok {
				lats = append(lats, c.in.Reqs[i].LatencyS)
			}
			if len(lats) < OutlierMinRequests {
				continue
			}
			ran = true
			med, mx := stats.Percentile(lats, 50), slices.Max(lats)
			if med <= 0 || mx < OutlierRatio*med {
				continue
			}
			id := c.in.Reqs[ok[slices.Index(lats, mx)]].SampleID // the first slowest
			h := entry(bySample, id)
			h.n, h.ratio, h.lat, h.med = h.n+1, h.ratio+mx/med, h.lat+mx, h.med+med
			h.shareSum += mx / stats.Sum(lats)
			if wall := l.Wall(); wall > 0 {
				h.shareWall += min(1, mx/wall)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(bySample)) {
			h := bySample[id]
			n := float64(h.n)
			c.add(Finding{Check: CheckOutliers, Severity: SeverityWarn, Level: lv, Sample: id,
				PassesAffected: h.n, PassesScored: len(scored),
				Text: fmt.Sprintf("sample %s dominates %d of %d scored passes: %.2f s against the pass's median %.2f s (%.0f×), %.0f %% of the latency sum and %.0f %% of the pass's wall time",
					id, h.n, len(scored), h.lat/n, h.med/n, h.ratio/n, 100*(h.shareSum/n), 100*(h.shareWall/n)),
				Fix: "look at the maximum, not the mean or p90: transcribe this sample alone (a runaway decode, a length limit), or leave it out and say so"})
		}
	}
	if !ran {
		c.v.NotRun[CheckOutliers] = fmt.Sprintf("no scored pass has %d successful requests", OutlierMinRequests)
	}
}

// levelIntervals is the interval record of lv, made on first use.
func (c *checker) levelIntervals(lv string) *LevelIntervals {
	i := slices.IndexFunc(c.v.Intervals, func(iv LevelIntervals) bool { return iv.Level == lv })
	if i < 0 {
		i, c.v.Intervals = len(c.v.Intervals), append(c.v.Intervals, LevelIntervals{Level: lv})
	}
	return &c.v.Intervals[i]
}

// tInterval is the mean of xs (each ≥ 0) with its t interval at
// Confidence, cut at 0 (no interval, NaN, for one value).
func tInterval(xs []float64) bundle.Estimate {
	iv := bundle.Estimate{Value: stats.Mean(xs), Lo: math.NaN(), Hi: math.NaN(), N: len(xs)}
	if len(xs) == 0 {
		iv.Value = math.NaN()
		return iv
	}
	sd, ok := stats.StdDev(xs)
	if !ok {
		return iv
	}
	// two-sided, at Confidence (0.95)
	h := stats.StudentTQuantile(0.975, len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
	iv.Lo, iv.Hi = max(0, iv.Value-h), iv.Value+h // latencies and rates are not negative
	return iv
}

// sampleSize gives each scored level its intervals and warns where the
// interval on a level-to-level change in req/s holds the knee's
// threshold: the knee's conclusion there is not resolved.
func (c *checker) sampleSize() {
	ivs := make([]*LevelIntervals, len(c.levels)) // every level's row first: they stay put below
	for li, lv := range c.levels {
		ivs[li] = c.levelIntervals(lv)
	}
	var boot sync.WaitGroup // the bootstraps run at once: each has its own seed
	for li, lv := range c.levels {
		iv := ivs[li]
		sc := c.scored(lv)
		var rps, lats, errs, refs []float64
		for _, l := range sc {
			rps = append(rps, c.passReqS(l))
			for _, i := range c.reqs(l) {
				r := &c.in.Reqs[i]
				if !c.ok(i) {
					iv.Failed++
					continue
				}
				iv.OK++
				lats = append(lats, r.LatencyS)
				if r.Scored && r.Errors != nil {
					errs = append(errs, float64(r.Errors.Sub+r.Errors.Del+r.Errors.Ins))
					refs = append(refs, float64(r.Errors.RefWords))
				}
			}
		}
		iv.Passes = len(sc)
		iv.LatMeanS = tInterval(lats)
		iv.ReqS = tInterval(rps)
		switch lat := iv.LatMeanS; {
		case len(rps) >= RepeatsForT:
			iv.ReqSBasis = "repeats"
		case iv.OK == 0:
		case sc[0].Rate <= 0 && !math.IsNaN(lat.Lo) && lat.Value > 0: // from the requests (RepeatsForT says why)
			rel, v := (lat.Hi-lat.Value)/lat.Value, iv.ReqS.Value
			iv.ReqS.Lo, iv.ReqS.Hi, iv.ReqSBasis = v/(1+rel), math.Inf(1), "requests"
			if rel < 1 {
				iv.ReqS.Hi = v / (1 - rel)
			}
		default:
			iv.ReqS.Lo, iv.ReqS.Hi = math.NaN(), math.NaN()
		}
		iv.LatP95S = bundle.Estimate{Value: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), N: len(lats)}
		if len(lats) > 0 {
			iv.LatP95S.Value = stats.Percentile(lats, 95)
			boot.Go(func() {
				iv.LatP95S.Lo, iv.LatP95S.Hi, _ = stats.BootstrapPercentileCI(lats, 95, Confidence, BootstrapResamples, uint64(li+1))
			})
		}
		if len(refs) > 0 && stats.Sum(refs) > 0 {
			iv.WER = &bundle.Estimate{Value: stats.Sum(errs) / stats.Sum(refs), N: len(refs)}
			boot.Go(func() {
				iv.WER.Lo, iv.WER.Hi, _ = stats.BootstrapRatioCI(errs, refs, Confidence, BootstrapResamples, uint64(li+1))
			})
		}
	}
	boot.Wait()
	if !slices.ContainsFunc(c.v.Intervals, func(iv LevelIntervals) bool { return iv.OK > 0 }) {
		c.v.NotRun[CheckSampleSize] = "no level has a successful request"
		return
	}
	// The knee's steps: from one closed-loop level to the next by
	// concurrency, whatever order they ran in (lib/knee.star's
	// in_load_order; the knee is a concurrency sweep's; whether an open
	// loop keeps up is the overload check's). A step where the outlier
	// check fired is that check's: one runaway request widens every
	// interval it is in; so is a cache-hit regime's (first sightings slow,
	// the rest fast).
	closed := slices.DeleteFunc(slices.Clone(c.levels), func(lv string) bool {
		n, _, ok := model.ParseLevel(lv)
		return !ok || n <= 0
	})
	slices.SortStableFunc(closed, model.CompareLevels) // by concurrency
	th := c.in.KneeThreshold
	knee := -1 // the step that makes the knee (lib/knee.star's rule): the first such
	for i := 1; i < len(closed); i++ {
		a, b := c.levelIntervals(closed[i-1]), c.levelIntervals(closed[i])
		if knee < 0 && a.ReqS.Value > 0 && a.LatMeanS.Value > 0 && b.OK > 0 {
			dReq, dLat := b.ReqS.Value/a.ReqS.Value-1, b.LatMeanS.Value/a.LatMeanS.Value-1
			if dReq < th && dLat > dReq {
				knee = i
			}
		}
		if a.ReqS.Value <= 0 || b.OK == 0 || a.OK == 0 {
			continue
		}
		if c.v.Fired(CheckOutliers, a.Level) || c.v.Fired(CheckOutliers, b.Level) || c.v.Fired(CheckCache, "") {
			continue
		}
		d := b.ReqS.Value/a.ReqS.Value - 1
		step := model.LevelLabel(a.Level) + " to " + model.LevelLabel(b.Level)
		concl := "whether throughput still rises here is not resolved"
		if i == knee {
			concl = fmt.Sprintf("the knee drawn here (saturated from %s: req/s rose under %.0f %% while latency rose %+.0f %%) is not resolved", model.LevelLabel(a.Level), 100*th, 100*(b.LatMeanS.Value/a.LatMeanS.Value-1))
		}
		if math.IsNaN(a.ReqS.Lo) || math.IsNaN(b.ReqS.Lo) {
			c.add(Finding{Check: CheckSampleSize, Severity: SeverityWarn, Level: b.Level,
				Text: fmt.Sprintf("req/s changes %+.0f %% from %s with no interval at one of them, so whether it rises by more than the knee's %.0f %% is not known: %s", 100*d, step, 100*th, concl),
				Fix:  "run 3 or more repeats (--repeats 3) of several requests each"})
			continue
		}
		lo, hi := math.Inf(-1), math.Inf(1)
		if a.ReqS.Hi > 0 {
			lo = max(b.ReqS.Lo, 0)/a.ReqS.Hi - 1
		}
		if a.ReqS.Lo > 0 {
			hi = b.ReqS.Hi/a.ReqS.Lo - 1
		}
		if lo < th && th < hi {
			c.add(Finding{Check: CheckSampleSize, Severity: SeverityWarn, Level: b.Level,
				Text: fmt.Sprintf("req/s changes %+.0f %% from %s, %.0f %% interval [%s, %s]: it holds the knee's %.0f %%, so %s",
					100*d, step, 100*Confidence, pctText(lo), pctText(hi), 100*th, concl),
				Fix: "more repeats narrow the interval (it shrinks as 1/√repeats), or more requests per pass (--pass-requests)"})
		}
	}
}

func pctText(x float64) string {
	if math.IsInf(x, 0) {
		return fmt.Sprintf("%v", x)
	}
	return fmt.Sprintf("%+.0f %%", 100*x)
}

// cotenants: NVML's utilization while no request of the capture was in
// flight (inside the scored passes).
func (c *checker) cotenants() {
	if len(c.in.GPU) == 0 && len(c.in.GPUProcs) == 0 && len(c.in.Cores) == 0 {
		c.v.NotRun[CheckCoTenants] = "no NVML samples (gpu probe off or no GPU) and no per-core CPU record (the proc probe's)"
		if c.in.PIDUnknown != "" {
			c.v.NotRun[CheckCoTenants] += ", which needs the server's pid: " + c.in.PIDUnknown
		}
		return
	}
	c.cpuCoTenants()
	if len(c.in.GPU) == 0 && len(c.in.GPUProcs) == 0 {
		return
	}
	c.otherProcesses()
	// request intervals, merged
	var merged []interval
	for _, r := range c.in.Reqs {
		merged = append(merged, interval{r.StartUnixNs, r.EndUnixNs})
	}
	merged = merge(merged)
	inFlight := func(t int64) bool {
		k, _ := slices.BinarySearchFunc(merged, t, func(s interval, t int64) int { return cmp.Compare(s.a, t) })
		// merged[k-1].a <= t
		return k > 0 && t <= merged[k-1].b
	}
	idle := map[string][]float64{}
	for _, g := range c.in.GPU {
		// NVML's utilization is over the sample period before TS: one
		// sample is idle when its timestamp is outside every request
		lv := c.scoredAt(g.TS)
		if lv != "" && !inFlight(g.TS) {
			idle[lv] = append(idle[lv], g.UtilPct)
		}
	}
	for _, lv := range c.levels {
		xs := idle[lv]
		if len(xs) < CoTenantMinSamples {
			continue
		}
		if m := stats.Mean(xs); m >= CoTenantGPUIdle {
			c.add(Finding{Check: CheckCoTenants, Severity: SeverityWarn, Level: lv,
				Text: fmt.Sprintf("the GPU was busy %.0f %% (NVML, mean of %d samples) while none of the capture's requests was in flight: another process ran kernels on it", m, len(xs)),
				Fix:  "run on a GPU no one else uses (nvidia-smi's process list during the run), or measure the co-tenant's share and say it"})
		}
	}
}

// scoredAt is the level of the scored pass that ran at t ("" for none).
func (c *checker) scoredAt(t int64) string {
	for _, l := range c.in.Levels {
		if !l.Warmup && l.StartUnixNs <= t && t <= l.EndUnixNs {
			return l.Level
		}
	}
	return ""
}

// otherProcesses: NVML's per-process samples of processes outside the
// target's tree that ran kernels during a level's scored passes. NVML
// names host pids: where none of its samples is the target's own, the
// two cannot be told apart (a container), and that is said instead.
func (c *checker) otherProcesses() {
	targetSeen := slices.ContainsFunc(c.in.GPUProcs, func(p bundle.GPURecord) bool { return !p.Other })
	type key struct {
		level string
		pid   int
	}
	busy := map[key][]float64{}
	var pids []int
	for _, p := range c.in.GPUProcs {
		lv := c.scoredAt(p.TS)
		if !p.Other || lv == "" || float64(p.SMPct) < CoTenantSMPct {
			continue
		}
		busy[key{lv, p.PID}] = append(busy[key{lv, p.PID}], float64(p.SMPct))
		if !slices.Contains(pids, p.PID) {
			pids = append(pids, p.PID)
		}
	}
	if len(busy) == 0 {
		return
	}
	if !targetSeen && c.in.PIDUnknown != "" {
		c.add(Finding{Check: CheckCoTenants, Severity: SeverityNote,
			Text: fmt.Sprintf("NVML names processes running kernels (pids %v), but the capture did not know the server's pid (%s): a co-tenant cannot be told from the target", pids, c.in.PIDUnknown),
			Fix:  pidFix})
		return
	}
	if !targetSeen {
		c.add(Finding{Check: CheckCoTenants, Severity: SeverityNote,
			Text: fmt.Sprintf("NVML names processes running kernels that are not in the target's tree (pids %v) and none that is: in a container NVML's pids are the host's, so a co-tenant cannot be told from the target", pids),
			Fix:  "compare nvidia-smi's process list with the server's host pid, or capture on the host"})
		return
	}
	for _, lv := range c.levels {
		for _, pid := range pids {
			xs := busy[key{lv, pid}]
			if len(xs) < CoTenantProcSamples {
				continue
			}
			c.add(Finding{Check: CheckCoTenants, Severity: SeverityWarn, Level: lv,
				Text: fmt.Sprintf("process %d, not the target's, ran kernels on its GPU during the level: SM %.0f %% on average, up to %.0f %%, in %d NVML samples", pid, stats.Mean(xs), slices.Max(xs), len(xs)),
				Fix:  "run on a GPU no one else uses, or measure the co-tenant's share and say it"})
		}
	}
}

// overload: an open-loop level that completed less than it was offered
// while its latency grew over the pass.
func (c *checker) overload() {
	ran := false
	for _, lv := range c.levels {
		sc := c.scored(lv)
		if len(sc) == 0 || sc[0].Rate <= 0 {
			continue
		}
		rate := sc[0].Rate
		var achieved, growth []float64
		for _, l := range sc {
			ix := slices.Clone(c.reqs(l))
			slices.SortFunc(ix, func(a, b int) int {
				return cmp.Compare(cmp.Or(c.in.Reqs[a].IntendedUnixNs, c.in.Reqs[a].StartUnixNs), cmp.Or(c.in.Reqs[b].IntendedUnixNs, c.in.Reqs[b].StartUnixNs))
			})
			var lats []float64
			for _, i := range slices.DeleteFunc(ix, func(i int) bool { return !c.ok(i) }) {
				lats = append(lats, c.in.Reqs[i].LatencyS)
			}
			k := len(lats) / 3
			if k == 0 {
				continue
			}
			ran = true
			achieved = append(achieved, c.passReqS(l))
			if f := stats.Mean(lats[:k]); f > 0 {
				growth = append(growth, stats.Mean(lats[len(lats)-k:])/f)
			}
		}
		if len(achieved) == 0 || len(growth) == 0 {
			continue
		}
		a, g := stats.Mean(achieved), stats.Mean(growth)
		if a < OverloadAchieved*rate && g >= OverloadGrowth {
			c.add(Finding{Check: CheckOverload, Severity: SeverityWarn, Level: lv, PassesAffected: len(achieved), PassesScored: len(sc),
				Text: fmt.Sprintf("overloaded at %s: %.2f req/s achieved against %g offered, and the last third of requests took %.1f× the first third's latency: the queue grew all pass, so its latency measures the pass's length, not the server",
					model.LevelLabel(lv), a, rate, g),
				Fix: "lower --rate below what the server achieves, or use a closed loop (--concurrency) to find its capacity"})
		}
	}
	if !ran {
		c.v.NotRun[CheckOverload] = "no open-loop (--rate) level"
	}
}

// cpuCoTenants: other processes' CPU time on the cores the server ran on
// during a level's scored passes (the proc probe's per-core records).
// asrprof's own process (the driver, the probes, the receiver) is a known
// co-tenant: its time is left out of the share and said beside it.
func (c *checker) cpuCoTenants() {
	if c.in.PIDUnknown != "" {
		if len(c.in.GPU)+len(c.in.GPUProcs) > 0 { // the GPU's part ran: say why this one did not
			c.add(Finding{Check: CheckCoTenants, Severity: SeverityNote,
				Text: fmt.Sprintf("the CPU co-tenant check was not made: it needs the cores the server ran on, and the capture did not know the server's pid (%s)", c.in.PIDUnknown),
				Fix:  pidFix})
		}
		return
	}
	for _, lv := range c.levels {
		target := map[int]float64{}
		total, sc := 0.0, c.scored(lv)
		var recs []bundle.CPURecord
		for _, r := range c.in.Cores {
			if r.Level == lv && !r.Warmup && slices.ContainsFunc(sc, func(l model.LevelRun) bool { return l.Repeat == r.Repeat }) {
				recs = append(recs, r)
				if r.CPUCore != nil {
					target[r.CPU] += r.TargetS
					total += r.TargetS
				}
			}
		}
		if total < CoTenantMinCPUS {
			continue
		}
		used := slices.DeleteFunc(slices.Sorted(maps.Keys(target)), func(n int) bool { // the cores the server ran on
			return !(target[n] >= CoTenantCoreShare*total)
		})
		var others, self, steal, coreTime, targetOn float64
		procs := map[int]float64{}
		comm := map[int]string{}
		passOthers, passTime := map[int]float64{}, map[int]float64{} // by repeat
		for _, r := range recs {
			switch {
			case r.CPUCore != nil && slices.Contains(used, r.CPU):
				o := max(0, r.BusyS-r.TargetS-r.SelfS) + r.StealS
				others += o
				passOthers[r.Repeat] += o
				passTime[r.Repeat] += r.BusyS + r.IdleS + r.StealS
				self += r.SelfS
				steal += r.StealS
				targetOn += r.TargetS
				coreTime += r.BusyS + r.IdleS + r.StealS
			case r.CPUProcess != nil && slices.ContainsFunc(used, func(n int) bool { return CPUListHas(r.Allowed, n) }):
				procs[r.PID] += r.CPUS
				comm[r.PID] = r.Comm
			}
		}
		if coreTime <= 0 {
			continue
		}
		c.v.CPUShares = append(c.v.CPUShares, CPUShare{Level: lv, Cores: used, Target: targetOn / coreTime, Self: self / coreTime, Others: others / coreTime})
		if others < CoTenantCPUShare*coreTime {
			continue
		}
		names := slices.SortedFunc(maps.Keys(procs), func(a, b int) int { return cmp.Or(cmp.Compare(procs[b], procs[a]), cmp.Compare(a, b)) })
		var who []string
		for _, pid := range names[:min(3, len(names))] {
			who = append(who, fmt.Sprintf("pid %d (%s) %.1f s", pid, comm[pid], procs[pid]))
		}
		by := "the busiest: " + strings.Join(who, ", ")
		if len(who) == 0 {
			by = "no one process stands out (short-lived ones, or kernel work)"
		}
		if steal >= 0.01*coreTime {
			by += fmt.Sprintf("; the hypervisor's steal %.0f %%", 100*steal/coreTime)
		}
		coreList := make([]string, len(used))
		for i, n := range used {
			coreList[i] = strconv.Itoa(n)
		}
		cores := "core " + strings.Join(coreList, ", ")
		if len(used) > 1 {
			cores = "cores " + strings.Join(coreList, ", ")
		}
		affected := 0
		for rep, t := range passTime {
			if t > 0 && passOthers[rep] >= CoTenantCPUShare*t {
				affected++
			}
		}
		c.add(Finding{Check: CheckCoTenants, Severity: SeverityWarn, Level: lv, PassesAffected: affected, PassesScored: len(sc),
			Text: fmt.Sprintf("other processes used %.0f %% of the time of %s, where the server ran, during the level's scored passes (%s); asrprof itself %.0f %%, not counted",
				100*others/coreTime, cores, by, 100*self/coreTime),
			Fix: "give the server cores of its own (taskset or a cpuset for it, everything else elsewhere), or stop the co-tenant: the server's latencies include waiting for those cores"})
	}
}

// pidFix is the co-tenant checks' fix where the capture did not know the
// server's pid.
const pidFix = "give capture --pid PID (the server's), or run asrprof as the server's user or root, so that it finds the server from its port"

// CPUListHas reports whether the kernel's CPU list (Cpus_allowed_list:
// "0-3,8") holds core n; an empty list holds every core.
func CPUListHas(list string, n int) bool {
	cpus, err := bundle.ParseCPUList(list)
	return strings.TrimSpace(list) == "" || err == nil && slices.Contains(cpus, n)
}
