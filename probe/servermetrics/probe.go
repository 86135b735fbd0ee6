package servermetrics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asrprof/asrprof/probe"
)

// File is the bundle file the probe appends to, one
// bundle.ServerMetricsRecord a line.
const File = bundle.ServerMetricsFile

// Defaults of Config's zero fields.
const (
	DefaultInterval  = 500 * time.Millisecond
	DefaultTimeout   = 2 * time.Second
	DefaultMaxSeries = 10000
)

// MaxBytes is the largest /metrics answer read; a larger one fails the
// scrape.
const MaxBytes = 32 << 20

// holdback and maxPending bound the scrapes a pass keeps unfolded until
// its End says where the pass ended (see period.add).
const (
	holdback   = int64(60 * time.Second)
	maxPending = 1024
)

var (
	_ probe.Probe        = (*Probe)(nil)
	_ probe.LossReporter = (*Probe)(nil)
	_ probe.Describer    = (*Probe)(nil)
)

// Config configures a Probe.
type Config struct {
	// URL is the /metrics URL to scrape; "" or "auto": Base + /metrics,
	// when it answers 200 with the exposition format (else the probe is
	// not supported); "off": the probe does not run.
	URL string
	// Base is the target's base URL (http, https, ws or wss), for auto.
	Base string
	// Interval between scrapes (DefaultInterval when zero).
	Interval time.Duration
	// Timeout of one scrape (DefaultTimeout when zero).
	Timeout time.Duration
	// MaxSeries bounds the series tracked (DefaultMaxSeries when zero);
	// series beyond it are not recorded, and said in Losses.
	MaxSeries int
	// Client makes the requests (nil: one of the probe's own).
	Client *http.Client
}

// Resolve returns the URL cfg scrapes and whether it was found by auto; it
// returns "" for off.
func Resolve(cfg Config) (u string, auto bool, err error) {
	switch cfg.URL {
	case "off":
		return "", false, nil
	case "", "auto":
		b, err := url.Parse(cfg.Base)
		if err != nil || b.Host == "" {
			return "", true, fmt.Errorf("target %q is not a URL", cfg.Base)
		}
		if !slices.Contains([]string{"http", "https", "ws", "wss"}, b.Scheme) {
			return "", true, fmt.Errorf("target %q: scheme %q has no /metrics", cfg.Base, b.Scheme)
		}
		b.Scheme = strings.Replace(b.Scheme, "ws", "http", 1) // ws → http, wss → https
		b.Path = strings.TrimRight(b.Path, "/") + "/metrics"
		b.RawPath, b.RawQuery, b.Fragment = "", "", ""
		return b.String(), true, nil
	}
	u2, err := url.Parse(cfg.URL)
	if err != nil || (u2.Scheme != "http" && u2.Scheme != "https") || u2.Host == "" {
		return "", false, fmt.Errorf("metrics URL %q: want an http(s) URL, auto or off", cfg.URL)
	}
	return cfg.URL, false, nil
}

// Probe scrapes a Prometheus /metrics endpoint. Create it with New; it
// implements probe.Probe, probe.LossReporter and probe.Describer.
type Probe struct {
	cfg    Config
	url    string
	client *http.Client
	out    probe.Sink

	kick   chan struct{} // asks the loop for a scrape now (End); never blocks
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has returned

	mu        sync.Mutex // guards everything below
	series    map[string]*series
	okTs      int64         // when the newest successful scrape was sent
	lastStart int64         // when the newest finished scrape (ok or not) was sent
	notify    chan struct{} // closed, and replaced, after every scrape
	cur       *period       // the pass in progress
	scrapes   int
	failed    int
	lastErr   string
	dropped   int // the most series one scrape had beyond MaxSeries
	unwritten int // records the sink refused
	writeErr  string
	atStart   int // series in the first scrape
}

// New returns a probe that does nothing until Start.
func New(cfg Config) *Probe {
	cfg.Interval = cmp.Or(max(cfg.Interval, 0), DefaultInterval)
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), DefaultTimeout)
	cfg.MaxSeries = cmp.Or(max(cfg.MaxSeries, 0), DefaultMaxSeries)
	return &Probe{cfg: cfg, kick: make(chan struct{}, 1), notify: make(chan struct{})}
}

// Name returns "metrics".
func (p *Probe) Name() string { return "metrics" }

// Start scrapes once, records the answer and starts scraping every
// Interval. With URL auto, a target without /metrics (an error, a status
// other than 200, or an answer that is not the exposition format or holds
// no sample) returns an error wrapping probe.ErrNotSupported that says
// why, as does URL off; with an explicit URL any failure of that first
// scrape is an error.
func (p *Probe) Start(ctx context.Context, _ probe.Target, out probe.Sink) error {
	u, auto, err := Resolve(p.cfg)
	if err != nil {
		if auto {
			return fmt.Errorf("metrics: %v: %w", err, probe.ErrNotSupported)
		}
		return fmt.Errorf("metrics: %w", err)
	}
	if u == "" {
		return fmt.Errorf("metrics: scraping turned off: %w", probe.ErrNotSupported)
	}
	if p.done != nil {
		return errors.New("metrics: already started")
	}
	p.url, p.out = u, out
	p.client = p.cfg.Client
	if p.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 1
		p.client = &http.Client{Transport: tr}
	}
	p.series = map[string]*series{}

	start := time.Now()
	e, n, err := p.fetch(ctx)
	if err == nil && auto && len(e.Samples) == 0 {
		err = errors.New("the answer holds no sample")
	}
	if err != nil {
		if auto {
			return fmt.Errorf("metrics: no /metrics at %s: %v: %w", u, err, probe.ErrNotSupported)
		}
		return fmt.Errorf("metrics: scraping %s: %w", u, err)
	}
	if err := p.ingest(start, time.Since(start), e, n); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	p.atStart = len(p.series)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(lctx)
	return nil
}

// Detail says what the probe scrapes.
func (p *Probe) Detail() string {
	return fmt.Sprintf("scraping %s every %v (%d series)", p.url, p.cfg.Interval, p.atStart)
}

// loop scrapes every Interval, and when End asks, until ctx ends. One
// scrape at a time: ticks that come while a slow scrape runs are dropped.
func (p *Probe) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
		p.scrape(ctx)
	}
}

// scrape fetches, parses and records one scrape; a failure is counted
// (Losses) and the probe goes on.
func (p *Probe) scrape(ctx context.Context) {
	start := time.Now()
	e, n, err := p.fetch(ctx)
	if err == nil {
		p.ingest(start, time.Since(start), e, n)
		return
	}
	if ctx.Err() != nil {
		return // stopped
	}
	p.mu.Lock()
	p.scrapes++
	p.failed++
	p.lastErr = err.Error()
	p.finished(start)
	p.mu.Unlock()
}

// finished notes that the scrape sent at start is done. p.mu is held.
func (p *Probe) finished(start time.Time) {
	p.lastStart = start.UnixNano()
	close(p.notify)
	p.notify = make(chan struct{})
}

// fetch GETs the URL within Timeout and parses the answer; n is its size.
func (p *Probe) fetch(ctx context.Context) (*Exposition, int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBytes+1))
	if err != nil {
		return nil, len(b), fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > MaxBytes {
		return nil, len(b), fmt.Errorf("answer larger than %d MiB", MaxBytes>>20)
	}
	e, err := Parse(string(b))
	if err != nil {
		return nil, len(b), fmt.Errorf("not the Prometheus text format: %w", err)
	}
	return e, len(b), nil
}

// ingest records one successful scrape sent at start: a sample line per
// series whose value changed since the last scrape (or is new), a scrape
// line, and the scrape in the pass in progress. Unchanged series are not
// written again: a vLLM /metrics holds hundreds of series, most of them
// still between scrapes, and the period summaries see every scrape.
func (p *Probe) ingest(start time.Time, took time.Duration, e *Exposition, n int) error {
	ts := start.UnixNano()
	recs := make([]bundle.ServerMetricsRecord, 0, len(e.Samples)+1)
	f := frame{ts: ts, vals: make([]value, 0, len(e.Samples))}
	p.mu.Lock()
	dropped := 0
	for i := range e.Samples {
		smp := &e.Samples[i]
		s := p.intern(e, smp)
		if s == nil {
			dropped++
			continue
		}
		changed := s.lastTs == 0 || !(s.last == smp.Value || (math.IsNaN(s.last) && math.IsNaN(smp.Value)))
		s.last, s.lastTs = smp.Value, ts
		f.vals = append(f.vals, value{s, smp.Value})
		if !changed {
			continue
		}
		r := bundle.ServerMetricsRecord{Kind: bundle.MetricsKindSample, TsUnixNs: ts, Name: s.name, Type: s.typ, Labels: bundle.MetricLabels{JSON: s.labels}, Value: fp(smp.Value)}
		if smp.HasTimestamp {
			r.ExposedTsMs = &smp.TimestampMs
		}
		recs = append(recs, r)
	}
	recs = append(recs, bundle.ServerMetricsRecord{Kind: bundle.MetricsKindScrape, TsUnixNs: ts, DurationS: took.Seconds(), Series: len(f.vals), Bytes: n})
	p.dropped = max(p.dropped, dropped)
	p.scrapes++
	p.okTs = ts
	if p.cur != nil {
		p.cur.add(f, holdback, maxPending)
	}
	p.finished(start)
	p.mu.Unlock()
	return write(p, recs)
}

// write appends recs to File; a record that cannot be written is counted
// (Losses) and the first error returned.
func write(p *Probe, recs []bundle.ServerMetricsRecord) error {
	var first error
	for _, r := range recs {
		if err := p.out.Append(File, r); err != nil {
			p.mu.Lock()
			p.unwritten++
			p.writeErr = err.Error()
			p.mu.Unlock()
			if first == nil {
				first = fmt.Errorf("writing %s: %w", File, err)
			}
		}
	}
	return first
}

// intern returns the series of smp, made on first sight; nil when it is
// new and MaxSeries are tracked already. p.mu is held.
func (p *Probe) intern(e *Exposition, smp *Sample) *series {
	labels := smp.Labels
	byName := func(a, b Label) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(labels, byName) {
		labels = slices.SortedFunc(slices.Values(labels), byName)
	}
	var k strings.Builder
	k.WriteString(smp.Name)
	for _, l := range labels {
		k.WriteByte(0)
		k.WriteString(l.Name)
		k.WriteByte(1)
		k.WriteString(l.Value)
	}
	key := k.String()
	typ := e.TypeOf(smp.Name)
	s := p.series[key]
	if s == nil {
		if len(p.series) >= p.cfg.MaxSeries {
			return nil
		}
		m := make(map[string]string, len(labels))
		for _, l := range labels {
			m[l.Name] = l.Value
		}
		lb, _ := json.Marshal(m) // a map of strings always marshals
		s = &series{name: smp.Name, labels: lb}
		p.series[key] = s
	}
	if s.typ != typ {
		s.typ, s.cumulative = typ, Cumulative(typ, smp.Name)
	}
	return s
}

// Begin takes the newest successful scrape as the pass's baseline: a
// counter's increase in the pass is counted from its value there. It does
// not wait for a scrape.
func (p *Probe) Begin(pr probe.Period) {
	p.mu.Lock()
	defer p.mu.Unlock()
	base := map[*series]float64{}
	for _, s := range p.series { // none before the first good scrape (okTs 0)
		if s.cumulative && s.lastTs == p.okTs {
			base[s] = s.last
		}
	}
	p.cur = newPeriod(pr, p.okTs, base)
}

// End asks for a scrape sent after the pass ended and waits for it (at
// most twice Timeout, and not past ctx), so that counters include the
// pass's last requests; then writes one period record per series that had
// samples in the pass. A scrape that fails or comes too late is counted in
// Losses, and the records use the newest scrape there is (their
// to_unix_ns says which).
func (p *Probe) End(ctx context.Context, pr probe.Period) error {
	select {
	case p.kick <- struct{}{}:
	default:
	}
	wait := time.NewTimer(2 * p.cfg.Timeout)
	defer wait.Stop()
	for {
		p.mu.Lock()
		ok, ch := p.lastStart >= pr.EndUnixNs, p.notify
		p.mu.Unlock()
		if ok {
			break
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
		case <-wait.C:
		case <-p.done:
		}
		break
	}
	p.mu.Lock()
	cur := p.cur
	p.cur = nil
	p.mu.Unlock()
	if cur == nil {
		return nil
	}
	if err := write(p, cur.finish(pr)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Stop ends the scraping; a scrape in flight is cancelled. It waits for
// the loop until ctx ends.
func (p *Probe) Stop(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("metrics: stop: %w", ctx.Err())
	}
}

// Losses says how many scrapes failed, with the last error, how many
// series were beyond MaxSeries and how many records could not be written;
// "" when none.
func (p *Probe) Losses() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	if p.failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d scrapes failed: last error %s (their samples are missing; the period figures use the other scrapes)",
			p.failed, p.scrapes, p.lastErr))
	}
	if p.unwritten > 0 {
		parts = append(parts, fmt.Sprintf("%d records not written to %s: last error %s", p.unwritten, File, p.writeErr))
	}
	if p.dropped > 0 {
		parts = append(parts, fmt.Sprintf("up to %d series a scrape not recorded (beyond the limit of %d series)", p.dropped, p.cfg.MaxSeries))
	}
	return strings.Join(parts, "; ")
}
