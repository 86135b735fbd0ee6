package export

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/spans"
)

// Defaults of OTLPConfig and PlanConfig.
const (
	DefaultBatchSpans = 1000
	DefaultMaxTries   = 5
	DefaultBackoff    = 200 * time.Millisecond
	MaxBackoff        = 5 * time.Second
	MaxRetryAfter     = 30 * time.Second
	DefaultTimeout    = 30 * time.Second
	// DefaultRateLimit is the CLI's default --rate-limit, in spans per
	// second; OTLPConfig.RateLimit zero means no limit.
	DefaultRateLimit = 20000
)

// Attributes the exporter adds. The resource of every exported span names
// the capture; every span of a request's trace gets the request's level
// (clientspan.AttrLevel, "asrprof.level").
const (
	AttrCapture     = "asrprof.capture" // the bundle directory's base name
	AttrHost        = "asrprof.host"    // the fingerprint's hostname (the client machine)
	AttrTarget      = "asrprof.target"  // the target URL
	AttrStage       = "asrprof.stage"   // on synthesized stage spans: the stage's name
	AttrSynthesized = "asrprof.synthesized"
	// StageService is the service.name of the synthesized stage spans.
	StageService = "asrprof-stages"
)

// ErrNeverAccepted is returned by OTLP when the endpoint accepted no batch.
var ErrNeverAccepted = errors.New("the OTLP endpoint accepted no batch")

// PlanConfig says what to export.
type PlanConfig struct {
	// BatchSpans is the most spans per export request (DefaultBatchSpans
	// when 0).
	BatchSpans int
	// Sample exports one request in Sample (every request when ≤ 1): the
	// requests, ordered by start, whose index is a multiple of Sample, with
	// all the spans of their traces. Spans of traces that no request names
	// are kept when a hash of their trace id is a multiple of Sample.
	Sample int
	// Stages are each request's derived stages (indexed like the bundle's
	// requests.jsonl), ordered by start: one span per stage under the
	// request's client span. nil: none.
	Stages [][]Stage
	// States are, per request (indexed likewise), its attribution's
	// states placed over its latency, in time order, tiling it: each kept
	// request gets a span AttributionSpan over them under its client span,
	// with one child span per state segment. nil: none.
	States [][]Stage
}

// AttributionSpan is the name of the synthesized span that holds a
// request's state spans (PlanConfig.States); AttrState names the state on
// each state span.
const (
	AttributionSpan = "where the time went"
	AttrState       = "asrprof.state"
)

// Plan counts what OTLP sends.
type Plan struct {
	Requests   int  `json:"requests"`    // requests whose traces are exported
	Spans      int  `json:"spans"`       // all spans, stage spans included
	StageSpans int  `json:"stage_spans"` // synthesized from PlanConfig.Stages
	StateSpans int  `json:"state_spans"` // synthesized from PlanConfig.States, their parent spans not counted
	Batches    int  `json:"batches"`     // export requests
	Truncated  bool `json:"truncated"`   // spans.otlp's last record was cut short (and dropped)
}

// reqInfo is what the planner knows of one trace that a request names.
type reqInfo struct {
	level  string
	keep   bool
	stages []Stage
	states []Stage
}

// planner decides which spans go out and builds the batches.
type planner struct {
	b        *bundle.Bundle
	cfg      PlanConfig
	resAttrs map[string]string
	byTrace  map[pcommon.TraceID]*reqInfo
	roots    map[pcommon.TraceID]pcommon.SpanID // client root span of traces with stages
	plan     Plan
}

// newPlanner reads the requests and scans the span store once,
// to count what will be sent and to find the client spans that the stage
// spans hang under.
func newPlanner(b *bundle.Bundle, cfg PlanConfig) (*planner, error) {
	// Zero or less: the default.
	cfg.BatchSpans = cmp.Or(max(cfg.BatchSpans, 0), DefaultBatchSpans)
	cfg.Sample = max(cfg.Sample, 1)
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		return nil, fmt.Errorf("reading requests: %w", err)
	}
	p := &planner{
		b:        b,
		cfg:      cfg,
		resAttrs: CaptureAttrs(b),
		byTrace:  map[pcommon.TraceID]*reqInfo{},
		roots:    map[pcommon.TraceID]pcommon.SpanID{},
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, c int) int { return cmp.Compare(reqs[a].StartUnixNs, reqs[c].StartUnixNs) })
	for k, i := range order {
		r := &reqs[i]
		tid, ok := parseTraceID(r.TraceID)
		if !ok {
			continue
		}
		info := &reqInfo{level: r.Level, keep: k%cfg.Sample == 0}
		if i < len(cfg.Stages) {
			info.stages = cfg.Stages[i]
		}
		if i < len(cfg.States) {
			info.states = cfg.States[i]
		}
		p.byTrace[tid] = info
		if info.keep {
			p.plan.Requests++
			p.plan.StageSpans += len(info.stages)
			p.plan.StateSpans += len(info.states)
			if len(info.states) > 0 {
				p.plan.Spans++ // the states' parent
			}
		}
	}
	p.plan.Spans += p.plan.StageSpans + p.plan.StateSpans
	if b.Has(bundle.SpansFile) {
		trunc, err := spans.Read(b.Path(bundle.SpansFile), func(td ptrace.Traces) error {
			return forEachSpan(td, func(_, _ int, rs ptrace.ResourceSpans, _ ptrace.ScopeSpans, sp ptrace.Span) error {
				tid := sp.TraceID()
				if !p.keep(tid) {
					return nil
				}
				p.plan.Spans++
				if info := p.byTrace[tid]; info != nil && len(info.stages)+len(info.states) > 0 && sp.ParentSpanID().IsEmpty() && service(rs) == spans.ClientService {
					p.roots[tid] = sp.SpanID()
				}
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("reading spans: %w", err)
		}
		p.plan.Truncated = trunc
	}
	p.plan.Batches = (p.plan.Spans + cfg.BatchSpans - 1) / cfg.BatchSpans
	return p, nil
}

func (p *planner) keep(tid pcommon.TraceID) bool {
	if info, ok := p.byTrace[tid]; ok {
		return info.keep
	}
	if p.cfg.Sample <= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write(tid[:])
	return h.Sum64()%uint64(p.cfg.Sample) == 0
}

// run streams the batches to fn, in span-store order, the stage spans last.
func (p *planner) run(fn func(ptrace.Traces) error) error {
	bt := &batcher{max: p.cfg.BatchSpans, attrs: p.resAttrs, emit: fn}
	bt.reset()
	if p.b.Has(bundle.SpansFile) {
		_, err := spans.Read(p.b.Path(bundle.SpansFile), func(td ptrace.Traces) error {
			clear(bt.dest) // indices restart in each record
			return forEachSpan(td, func(i, j int, rs ptrace.ResourceSpans, sc ptrace.ScopeSpans, sp ptrace.Span) error {
				tid := sp.TraceID()
				if !p.keep(tid) {
					return nil
				}
				level := ""
				if info := p.byTrace[tid]; info != nil {
					level = info.level
				}
				return bt.add(i, j, rs, sc, sp, level)
			})
		})
		if err != nil {
			return err
		}
	}
	if p.plan.StageSpans > 0 || p.plan.StateSpans > 0 {
		if err := p.stageSpans(bt); err != nil {
			return err
		}
	}
	return bt.flush()
}

// stageSpans adds one span per stage of every kept request, under the
// request's client span when the span store has it.
func (p *planner) stageSpans(bt *batcher) error {
	// The synthesized spans' resource and scope, which the batcher copies
	// as it does a span store record's (key {-1, -1}).
	rs := ptrace.NewResourceSpans()
	for _, k := range slices.Sorted(maps.Keys(p.resAttrs)) { // sorted: the same bytes every run
		rs.Resource().Attributes().PutStr(k, p.resAttrs[k])
	}
	rs.Resource().Attributes().PutStr("service.name", StageService)
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName("github.com/asrprof/asrprof/trace/export")
	sp := ptrace.NewSpan()
	byID := func(a, c pcommon.TraceID) int { return bytes.Compare(a[:], c[:]) }
	for _, tid := range slices.SortedFunc(maps.Keys(p.byTrace), byID) {
		info := p.byTrace[tid]
		if !info.keep || len(info.stages)+len(info.states) == 0 {
			continue
		}
		root := p.roots[tid] // empty (no parent) when the store has no client span
		// add adds a synthesized span; attr, when set, is the attribute
		// that holds its name.
		add := func(id, parent pcommon.SpanID, name, attr string, a, z int64) error {
			sp.Attributes().Clear()
			sp.SetTraceID(tid)
			sp.SetSpanID(id)
			sp.SetParentSpanID(parent)
			sp.SetName(name)
			sp.SetKind(ptrace.SpanKindInternal)
			sp.SetStartTimestamp(pcommon.Timestamp(a))
			sp.SetEndTimestamp(pcommon.Timestamp(z))
			if attr != "" {
				sp.Attributes().PutStr(attr, name)
			}
			sp.Attributes().PutBool(AttrSynthesized, true)
			if info.level != "" {
				sp.Attributes().PutStr(clientspan.AttrLevel, info.level)
			}
			return bt.add(-1, -1, rs, sc, sp, "")
		}
		for n, st := range info.stages {
			if err := add(stageSpanID(tid, n, st.Name), root, st.Name, AttrStage, st.StartUnixNs, st.EndUnixNs); err != nil {
				return err
			}
		}
		if len(info.states) == 0 {
			continue
		}
		// The states: a parent over the latency, under the client span.
		parent := stageSpanID(tid, -1, AttributionSpan)
		ss := info.states
		if err := add(parent, root, AttributionSpan, "", ss[0].StartUnixNs, ss[len(ss)-1].EndUnixNs); err != nil {
			return err
		}
		for n, st := range ss {
			if err := add(stageSpanID(tid, 1000+n, st.Name), parent, st.Name, AttrState, st.StartUnixNs, st.EndUnixNs); err != nil {
				return err
			}
		}
	}
	return nil
}

// stageSpanID derives a stable, non-zero span id for stage n of a trace.
func stageSpanID(tid pcommon.TraceID, n int, name string) pcommon.SpanID {
	h := fnv.New64a()
	h.Write(tid[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	h.Write([]byte(name))
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], cmp.Or(h.Sum64(), 1))
	return id
}

// batcher groups spans into export requests of at most max spans, keeping
// each span under a copy of its resource (plus the capture's attributes)
// and scope.
type batcher struct {
	max   int
	attrs map[string]string
	emit  func(ptrace.Traces) error

	td   ptrace.Traces
	n    int
	dest map[[2]int]ptrace.SpanSlice // (resource, scope) index in the current record → spans; {-1, -1}: the synthesized spans'
}

func (bt *batcher) reset() {
	bt.td = ptrace.NewTraces()
	bt.n = 0
	bt.dest = map[[2]int]ptrace.SpanSlice{}
}

func (bt *batcher) add(i, j int, rs ptrace.ResourceSpans, sc ptrace.ScopeSpans, sp ptrace.Span, level string) error {
	key := [2]int{i, j}
	out, ok := bt.dest[key]
	if !ok {
		dst := bt.td.ResourceSpans().AppendEmpty()
		rs.Resource().CopyTo(dst.Resource())
		dst.SetSchemaUrl(rs.SchemaUrl())
		at := dst.Resource().Attributes()
		for _, k := range slices.Sorted(maps.Keys(bt.attrs)) { // sorted: the same bytes every run
			if _, ok := at.Get(k); !ok {
				at.PutStr(k, bt.attrs[k])
			}
		}
		dsc := dst.ScopeSpans().AppendEmpty()
		sc.Scope().CopyTo(dsc.Scope())
		dsc.SetSchemaUrl(sc.SchemaUrl())
		out = dsc.Spans()
		bt.dest[key] = out
	}
	d := out.AppendEmpty()
	sp.CopyTo(d)
	if level != "" {
		if _, ok := d.Attributes().Get(clientspan.AttrLevel); !ok {
			d.Attributes().PutStr(clientspan.AttrLevel, level)
		}
	}
	bt.n++
	if bt.n >= bt.max {
		return bt.flush()
	}
	return nil
}

func (bt *batcher) flush() error {
	if bt.n == 0 {
		return nil
	}
	td := bt.td
	bt.reset()
	return bt.emit(td)
}

// CaptureAttrs returns the resource attributes that name b's capture:
// AttrCapture, and AttrHost and AttrTarget when the manifest knows them.
func CaptureAttrs(b *bundle.Bundle) map[string]string {
	name := filepath.Base(b.Dir)
	if abs, err := filepath.Abs(b.Dir); err == nil {
		name = filepath.Base(abs)
	}
	m := map[string]string{AttrCapture: name}
	fp := b.Manifest.Fingerprint
	if fp.Hostname != "" {
		m[AttrHost] = fp.Hostname
	}
	t, _ := b.Manifest.Config["target"].(string)
	if target := cmp.Or(fp.TargetURL, t); target != "" {
		m[AttrTarget] = target
	}
	return m
}

// forEachSpan calls fn with every span of td, with its resource and scope
// and their indices in td, until fn fails.
func forEachSpan(td ptrace.Traces, fn func(i, j int, rs ptrace.ResourceSpans, sc ptrace.ScopeSpans, sp ptrace.Span) error) error {
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			sc := sss.At(j)
			ss := sc.Spans()
			for k := 0; k < ss.Len(); k++ {
				if err := fn(i, j, rs, sc, ss.At(k)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func service(rs ptrace.ResourceSpans) string {
	if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
		return v.AsString()
	}
	return ""
}

func parseTraceID(s string) (pcommon.TraceID, bool) {
	var id pcommon.TraceID
	if len(s) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, false
	}
	return id, !id.IsEmpty()
}

// OTLPConfig configures OTLP.
type OTLPConfig struct {
	// URL is the OTLP/HTTP endpoint: http://host:4318, with or without the
	// /v1/traces path (see TracesURL).
	URL string
	PlanConfig
	// RateLimit is the most spans per second sent on average (no limit
	// when 0); a batch is never split to honour it.
	RateLimit float64
	// MaxTries bounds the attempts per batch (DefaultMaxTries when 0).
	// Connection errors, timeouts, 429 and 5xx answers are retried after
	// Backoff, doubled per retry up to MaxBackoff (or the server's
	// Retry-After, up to MaxRetryAfter); other answers fail the batch at
	// once.
	MaxTries int
	Backoff  time.Duration // DefaultBackoff when 0
	// Timeout bounds one POST (DefaultTimeout when 0).
	Timeout time.Duration
	// Client sends the requests; nil means a client with Timeout.
	Client *http.Client
	// Progress, when set, is called after every batch (accepted or given
	// up), from the goroutine that called OTLP.
	Progress func(OTLPStats)
}

// OTLPStats says what OTLP did.
type OTLPStats struct {
	Plan          Plan          `json:"plan"`
	URL           string        `json:"url"`
	SentSpans     int           `json:"sent_spans"` // in accepted batches, less Rejected
	SentBatches   int           `json:"sent_batches"`
	Retries       int           `json:"retries"`
	FailedBatches int           `json:"failed_batches"` // given up after MaxTries, or refused for good
	FailedSpans   int           `json:"failed_spans"`
	Rejected      int           `json:"rejected"` // spans an accepting endpoint reported rejected (partial success)
	LastError     string        `json:"last_error,omitempty"`
	Elapsed       time.Duration `json:"elapsed_ns"`
}

// TracesURL returns the OTLP/HTTP traces URL for an endpoint given as
// http(s)://host:port[/prefix] or with the /v1/traces path already; a bare
// host:port means http.
func TracesURL(endpoint string) (string, error) {
	s := strings.TrimSpace(endpoint)
	if s == "" {
		return "", errors.New("empty OTLP endpoint")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("OTLP endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("OTLP endpoint %q: scheme %q, want http or https", endpoint, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("OTLP endpoint %q: no host", endpoint)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1/traces") {
		p += "/v1/traces"
	}
	u.Path = p
	return u.String(), nil
}

// OTLP sends b's traces to the OTLP/HTTP endpoint cfg.URL as protobuf, in
// batches, one at a time. It gives up early, with ErrNeverAccepted, when
// the first batch is never accepted; once a batch has been accepted, a
// failing batch is counted and the export goes on. The stats are returned
// with any error.
func OTLP(ctx context.Context, b *bundle.Bundle, cfg OTLPConfig) (OTLPStats, error) {
	var st OTLPStats
	u, err := TracesURL(cfg.URL)
	if err != nil {
		return st, err
	}
	st.URL = u
	// Zero or less: the default.
	cfg.MaxTries = cmp.Or(max(cfg.MaxTries, 0), DefaultMaxTries)
	cfg.Backoff = cmp.Or(max(cfg.Backoff, 0), DefaultBackoff)
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), DefaultTimeout)
	cfg.Client = cmp.Or(cfg.Client, &http.Client{Timeout: cfg.Timeout})
	p, err := newPlanner(b, cfg.PlanConfig)
	if err != nil {
		return st, err
	}
	st.Plan = p.plan
	start := time.Now()
	s := &sender{cfg: cfg, st: &st}
	var next time.Time // the rate limiter's next allowed send
	var abort error    // why the export stopped early
	err = p.run(func(td ptrace.Traces) error {
		n := td.SpanCount()
		if cfg.RateLimit > 0 {
			if err := sleepUntil(ctx, next); err != nil {
				abort = err
				return err
			}
			now := time.Now()
			if next.Before(now) {
				next = now
			}
			next = next.Add(time.Duration(float64(n) / cfg.RateLimit * float64(time.Second)))
		}
		err := s.send(ctx, td)
		st.Elapsed = time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				abort = ctx.Err()
				return abort
			}
			st.FailedBatches++
			st.FailedSpans += n
			st.LastError = err.Error()
		}
		if cfg.Progress != nil {
			cfg.Progress(st)
		}
		if err != nil && st.SentBatches == 0 {
			abort = fmt.Errorf("%w: %s: %v", ErrNeverAccepted, u, err)
			return abort
		}
		return nil
	})
	st.Elapsed = time.Since(start)
	if err := cmp.Or(abort, err); err != nil { // abort unwrapped
		return st, err
	}
	if st.SentBatches == 0 && st.Plan.Batches > 0 {
		return st, fmt.Errorf("%w: %s: %s", ErrNeverAccepted, u, st.LastError)
	}
	return st, nil
}

type sender struct {
	cfg OTLPConfig
	st  *OTLPStats // its URL is where to post
}

// send posts td until it is accepted, refused for good, or MaxTries is
// spent.
func (s *sender) send(ctx context.Context, td ptrace.Traces) error {
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return fmt.Errorf("encoding export request: %w", err)
	}
	delay := s.cfg.Backoff
	var last error
	for try := 1; try <= s.cfg.MaxTries; try++ {
		if try > 1 {
			s.st.Retries++
		}
		rejected, retryAfter, retry, err := s.post(ctx, body)
		if err == nil {
			s.st.SentBatches++
			s.st.SentSpans += td.SpanCount() - rejected
			s.st.Rejected += rejected
			return nil
		}
		last = err
		if !retry || ctx.Err() != nil || try == s.cfg.MaxTries {
			break
		}
		wait := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
		if retryAfter > wait {
			wait = min(retryAfter, MaxRetryAfter)
		}
		if err := sleepUntil(ctx, time.Now().Add(wait)); err != nil {
			return err
		}
		delay = min(2*delay, MaxBackoff)
	}
	return last
}

// post sends one export request. It returns the spans the endpoint said
// it rejected, and the Retry-After it asked for; on failure, whether the
// answer is worth retrying.
func (s *sender) post(ctx context.Context, body []byte) (rejected int, retryAfter time.Duration, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.st.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, false, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return 0, 0, true, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 == 2 {
		if len(msg) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
			er := ptraceotlp.NewExportResponse()
			if er.UnmarshalProto(msg) == nil {
				rejected = int(er.PartialSuccess().RejectedSpans())
			}
		}
		return rejected, 0, false, nil
	}
	err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, snippet(msg))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode/100 == 5 {
		if v, perr := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); perr == nil && v > 0 {
			retryAfter = time.Duration(v) * time.Second
		}
		return 0, retryAfter, true, err
	}
	return 0, 0, false, err
}

func snippet(b []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	s = strings.Map(func(r rune) rune {
		if r < 0x20 {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return cmp.Or(s, "(empty body)")
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
