package capture

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
)

// The API between a capture with --agent and asrprof serve (the serve
// package implements the server side; docs/SCALE.md).
const (
	AgentTimePath     = "/v1/time"     // GET: AgentTime
	AgentCapturesPath = "/v1/captures" // POST AgentStart: AgentCapture; GET: []AgentCapture
	// Under AgentCapturesPath + "/{id}": GET (AgentCapture), POST /begin
	// and /end (a probe.Period; /end answers AgentEnd), POST /stop
	// (?wait=1: answers once finished), GET /bundle (tar.gz), GET /report.
)

// AgentTime is the agent's answer to a clock probe: its wall clock when
// the request arrived and when the answer left.
type AgentTime struct {
	RecvUnixNs int64 `json:"recv_unix_ns"`
	SendUnixNs int64 `json:"send_unix_ns"`
}

// AgentStart asks asrprof serve to start a capture. Args are the flags of
// `asrprof capture` as a user types them. Remote makes a probes-only
// capture whose periods the caller gives (/begin, /end) instead of a
// timer: the agent's half of a capture with --agent.
type AgentStart struct {
	Args   []string `json:"args"`
	Remote bool     `json:"remote,omitempty"`
}

// AgentCapture is one capture as asrprof serve lists it.
type AgentCapture struct {
	ID     string            `json:"id"`
	Kind   string            `json:"kind"`  // driven, probes or remote
	State  string            `json:"state"` // running, finished, failed
	Dir    string            `json:"dir"`
	Start  int64             `json:"start_unix_ns"`
	End    int64             `json:"end_unix_ns,omitempty"`
	Error  string            `json:"error,omitempty"`
	Probes map[string]string `json:"probes,omitempty"`
	// Requests sent, finished, and finished with a status other than ok.
	Sent     int64 `json:"requests_sent"`
	Done     int64 `json:"requests_done"`
	Failed   int64 `json:"requests_failed"`
	Periods  int   `json:"periods"`
	Report   bool  `json:"report"` // the bundle has report.html
	Complete bool  `json:"complete"`
}

// AgentEnd is the answer to /end: what each probe recorded in the period.
type AgentEnd struct {
	Counts map[string]uint64 `json:"counts"`
}

// agentProbes makes one probe per --agent. The first agent's files go to
// the bundle's root (the same files as a local capture, so every analysis
// reads them); the others' under agents/<host_port>/.
func agentProbes(cfg *Config) []probe.Probe {
	var ps []probe.Probe
	for i, a := range cfg.Agents {
		u, _ := url.Parse(a) // Validate checked it
		ps = append(ps, &agentProbe{
			base: strings.TrimRight(a, "/"), host: u.Host, root: i == 0, cfg: cfg,
			client: &http.Client{Timeout: 30 * time.Second},
		})
	}
	return ps
}

// agentProbe runs a capture's probes in asrprof serve on another host
// over its API. It implements probe.Probe, probe.Describer,
// probe.PeriodCounter and probe.LossReporter, so the capture counts and
// reports the agent's probes as its own.
type agentProbe struct {
	base, host string
	root       bool
	cfg        *Config
	client     *http.Client

	mu       sync.Mutex
	id       string
	status   map[string]string
	out      probe.Sink
	count    int
	beginErr error
	clocks   []model.AgentClock
	manifest *model.Manifest // the agent's, once fetched
	files    []string        // bundle files that came back
	fetchErr error
}

func (a *agentProbe) Name() string { return "agent " + a.host }

// dir is where this agent's files go in the bundle ("" is the root).
func (a *agentProbe) dir() string {
	if a.root {
		return ""
	}
	return a.ownDir()
}

// ownDir is agents/<host_port>/, where the agent's manifest goes (and,
// but for the first agent's, its files).
func (a *agentProbe) ownDir() string {
	return "agents/" + strings.NewReplacer(":", "_", "[", "", "]", "").Replace(a.host) + "/"
}

func (a *agentProbe) do(ctx context.Context, method, p string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+p, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.cfg.AgentToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.AgentToken)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("agent %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct { // asrprof serve answers errors as {"error": ..., "status": ...}
			Error string `json:"error"`
		}
		if json.Unmarshal(msg, &e) == nil && e.Error != "" {
			msg = []byte(e.Error)
		}
		return fmt.Errorf("agent %s: %s %s: %s: %s", a.base, method, p, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		return nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err = io.Copy(w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent %s: %s %s: decoding the answer: %w", a.base, method, p, err)
	}
	return nil
}

// Start measures the agent's clock and starts a remote probes-only
// capture there. It fails when the agent does not answer or none of its
// probes could start.
func (a *agentProbe) Start(ctx context.Context, t probe.Target, out probe.Sink) error {
	c, err := MeasureClock(ctx, a.client, a.base, a.cfg.AgentToken, 8)
	if err != nil {
		return err
	}
	c.When = "start"
	var ac AgentCapture
	if err := a.do(ctx, http.MethodPost, AgentCapturesPath, AgentStart{Args: agentArgs(a.cfg), Remote: true}, &ac); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clocks = append(a.clocks, c)
	a.id, a.status, a.out = ac.ID, ac.Probes, out
	return nil
}

// Detail lists the agent's probes and their states.
func (a *agentProbe) Detail() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	parts := joinSorted(a.status, ", ", func(n, st string) string { return n + " " + st })
	c := a.clocks[0]
	return fmt.Sprintf("capture %s at %s (%s); clock offset %+.3f ms ± %.3f ms",
		a.id, a.base, parts, float64(c.OffsetNs)/1e6, float64(c.UncertaintyNs)/1e6)
}

func (a *agentProbe) path(what string) string {
	return AgentCapturesPath + "/" + url.PathEscape(a.id) + what
}

func (a *agentProbe) Begin(p probe.Period) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.do(ctx, http.MethodPost, a.path("/begin"), p, nil)
	a.mu.Lock()
	a.beginErr = err
	a.mu.Unlock()
}

func (a *agentProbe) End(ctx context.Context, p probe.Period) error {
	a.mu.Lock()
	berr := a.beginErr
	a.count = 0
	a.mu.Unlock()
	if berr != nil {
		return berr
	}
	var e AgentEnd
	if err := a.do(ctx, http.MethodPost, a.path("/end"), p, &e); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range e.Counts {
		a.count += int(c)
	}
	return nil
}

// PeriodCount is what the agent's probes recorded in the last period.
func (a *agentProbe) PeriodCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// Losses says what the agent's probes lost, from its manifest (known
// after Stop).
func (a *agentProbe) Losses() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.manifest == nil {
		return ""
	}
	l, _ := a.manifest.Extra["probe_losses"].(map[string]any)
	return joinSorted(l, "; ", func(n string, v any) string { return fmt.Sprintf("%s: %v", n, v) })
}

// joinSorted formats each entry of m with f, in key order, and joins them
// with sep.
func joinSorted[V any](m map[string]V, sep string, f func(string, V) string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, f(k, m[k]))
	}
	return strings.Join(parts, sep)
}

// Stop finishes the agent's capture, measures its clock again, and brings
// its probe files into the bundle.
func (a *agentProbe) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var ac AgentCapture
	if err := a.do(ctx, http.MethodPost, a.path("/stop")+"?wait=1", nil, &ac); err != nil {
		return err
	}
	c, cerr := MeasureClock(ctx, a.client, a.base, a.cfg.AgentToken, 8)
	var buf bytes.Buffer
	err := a.do(ctx, http.MethodGet, a.path("/bundle"), nil, &buf)
	var files []string
	var m *model.Manifest
	if err == nil {
		files, m, err = a.unpack(&buf)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cerr == nil {
		c.When = "end"
		a.clocks = append(a.clocks, c)
	}
	a.files, a.manifest, a.fetchErr = files, m, err
	if ac.State == "failed" {
		err = errors.Join(err, fmt.Errorf("agent %s: its capture failed: %s", a.base, ac.Error))
	}
	return errors.Join(err, cerr)
}

// unpack writes the probe files of the agent's bundle (a tar.gz) into
// this bundle, under dir(); the agent's manifest goes to
// agents/<host>/manifest.json. What is the driver's (requests, results)
// or derived (tables) is not taken.
func (a *agentProbe) unpack(r io.Reader) ([]string, *model.Manifest, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("agent %s: bundle: %w", a.base, err)
	}
	tr := tar.NewReader(zr)
	var files []string
	var m *model.Manifest
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return files, m, fmt.Errorf("agent %s: bundle: %w", a.base, err)
		}
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || strings.HasPrefix(name, "..") || path.IsAbs(name) {
			continue
		}
		dst := a.dir() + name
		switch {
		case name == bundle.ManifestFile:
			dst = a.ownDir() + name
		case name == bundle.RequestsFile, name == bundle.ResultsFile, name == "tables.json", strings.HasPrefix(name, "tables/"):
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return files, m, fmt.Errorf("agent %s: bundle %s: %w", a.base, name, err)
		}
		if name == bundle.ManifestFile {
			var am model.Manifest
			if json.Unmarshal(b, &am) == nil {
				m = &am
			}
		}
		p := a.out.Path(filepath.FromSlash(dst))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return files, m, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return files, m, err
		}
		files = append(files, dst)
	}
	return files, m, nil
}

// MeasureClock measures the wall clock of the asrprof serve at base
// against this one, NTP-style: n round trips to its time route; of them,
// the one with the smallest round-trip time gives the offset (the agent's
// clock minus ours, ((t1-t0)+(t2-t3))/2) and its uncertainty (half that
// round trip, less the agent's own time between t1 and t2).
func MeasureClock(ctx context.Context, c *http.Client, base, token string, n int) (model.AgentClock, error) {
	best := model.AgentClock{Agent: base, MinRTTNs: -1}
	for i := 0; i < n; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+AgentTimePath, nil)
		if err != nil {
			return best, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return best, fmt.Errorf("agent %s: %w", base, err)
		}
		var at AgentTime
		derr := json.NewDecoder(resp.Body).Decode(&at)
		resp.Body.Close()
		t3 := time.Now()
		if resp.StatusCode != http.StatusOK || derr != nil {
			return best, fmt.Errorf("agent %s: %s: %s (is it asrprof serve? is --agent-token right?)", base, AgentTimePath, resp.Status)
		}
		rtt := t3.Sub(t0).Nanoseconds() - (at.SendUnixNs - at.RecvUnixNs)
		if best.MinRTTNs < 0 || rtt < best.MinRTTNs {
			best.MinRTTNs = rtt
			best.OffsetNs = ((at.RecvUnixNs - t0.UnixNano()) + (at.SendUnixNs - t3.UnixNano())) / 2
			best.UncertaintyNs = rtt / 2
			best.AtUnixNs = t0.UnixNano()
		}
		best.Samples++
	}
	return best, nil
}

// agents returns the running probes that are agents.
func (s *probeSet) agents() []*agentProbe {
	var out []*agentProbe
	for _, pr := range s.running {
		if a, ok := pr.(*agentProbe); ok {
			out = append(out, a)
		}
	}
	return out
}

// recordAgents puts what the stopped agents did into the manifest: their
// clocks (Clock.Agents), where their files are (extra.agents), and what
// their own captures missed (Incomplete).
func recordAgents(m *model.Manifest, agents []*agentProbe) {
	if len(agents) == 0 {
		return
	}
	var reps []map[string]any
	for _, a := range agents {
		a.mu.Lock()
		r := map[string]any{"url": a.base, "capture": a.id, "probes": a.status, "files": a.files,
			"dir": cmp.Or(strings.TrimSuffix(a.dir(), "/"), ".")}
		if a.fetchErr != nil {
			r["error"] = a.fetchErr.Error()
			m.Incomplete = append(m.Incomplete, fmt.Sprintf("agent %s: probe data did not come back: %v", a.base, a.fetchErr))
		}
		if a.manifest != nil {
			for _, s := range a.manifest.Incomplete {
				m.Incomplete = append(m.Incomplete, fmt.Sprintf("agent %s: %s", a.base, s))
			}
		}
		for i := range a.clocks {
			a.clocks[i].Agent = a.base
		}
		m.Clock.Agents = append(m.Clock.Agents, a.clocks...)
		a.mu.Unlock()
		reps = append(reps, r)
	}
	m.Extra["agents"] = reps
}
