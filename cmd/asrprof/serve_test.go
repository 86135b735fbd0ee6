package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
)

// syncBuf is a bytes.Buffer safe for a process's output and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a process the test started; it is stopped (SIGTERM, then
// SIGKILL) when the test ends, and its output logged if the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
}

// startProc starts argv (through `ip netns exec ns` when ns is set) in
// its own process group.
func startProc(t *testing.T, name, ns string, env []string, argv ...string) *proc {
	t.Helper()
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	p := &proc{name: name, cmd: exec.Command(argv[0], argv[1:]...), out: &syncBuf{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// waitOutput waits until the process printed a line matching re and
// returns the first group.
func (p *proc) waitOutput(t *testing.T, re *regexp.Regexp, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s: no %q after %v:\n%s", p.name, re, limit, p.out.String())
	return ""
}

var serveListening = regexp.MustCompile(`listening on (http://\S+) `)

// startServe runs `asrprof serve` (the test binary as asrprof) and
// returns its base URL.
func startServe(t *testing.T, ns string, args ...string) (*proc, string) {
	t.Helper()
	p := startProc(t, "asrprof serve", ns, []string{"ASRPROF_TEST_MAIN=1"}, append([]string{os.Args[0], "serve"}, args...)...)
	return p, p.waitOutput(t, serveListening, 20*time.Second)
}

// api calls the daemon and decodes a JSON answer into out (nil: none);
// it returns the status code and the raw body.
func api(t *testing.T, method, u, token string, in, out any) (int, []byte) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, u, err, b)
		}
	}
	return resp.StatusCode, b
}

// prometheusBin is Debian's prometheus (tools/deps.sh installs it).
func prometheusBin(t *testing.T) string {
	t.Helper()
	return need.Binary(t, "prometheus") // Debian package prometheus
}

// startPrometheus runs a Prometheus server (in ns when set) that scrapes
// the given asrprof serve base URLs every 500 ms with the bearer token,
// and returns its base URL once ready.
func startPrometheus(t *testing.T, ns, listen, token string, targets ...string) string {
	t.Helper()
	bin := prometheusBin(t)
	dir := t.TempDir()
	var hosts []string
	scheme := "http"
	for _, tg := range targets {
		u, err := url.Parse(tg)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, strconv.Quote(u.Host))
	}
	auth := ""
	if token != "" {
		auth = fmt.Sprintf("    authorization:\n      credentials: %q\n", token)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: asrprof
    scheme: %s
%s    static_configs:
      - targets: [%s]
`, scheme, auth, strings.Join(hosts, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "prometheus", ns, nil, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	base := "http://" + listen
	if ns != "" {
		return base // the caller reaches it through the namespace
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-p.done:
			t.Fatalf("prometheus exited:\n%s", p.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("prometheus not ready after 30 s:\n%s", p.out.String())
	return ""
}

// promSeries is one series of a Prometheus instant query.
type promSeries struct {
	Metric map[string]string
	Value  float64
}

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(t *testing.T, base, q string) []promSeries {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("prometheus query %q: %v", q, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("prometheus query %q: %v %s %s", q, err, r.Status, r.Error)
	}
	var out []promSeries
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out = append(out, promSeries{s.Metric, v})
	}
	return out
}

// waitQuery polls q until ok accepts its result.
func waitQuery(t *testing.T, base, q string, limit time.Duration, ok func([]promSeries) bool) []promSeries {
	t.Helper()
	deadline := time.Now().Add(limit)
	var got []promSeries
	for time.Now().Before(deadline) {
		if got = promQuery(t, base, q); ok(got) {
			return got
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("prometheus: %s = %v after %v", q, got, limit)
	return nil
}

func waitCapture(t *testing.T, base, token, id string, limit time.Duration) capture.AgentCapture {
	t.Helper()
	deadline := time.Now().Add(limit)
	var ac capture.AgentCapture
	for time.Now().Before(deadline) {
		api(t, "GET", base+"/v1/captures/"+id, token, nil, &ac)
		if ac.State != "running" {
			return ac
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("capture %s still running after %v: %+v", id, limit, ac)
	return ac
}

// untar lists a tar.gz's files and their contents.
func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("bundle: %v", err)
		}
		out[h.Name], _ = io.ReadAll(tr)
	}
}

// TestServeRefusesOpenListenWithoutToken: `asrprof serve --listen
// 0.0.0.0:...` without a token exits 2 and says why; with one it warns.
func TestServeRefusesOpenListenWithoutToken(t *testing.T) {
	code, _, stderr := runCLI("serve", "--listen", "0.0.0.0:0", "--dir", t.TempDir())
	if code != exitUsage || !strings.Contains(stderr, "--token") {
		t.Errorf("serve on 0.0.0.0 without a token: exit %d, stderr %q", code, stderr)
	}
	p, _ := startServe(t, "", "--listen", "0.0.0.0:0", "--token", "s3cret", "--dir", t.TempDir())
	if !strings.Contains(p.out.String(), "warning: asrprof serve listens on 0.0.0.0") {
		t.Errorf("no warning for a non-loopback listen:\n%s", p.out.String())
	}
}

// TestServeCapturesAndPrometheus runs `asrprof serve`, starts a driven
// capture and a probes-only one over its API, and reads the live series
// back from a Prometheus server that scrapes it: the driven capture's
// request series, and the thread CPU and run-queue series the sched probe
// feeds during the probes-only one (no GPU here: the GPU gauges are
// unit-tested in serve).
func TestServeCapturesAndPrometheus(t *testing.T) {
	prometheusBin(t)
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 20 * time.Millisecond})
	ds := dataset(t, 3)
	_, base := startServe(t, "", "--listen", "127.0.0.1:0", "--dir", t.TempDir())
	prom := startPrometheus(t, "", fmt.Sprintf("127.0.0.1:%d", fakeasr.FreePort(t)), "", base)

	// Bad args get the CLI's own error.
	if code, body := api(t, "POST", base+"/v1/captures", "", capture.AgentStart{Args: []string{"--target", srv.URL, "--concurrency", "0"}}, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "--dataset") {
		t.Errorf("bad args: %d %s", code, body)
	}
	if code, body := api(t, "POST", base+"/v1/captures", "", capture.AgentStart{Args: []string{"--out", "/etc"}}, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "--out") {
		t.Errorf("--out over the API: %d %s", code, body)
	}
	// The options as fields, not args: the field is named.
	if code, body := api(t, "POST", base+"/v1/captures", "", map[string]any{"target": srv.URL, "dataset": ds}, nil); code != http.StatusBadRequest || !strings.Contains(string(body), `unknown field \"dataset\"`) {
		t.Errorf("fields instead of args: %d %s", code, body)
	}

	// A driven capture: 3 samples × 2 levels × 2 repeats = 12 requests.
	var driven capture.AgentCapture
	code, body := api(t, "POST", base+"/v1/captures", "", capture.AgentStart{Args: []string{"--target", srv.URL, "--dataset", ds,
		"--concurrency", "1,2", "--repeats", "2", "--probes", "sched", "--otlp-http", "off", "--otlp-grpc", "off", "--server-metrics", "off"}}, &driven)
	if code != http.StatusCreated {
		t.Fatalf("starting a driven capture: %d %s", code, body)
	}
	// Following its log streams until it ends.
	resp, err := http.Get(base + "/v1/captures/" + driven.ID + "/log?follow=1")
	if err != nil {
		t.Fatal(err)
	}
	logText, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	ac := waitCapture(t, base, "", driven.ID, time.Minute)
	if ac.State != "finished" || ac.Done != 12 || ac.Sent != 12 || ac.Failed != 0 || ac.Periods != 4 {
		t.Fatalf("driven capture: %+v\nlog:\n%s", ac, logText)
	}
	if !strings.Contains(string(logText), "bundle: ") || !strings.Contains(string(logText), "c=2 repeat 2/2: 3/3 ok") {
		t.Errorf("the followed log lacks the capture's end:\n%s", logText)
	}
	waitQuery(t, prom, fmt.Sprintf(`asrprof_capture_requests_total{capture=%q,status="ok"}`, driven.ID), 20*time.Second,
		func(s []promSeries) bool { return len(s) == 1 && s[0].Value == 12 })
	waitQuery(t, prom, fmt.Sprintf(`asrprof_capture_request_latency_seconds_count{capture=%q}`, driven.ID), 10*time.Second,
		func(s []promSeries) bool { return len(s) == 1 && s[0].Value == 12 })
	// Latencies are at least the server's 20 ms delay: nothing in the
	// first two buckets (5 and 10 ms).
	waitQuery(t, prom, fmt.Sprintf(`asrprof_capture_request_latency_seconds_bucket{capture=%q,le="0.01"}`, driven.ID), 10*time.Second,
		func(s []promSeries) bool { return len(s) == 1 && s[0].Value == 0 })

	// Its bundle and report.
	code, tgz := api(t, "GET", base+"/v1/captures/"+driven.ID+"/bundle", "", nil, nil)
	files := untar(t, tgz)
	if code != http.StatusOK || len(files["manifest.json"]) == 0 || bytes.Count(files["requests.jsonl"], []byte("\n")) != 12 || len(files["sched.jsonl"]) == 0 {
		t.Errorf("bundle: %d, files %v", code, len(files))
	}
	// The driven capture wrote its report.html, as `asrprof capture` does.
	if code, body := api(t, "GET", base+"/v1/captures/"+driven.ID+"/report", "", nil, nil); code != http.StatusOK || !strings.Contains(string(body), "<html") || len(files["report.html"]) == 0 {
		t.Errorf("report of the driven capture: %d, %d bytes, in the bundle: %d bytes", code, len(body), len(files["report.html"]))
	}
	if ac.Report != true {
		t.Errorf("the driven capture's info says report %v, want true", ac.Report)
	}

	// A probes-only capture of this test process, live: its thread series
	// appear while it runs, then it is stopped.
	var po capture.AgentCapture
	code, body = api(t, "POST", base+"/v1/captures", "", capture.AgentStart{Args: []string{"--probes-only", "--pid", strconv.Itoa(os.Getpid()),
		"--probes", "sched", "--period", "500ms"}}, &po)
	if code != http.StatusCreated || po.Kind != "probes" {
		t.Fatalf("starting a probes-only capture: %d %s", code, body)
	}
	// Once the probe runs (its first period's series are scraped), the
	// test spins for 1.5 s; the scraped CPU of its own threads must grow
	// by at least half of what the kernel says the process used meanwhile
	// (/proc/self/stat: the machine is shared, the spin may get less than
	// a core).
	own := func(s []promSeries) float64 {
		var cpu float64 // the probe follows the target's descendants (serve, prometheus) too
		for _, x := range s {
			if x.Metric["pid"] == strconv.Itoa(os.Getpid()) {
				cpu += x.Value
			}
		}
		return cpu
	}
	q := fmt.Sprintf(`asrprof_thread_cpu_seconds_total{capture=%q}`, po.ID)
	before := own(waitQuery(t, prom, q, 20*time.Second, func(s []promSeries) bool { return own(s) > 0 }))
	cpu0 := selfCPU(t)
	busy := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(busy) { // CPU on this process's threads
	}
	spent := selfCPU(t) - cpu0
	if spent < 0.05 {
		t.Fatalf("the spin got %.3f s of CPU", spent)
	}
	got := waitQuery(t, prom, q, 20*time.Second, func(s []promSeries) bool { return own(s)-before >= spent/2 })
	t.Logf("the spin: %.3f s of CPU by /proc/self/stat; the scraped series grew by %.3f s", spent, own(got)-before)
	waitQuery(t, prom, fmt.Sprintf(`asrprof_thread_cpu_utilization{capture=%q}`, po.ID), 10*time.Second,
		func(s []promSeries) bool { return len(s) > 0 })
	waitQuery(t, prom, fmt.Sprintf(`asrprof_runqueue_latency_seconds_count{capture=%q}`, po.ID), 10*time.Second,
		func(s []promSeries) bool { return len(s) == 1 && s[0].Value > 0 })
	code, body = api(t, "POST", base+"/v1/captures/"+po.ID+"/stop?wait=1", "", nil, &po)
	if code != http.StatusAccepted || po.State != "finished" || po.Periods < 1 || !po.Complete {
		t.Errorf("stopping the probes-only capture: %d %+v %s", code, po, body)
	}

	// The page lists both.
	_, page := api(t, "GET", base+"/", "", nil, nil)
	for _, id := range []string{driven.ID, po.ID} {
		if !strings.Contains(string(page), "v1/captures/"+id) {
			t.Errorf("the page does not list %s:\n%s", id, page)
		}
	}
	var list []capture.AgentCapture
	api(t, "GET", base+"/v1/captures", "", nil, &list)
	if len(list) != 2 {
		t.Errorf("list: %+v", list)
	}
}

// TestCaptureTwoAgents: one capture takes probe data from two agents
// (--agent twice, two asrprof serve on loopback): the first agent's
// files at the bundle's root, the second's under agents/<host_port>/,
// both clocks in the manifest, and both agents' records counted per pass.
func TestCaptureTwoAgents(t *testing.T) {
	// not parallel: the agents' probes saw the parallel tests' servers
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 10 * time.Millisecond})
	_, a1 := startServe(t, "", "--listen", "127.0.0.1:0", "--dir", t.TempDir())
	_, a2 := startServe(t, "", "--listen", "127.0.0.1:0", "--dir", t.TempDir())
	out := filepath.Join(t.TempDir(), "b")
	cmd := exec.Command(os.Args[0], "capture", "--agent", a1, "--agent", a2, "--target", srv.URL, "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "2", "--probes", "sched", "--pid", strconv.Itoa(os.Getpid()),
		"--otlp-http", "off", "--otlp-grpc", "off", "--out", out, "--quiet")
	cmd.Env = append(os.Environ(), "ASRPROF_TEST_MAIN=1")
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("capture with two agents: %v\n%s", err, got)
	}
	var m struct {
		Complete   bool
		Incomplete []string
		Clock      struct {
			Agents []struct{ Agent, When string }
		}
		Extra struct {
			Probes map[string]string
			Agents []struct{ URL, Dir string }
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if !m.Complete || len(m.Clock.Agents) != 4 || len(m.Extra.Agents) != 2 {
		t.Fatalf("manifest: complete %v %v, clocks %+v, agents %+v\n%s", m.Complete, m.Incomplete, m.Clock.Agents, m.Extra.Agents, got)
	}
	for _, a := range []string{a1, a2} {
		if st := m.Extra.Probes["agent "+strings.TrimPrefix(a, "http://")]; st != "on" {
			t.Errorf("agent %s: %q", a, st)
		}
	}
	second := filepath.Join(out, "agents", strings.ReplaceAll(strings.TrimPrefix(a2, "http://"), ":", "_"))
	if m.Extra.Agents[0].Dir != "." || m.Extra.Agents[1].Dir != strings.TrimPrefix(second, out+"/") {
		t.Errorf("agent dirs: %+v", m.Extra.Agents)
	}
	// The root files are the bundle's own: its tables and analyses read them.
	if _, err := os.Stat(filepath.Join(out, "tables", "sched.parquet")); err != nil {
		t.Errorf("the bundle's tables lack the first agent's sched data: %v", err)
	}
	code, stdout, stderr := runCLI("analyze", out, "cpu")
	if code != exitOK || !regexp.MustCompile(`(?m)^c=1 +asrprof\.test `).MatchString(stdout) {
		t.Errorf("analyze cpu on the agents' data: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, p := range []string{filepath.Join(out, "sched.jsonl"), filepath.Join(second, "sched.jsonl")} {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(`"pid":`+strconv.Itoa(os.Getpid()))) || !bytes.Contains(b, []byte(`"level":"c1","repeat":2`)) {
			t.Errorf("%s: %v, %d bytes", p, err, len(b))
		}
	}
}

// selfCPU is this process's user+system CPU time in seconds
// (/proc/self/stat, clock ticks of 10 ms).
func selfCPU(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// A proxy capture with --agent takes its probe data from the agent, as a
// driven one does: one period, the proxy's window, begun and ended there.
func TestCaptureProxyAgent(t *testing.T) {
	need.Binary(t, "curl")
	srv := fakeasr.NewServer(t, fakeasr.Config{Text: "hello there", Delay: 50 * time.Millisecond})
	_, agent := startServe(t, "", "--listen", "127.0.0.1:0", "--dir", t.TempDir())
	dir := t.TempDir()
	wav := filepath.Join(dir, "a.wav")
	if err := os.WriteFile(wav, audiotest.WAV16(16000, 1, make([]int16, 16000)...), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "b")
	script := `for i in 1 2 3; do curl -sS -F model=m -F "file=@` + wav + `;type=audio/wav" "$ASRPROF_PROXY_URL/v1/audio/transcriptions" >/dev/null || exit 9; sleep 0.1; done`
	code, _, stderr := runCLI("capture", "--proxy", ":0", "--agent", agent, "--target", srv.URL, "--out", out, "--levels", "c1",
		"--probes", "proc", "--pid", strconv.Itoa(os.Getpid()), "--proc-hz", "50",
		"--otlp-http", "off", "--otlp-grpc", "off", "--quiet", "--", "bash", "-c", script)
	if code != exitOK {
		t.Fatalf("capture --proxy --agent: exit %d\n%s", code, stderr)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	probes, _ := b.Manifest.Extra["probes"].(map[string]any)
	if st := probes["agent "+strings.TrimPrefix(agent, "http://")]; st != "on" || len(probes) != 1 {
		t.Errorf("probes %v: want the agent's alone, on", probes)
	}
	rows, err := os.ReadFile(filepath.Join(out, "sched.jsonl"))
	if err != nil || !bytes.Contains(rows, []byte(`"level":"proxy","repeat":1`)) {
		t.Errorf("sched.jsonl from the agent: %v, %d bytes\n%s", err, len(rows), stderr)
	}
}
