package engine

import (
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/model"
)

// synth builds a capture by hand: passes of n samples ("s0".."s{n-1}")
// run one after another, each request taking lat(pass, sample) seconds;
// closed loop at level cN (N in flight: request s starts when request
// s−N ends), or open loop at rate (each request's intended send i/rate after the pass
// starts; its wall ends with its last answer).
type synthPass struct {
	level  string
	repeat int
	warmup bool
	rate   float64
}

func synth(passes []synthPass, n int, lat func(p, s int) float64, fail func(p, s int) *model.Request) ValidityInput {
	var in ValidityInput
	t := int64(1e18)
	for pi, p := range passes {
		start := t
		end := t
		conc := 1
		fmt.Sscanf(p.level, "c%d", &conc)
		slots := make([]int64, conc) // each in-flight slot's next free time
		for i := range slots {
			slots[i] = start
		}
		for s := range n {
			r := model.Request{SampleID: fmt.Sprintf("s%d", s), Level: p.level, Repeat: p.repeat, Warmup: p.warmup, Status: model.StatusOK}
			l := lat(pi, s)
			if p.rate > 0 {
				r.IntendedUnixNs = start + int64(float64(s)/p.rate*1e9)
				r.StartUnixNs = r.IntendedUnixNs
			} else {
				r.StartUnixNs = slots[s%conc]
			}
			r.LatencyS = l
			r.EndUnixNs = r.StartUnixNs + int64(l*1e9)
			if fail != nil {
				if f := fail(pi, s); f != nil {
					r.Status, r.ErrorKind, r.HTTPStatus, r.Error = model.StatusFailed, f.ErrorKind, f.HTTPStatus, f.Error
				}
			}
			if r.Status == model.StatusOK {
				r.Scored = !p.warmup
				r.Errors = &model.WordErrors{Sub: s % 2, RefWords: 10}
			}
			if p.rate <= 0 {
				slots[s%conc] = r.EndUnixNs
			}
			end = max(end, r.EndUnixNs)
			in.Reqs = append(in.Reqs, r)
		}
		in.Levels = append(in.Levels, model.LevelRun{Level: p.level, Repeat: p.repeat, Warmup: p.warmup, Rate: p.rate,
			StartUnixNs: start, EndUnixNs: end, WallS: float64(end-start) / 1e9})
		t = end + 1e6
		_ = t
	}
	in.KneeThreshold = KneeThreshold
	return in
}

// two closed-loop levels, two scored repeats each
var sweep2 = []synthPass{{"c1", 1, false, 0}, {"c1", 2, false, 0}, {"c4", 1, false, 0}, {"c4", 2, false, 0}}

// steady: each sample its own latency, ±2 % between passes; c4 the same
// latencies (a server with room for four).
func steady(p, s int) float64 {
	return (0.15 + 0.01*float64(s)) * (1 + 0.02*float64(p%2))
}

func fired(v *ValidityResult) []string {
	var out []string
	for _, f := range v.Findings {
		if !slices.Contains(out, f.Check) {
			out = append(out, f.Check)
		}
	}
	return out
}

func TestValidityEachCheckOnItsTrap(t *testing.T) {
	http404 := func(int, int) *model.Request {
		return &model.Request{ErrorKind: model.FailHTTP4xx, HTTPStatus: 404, Error: `http status 404: {"error": "not found: /v1/audio/transcriptions"}`}
	}
	some := func(p, s int) *model.Request {
		if s == 3 {
			return &model.Request{ErrorKind: model.FailTimeout, Error: "context deadline exceeded"}
		}
		return nil
	}
	cases := []struct {
		name   string
		in     ValidityInput
		want   string // the one check that must fire ("" for none)
		detail string // in its text
	}{
		{"clean", synth(sweep2, 8, steady, nil), "", ""},
		{"all_failing", synth(sweep2, 8, steady, http404), CheckFailures, "all 16 requests failed: 16 × HTTP 404: not found: /v1/audio/transcriptions"},
		{"some_failing", synth(sweep2, 8, steady, some), CheckFailures, "2 of 16 requests failed: 2 × timeout"},
		// a content cache: each sample's first sighting 0.3 s more, later ones 5 ms
		{"cache", synth(sweep2, 8, func(p, s int) float64 {
			if p == 0 {
				return 0.3 + steady(p, s)
			}
			return 0.005 + 0.0001*float64(s)
		}, nil), CheckCache, "8 of 8 repeated samples"},
		// the first three requests after start-up 0.4 s slower
		{"drift", synth(sweep2, 8, func(p, s int) float64 {
			if p == 0 && s < 3 {
				return 0.4 + steady(p, s)
			}
			return steady(p, s)
		}, nil), CheckWarmup, "first-pass-slower regime: scored repeat 1"},
		// one sample 3 s slower everywhere
		{"runaway", synth(sweep2, 8, func(p, s int) float64 {
			if s == 5 {
				return 3 + steady(p, s)
			}
			return steady(p, s)
		}, nil), CheckOutliers, "sample s5 dominates 2 of 2 scored passes"},
		// c=1 → c=2 on a server serving one at a time (throughput flat),
		// each request's latency noisy
		{"sample_size", synth([]synthPass{{"c1", 1, false, 0}, {"c1", 2, false, 0}, {"c2", 1, false, 0}, {"c2", 2, false, 0}}, 8, func(p, s int) float64 {
			x := 0.2 + 0.3*float64((s*7+p*3)%8)/8
			if p >= 2 { // one at a time: at c=2 each waits for the other
				x *= 2
			}
			return x
		}, nil), CheckSampleSize, "c=1 to c=2, 95 % interval [-29 %, +26 %]: it holds the knee's 10 %, so the knee drawn here (saturated from c=1"},
		// open loop at 4/s against a server taking 0.1 s more per request
		// queued before it: the queue grows
		{"overload", synth([]synthPass{{"r4", 1, false, 4}, {"r4", 2, false, 4}}, 9, func(p, s int) float64 {
			return 0.5 + 0.25*float64(s) // answered every 0.5 s, sent every 0.25 s
		}, nil), CheckOverload, "overloaded at rate=4/s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Validity(tc.in)
			got := fired(v)
			want := []string{}
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("fired %v, want %v\n%+v", got, want, v.Findings)
			}
			if tc.detail != "" && !strings.Contains(v.Findings[0].Text, tc.detail) {
				t.Errorf("finding %q does not say %q", v.Findings[0].Text, tc.detail)
			}
		})
	}
}

func TestValidityFailedLevel(t *testing.T) {
	// c1 answers, c4 fails every request: only c4 is failed, and its
	// finding is a fail
	in := synth(sweep2, 4, steady, func(p, s int) *model.Request {
		if p >= 2 {
			return &model.Request{ErrorKind: model.FailConnection, Error: "read tcp: connection reset by peer"}
		}
		return nil
	})
	v := Validity(in)
	if !slices.Equal(v.FailedLevels, []string{"c4"}) {
		t.Fatalf("failed levels %v, want [c4]", v.FailedLevels)
	}
	if f := v.Findings[0]; f.Severity != SeverityFail || f.Level != "c4" || !strings.Contains(f.Text, "8 × connection reset") {
		t.Errorf("finding %+v", f)
	}
	if !slices.Equal(v.Failures, []FailureCause{{Level: "c4", Cause: "connection reset", Count: 8}}) {
		t.Errorf("failures %+v", v.Failures)
	}
}

func TestFailureCauseOf(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		r    model.Request
		want string
	}{
		{model.Request{ErrorKind: model.FailHTTP4xx, HTTPStatus: 404, Error: `http status 404: {"error": "not found: /v1/x"}`}, "HTTP 404: not found: /v1/x"},
		{model.Request{ErrorKind: model.FailHTTP5xx, HTTPStatus: 500, Error: `http status 500: {"detail": "CUDA OOM"}`}, "HTTP 500: CUDA OOM"},
		{model.Request{ErrorKind: model.FailHTTP5xx, HTTPStatus: 503, Error: `http status 503: {"error": {"message": "overloaded", "code": 1}}`}, "HTTP 503: overloaded"},
		{model.Request{ErrorKind: model.FailHTTP4xx, HTTPStatus: 400, Error: "http status 400: plain   text\n body"}, "HTTP 400: plain text body"},
		{model.Request{ErrorKind: model.FailHTTP4xx, HTTPStatus: 413, Error: "http status 413: "}, "HTTP 413"},
		{model.Request{ErrorKind: model.FailHTTP5xx, HTTPStatus: 500, Error: "HTTP 500"}, "HTTP 500"},
		{model.Request{ErrorKind: model.FailTimeout, Error: "context deadline exceeded"}, "timeout"},
		{model.Request{ErrorKind: model.FailConnection, Error: "read: connection reset by peer"}, "connection reset"},
		{model.Request{ErrorKind: model.FailConnection, Error: `Post "http://h:1/v2/v1/audio/transcriptions": writev tcp 127.0.0.1:43706->127.0.0.1:1: writev: broken pipe`},
			"connection closed during the upload (broken pipe: the server may have answered before reading it)"},
		{model.Request{ErrorKind: model.FailMalformed, Error: "bad json"}, "malformed response: bad json"},
		{model.Request{ErrorKind: model.FailHTTP5xx, HTTPStatus: 500, Error: "http status 500: " + long}, "HTTP 500: " + strings.Repeat("x", FailureMessageChars-1) + "…"},
	} {
		if got := FailureCauseOf(&tc.r); got != tc.want {
			t.Errorf("FailureCauseOf(%q) = %q, want %q", tc.r.Error, got, tc.want)
		}
	}
}

func TestValidityIntervals(t *testing.T) {
	// three repeats: req/s's interval is t over them and holds the mean
	ps := []synthPass{{"c1", 1, false, 0}, {"c1", 2, false, 0}, {"c1", 3, false, 0}}
	v := Validity(synth(ps, 8, func(p, s int) float64 { return 0.1 * (1 + 0.1*float64(p)) }, nil))
	iv := v.Intervals[0]
	if iv.ReqSBasis != "repeats" || !(iv.ReqS.Lo < iv.ReqS.Value && iv.ReqS.Value < iv.ReqS.Hi) || iv.ReqS.N != 3 {
		t.Errorf("req/s %+v (%s)", iv.ReqS, iv.ReqSBasis)
	}
	// 24 requests of latencies 0.1, 0.11, 0.12: mean 0.11
	if math.Abs(iv.LatMeanS.Value-0.11) > 1e-9 || iv.LatMeanS.N != 24 || !(iv.LatMeanS.Lo < 0.11 && 0.11 < iv.LatMeanS.Hi) {
		t.Errorf("latency mean %+v", iv.LatMeanS)
	}
	// WER: every other sample 1 substitution in 10 words: 0.05
	if iv.WER == nil || math.Abs(iv.WER.Value-0.05) > 1e-9 || iv.WER.Lo > 0.05 || iv.WER.Hi < 0.05 {
		t.Errorf("WER %+v", iv.WER)
	}
	if iv.Converged == nil || !*iv.Converged {
		t.Errorf("converged %v (spread %g): the last two repeats differ by 9 %%", iv.Converged, iv.ConvergeBy)
	}
}

func TestValidityGPUCoTenant(t *testing.T) {
	in := synth(sweep2, 8, steady, nil)
	// NVML every 100 ms over the capture and 2 s after it; each pass's
	// requests run back to back, so samples with nothing in flight are
	// the gaps between passes (1 ms) — too few — unless a pass has idle
	// time: give c4's passes a second's pause before their first request
	for i := range in.Reqs {
		if in.Reqs[i].Level == "c4" {
			in.Reqs[i].StartUnixNs += 1e9 * int64(in.Reqs[i].Repeat)
			in.Reqs[i].EndUnixNs += 1e9 * int64(in.Reqs[i].Repeat)
		}
	}
	for i := range in.Levels {
		if in.Levels[i].Level == "c4" {
			in.Levels[i].EndUnixNs += 1e9 * int64(in.Levels[i].Repeat)
			in.Levels[i].StartUnixNs += 1e9 * int64(in.Levels[i].Repeat-1)
		}
	}
	first, last := in.Levels[0].StartUnixNs, in.Levels[len(in.Levels)-1].EndUnixNs
	util := func(busy float64) []bundle.GPURecord {
		var out []bundle.GPURecord
		for ts := first; ts < last+2e9; ts += 1e8 {
			out = append(out, bundle.GPURecord{GPUHead: bundle.GPUHead{TS: ts, Kind: bundle.GPUKindUtil}, GPUUtil: &bundle.GPUUtil{UtilPct: busy}})
		}
		return out
	}
	for _, tc := range []struct {
		busy float64
		want bool
	}{{0, false}, {5, false}, {60, true}} {
		in.GPU = util(tc.busy)
		v := Validity(in)
		if got := v.Fired(CheckCoTenants, "c4"); got != tc.want {
			t.Errorf("GPU %g %% while idle: fired %v, want %v\n%+v", tc.busy, got, tc.want, v.Findings)
		}
		if v.Fired(CheckCoTenants, "c1") && tc.want {
			t.Errorf("c1 has no idle time in its passes, yet the co-tenant check fired there")
		}
	}
	in.GPU = nil
	if v := Validity(in); v.NotRun[CheckCoTenants] == "" {
		t.Errorf("without NVML samples the co-tenant check should say it did not run")
	}
}

func TestValidityGPUOtherProcess(t *testing.T) {
	in := synth(sweep2, 8, steady, nil)
	at := func(level string, k int64) int64 { // k ms into level's first scored pass
		for _, l := range in.Levels {
			if l.Level == level {
				return l.StartUnixNs + k*1e6
			}
		}
		return 0
	}
	proc := func(ts int64, pid int, sm uint32, other bool) bundle.GPURecord {
		return bundle.GPURecord{GPUHead: bundle.GPUHead{TS: ts, Kind: bundle.GPUKindProc}, GPUProc: &bundle.GPUProc{PID: pid, SMPct: sm, Other: other}}
	}
	target := proc(at("c1", 10), 10, 60, false)
	other := func(level string, sm uint32) []bundle.GPURecord {
		return []bundle.GPURecord{proc(at(level, 20), 99, sm, true), proc(at(level, 40), 99, sm, true)}
	}
	for _, tc := range []struct {
		name     string
		procs    []bundle.GPURecord
		level    string // where it fires ("" for nowhere)
		severity string
	}{
		{"co-tenant at c4", append([]bundle.GPURecord{target}, other("c4", 80)...), "c4", SeverityWarn},
		{"an idle other process", append([]bundle.GPURecord{target}, other("c4", 0)...), "", ""},
		{"pids of another namespace", other("c4", 80), "", SeverityNote},
	} {
		in.GPUProcs = tc.procs
		v := Validity(in)
		var got []Finding
		for _, f := range v.Findings {
			if f.Check == CheckCoTenants {
				got = append(got, f)
			}
		}
		switch {
		case tc.severity == "" && len(got) > 0:
			t.Errorf("%s: fired %+v", tc.name, got)
		case tc.severity != "" && (len(got) != 1 || got[0].Severity != tc.severity || got[0].Level != tc.level || !strings.Contains(got[0].Text, "99")):
			t.Errorf("%s: findings %+v, want one %s at %q naming pid 99", tc.name, got, tc.severity, tc.level)
		}
	}
	// A capture that did not know the server's pid says so, not "a
	// container", and says that the CPU part was not made.
	in.GPUProcs = other("c4", 80)
	in.PIDUnknown = "target pid unknown: port 8000: the socket is another user's"
	var texts []string
	for _, f := range Validity(in).Findings {
		if f.Check == CheckCoTenants && f.Severity == SeverityNote && strings.Contains(f.Text, in.PIDUnknown) && strings.Contains(f.Fix, "--pid") {
			texts = append(texts, f.Text)
		}
	}
	if len(texts) != 2 || !strings.Contains(texts[1], "pids [99]") || !strings.Contains(texts[0], "CPU co-tenant check was not made") {
		t.Errorf("pid unknown: %q, want the GPU's note naming pid 99 and the CPU's, each with why and --pid", texts)
	}
}

// Other processes' CPU time on the cores the server ran on (the proc
// probe's per-core records): the server on core 0 of two; others busy on
// core 0 at c4 only. asrprof's own time there is not counted; a process
// pinned to core 1 is not named.
func TestValidityCPUCoTenant(t *testing.T) {
	in := synth(sweep2, 8, steady, nil)
	core := func(level string, repeat, cpu int, busy, target, self float64) bundle.CPURecord {
		return bundle.CPURecord{Level: level, Repeat: repeat, Kind: bundle.CPUKindCore, CPU: cpu, WallS: 2,
			CPUCore: &bundle.CPUCore{BusyS: busy, IdleS: 2 - busy, TargetS: target, SelfS: self}}
	}
	proc := func(level string, repeat, pid int, allowed string) bundle.CPURecord {
		return bundle.CPURecord{Level: level, Repeat: repeat, Kind: bundle.CPUKindProcess, WallS: 2,
			CPUProcess: &bundle.CPUProcess{PID: pid, Comm: fmt.Sprint("p", pid), CPUS: 1.5, Allowed: allowed}}
	}
	for _, tc := range []struct {
		name       string
		c4busy     float64 // core 0's busy seconds of 2 at c4
		self       float64
		want       bool
		wantInText string
	}{
		{"quiet", 0.3, 0.1, false, ""},
		{"co-tenant", 1.9, 0.1, true, "used 80 % of the time of core 0"}, // (1.9 − 0.2 − 0.1) / 2,
		{"asrprof itself", 1.9, 1.6, false, ""},
	} {
		in.Cores = nil
		for _, lv := range []string{"c1", "c4"} {
			for rep := 1; rep <= 2; rep++ {
				busy := 0.3
				if lv == "c4" {
					busy = tc.c4busy
				}
				in.Cores = append(in.Cores, core(lv, rep, 0, busy, 0.2, tc.self), core(lv, rep, 1, 1.9, 0.001, 0),
					proc(lv, rep, 100, "0-1"), proc(lv, rep, 200, "1"))
			}
		}
		v := Validity(in)
		if v.Fired(CheckCoTenants, "c1") {
			t.Errorf("%s: fired at c1, where core 0 was quiet: %+v", tc.name, v.Findings)
		}
		if got := v.Fired(CheckCoTenants, "c4"); got != tc.want {
			t.Fatalf("%s: fired at c4 %v, want %v: %+v", tc.name, got, tc.want, v.Findings)
		}
		for _, f := range v.Findings {
			if f.Check == CheckCoTenants && (!strings.Contains(f.Text, tc.wantInText) || !strings.Contains(f.Text, "pid 100 (p100)") || strings.Contains(f.Text, "pid 200") || f.PassesAffected != 2) {
				t.Errorf("%s: %q (%d passes): want %q, pid 100 named, pid 200 (on core 1 only) not, 2 passes", tc.name, f.Text, f.PassesAffected, tc.wantInText)
			}
		}
		if len(v.CPUShares) != 2 || fmt.Sprint(v.CPUShares[0].Cores) != "[0]" {
			t.Errorf("%s: shares %+v, want c1 and c4 on core 0", tc.name, v.CPUShares)
		}
	}
	if !CPUListHas("0-3,8", 8) || CPUListHas("0-3,8", 5) || !CPUListHas("", 5) {
		t.Error("CPUListHas")
	}
}

// The first pass's requests that waited a second for a new connection (a
// SYN sent again at a full listen backlog) are named in the
// first-pass-slower finding: the regime is the connections', not a cache's.
func TestValiditySlowConnects(t *testing.T) {
	slow := synth(sweep2, 8, func(p, s int) float64 {
		if p == 2 && s < 2 {
			return 1.03 + steady(p, s)
		}
		return steady(p, s)
	}, nil)
	for i := range slow.Reqs {
		if r := &slow.Reqs[i]; r.Level == "c4" && r.Repeat == 1 && r.LatencyS > 1 {
			r.ConnectedUnixNs = r.StartUnixNs + 1.03e9
		}
	}
	v := Validity(slow)
	i := slices.IndexFunc(v.Findings, func(f Finding) bool { return f.Check == CheckWarmup })
	if i < 0 || !strings.Contains(v.Findings[i].Text, "; 2 of its requests waited a second or more for a new connection") {
		t.Fatalf("no first-pass-slower finding naming the 2 slow connections: %+v", v.Findings)
	}
}

// A first-pass-slower warning at a level where other processes took the
// server's cores says that they may be its cause; at a quiet level it
// does not.
func TestValidityDriftBesideCoTenant(t *testing.T) {
	drift := func(p, s int) float64 {
		if p == 0 || p == 2 { // each level's first scored repeat
			return 2 * steady(p, s)
		}
		return steady(p, s)
	}
	in := synth(sweep2, 8, drift, nil)
	for _, lv := range []string{"c1", "c4"} {
		busy := 0.3
		if lv == "c4" {
			busy = 1.9
		}
		for rep := 1; rep <= 2; rep++ {
			in.Cores = append(in.Cores, bundle.CPURecord{Level: lv, Repeat: rep, Kind: bundle.CPUKindCore, CPU: 0, WallS: 2,
				CPUCore: &bundle.CPUCore{BusyS: busy, IdleS: 2 - busy, TargetS: 0.2, SelfS: 0.1}},
				bundle.CPURecord{Level: lv, Repeat: rep, Kind: bundle.CPUKindProcess, WallS: 2,
					CPUProcess: &bundle.CPUProcess{PID: 100, Comm: "p100", CPUS: 1.5, Allowed: "0-1"}})
		}
	}
	v := Validity(in)
	const link = "which slows passes unevenly: this may be theirs"
	for _, lv := range []string{"c1", "c4"} {
		i := slices.IndexFunc(v.Findings, func(f Finding) bool { return f.Check == CheckWarmup && f.Level == lv })
		if i < 0 {
			t.Fatalf("no first-pass-slower finding at %s: %+v", lv, v.Findings)
		}
		if got, want := strings.Contains(v.Findings[i].Text, link), lv == "c4"; got != want {
			t.Errorf("%s: %q: names the co-tenants %v, want %v", lv, v.Findings[i].Text, got, want)
		}
	}
}

// An all-failed level's advice: the models the server lists where a
// refusal names the model, --header where it refused the credentials,
// the target and endpoint otherwise (a 503 "model is still loading" is no
// refusal of the model).
func TestValidityFailureAdvice(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{404, `{"message":"The model whisper-1 does not exist."}`, "the requests named whisper-1 and the server lists a, b at /v1/models: give --model"},
		{401, `{"error":"Unauthorized"}`, `give its API key with --header "Authorization: Bearer KEY"`},
		{503, `{"error":"model is still loading"}`, "check --target (host, port), --endpoint (the path)"},
	} {
		in := synth(sweep2, 4, steady, func(int, int) *model.Request {
			return &model.Request{ErrorKind: protocolKind(tc.status), HTTPStatus: tc.status, Error: fmt.Sprintf("http status %d: %s", tc.status, tc.body)}
		})
		in.Models, in.Model = []string{"a", "b"}, "whisper-1"
		if f := Validity(in).Findings[0]; f.Severity != SeverityFail || !strings.Contains(f.Fix, tc.want) {
			t.Errorf("HTTP %d: finding %+v, want the fix %q", tc.status, f, tc.want)
		}
	}
}

// Connections reset or closed after waiting a second or more to open (a
// SYN dropped at a full listen backlog and sent again): the backlog is
// named, with its fix; the same failures on connections that opened at
// once are left to the server's log.
func TestValidityBacklogResets(t *testing.T) {
	in := synth(sweep2, 8, steady, func(_, s int) *model.Request {
		switch s {
		case 0, 1:
			return &model.Request{ErrorKind: model.FailConnection, Error: "writev tcp 127.0.0.1:1->127.0.0.1:2: writev: connection reset by peer"}
		case 2:
			return &model.Request{ErrorKind: model.FailConnection, Error: `Post "http://127.0.0.1:2/v1/audio/transcriptions": EOF`}
		}
		return nil
	})
	for _, slow := range []bool{true, false} {
		n := 0
		for i := range in.Reqs {
			if in.Reqs[i].Status == model.StatusFailed {
				in.Reqs[i].ConnectedUnixNs = in.Reqs[i].StartUnixNs + map[bool]int64{true: 1_010_000_000, false: 300_000}[slow]
			}
		}
		for _, f := range Validity(in).Findings {
			if f.Check != CheckFailures {
				continue
			}
			n++
			named := strings.Contains(f.Text, "then were reset or closed: the server's listen backlog was full") && strings.Contains(f.Fix, "request_queue_size")
			if named != slow || slow && !strings.Contains(f.Text, "; 6 of them waited") { // 3 a pass, 2 scored passes
				t.Errorf("connections opened after %s: %q / %q", map[bool]string{true: "1.01 s", false: "0.3 ms"}[slow], f.Text, f.Fix)
			}
		}
		if n == 0 {
			t.Fatal("no failures finding")
		}
	}
}

func protocolKind(status int) string {
	if status >= 500 {
		return model.FailHTTP5xx
	}
	return model.FailHTTP4xx
}
