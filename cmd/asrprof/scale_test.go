package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// twoHosts makes two network namespaces joined by a veth pair, each
// standing for a host: a (the GPU server's host, 10.77.N.1) and b (the
// driver's host, 10.77.N.2). They are removed when the test ends. It
// skips, saying why, only where namespaces cannot be made (not root, no
// ip); as root on the CI machines it must run.
func twoHosts(t *testing.T) (nsA, nsB, ipA, ipB string) {
	t.Helper()
	need.Binary(t, "ip") // iproute2
	need.Root(t, "to make network namespaces")
	n := os.Getpid() % 250
	nsA, nsB = fmt.Sprintf("asrprof-a%d", os.Getpid()), fmt.Sprintf("asrprof-b%d", os.Getpid())
	ipA, ipB = fmt.Sprintf("10.77.%d.1", n), fmt.Sprintf("10.77.%d.2", n)
	vethA, vethB := fmt.Sprintf("asva%d", os.Getpid()%100000), fmt.Sprintf("asvb%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", nsA).CombinedOutput(); err != nil {
		need.Skip(t, "ip netns add: %v (%s): network namespaces cannot be made here", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsA).Run() })
	ip("netns", "add", nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsB).Run() })
	ip("link", "add", vethA, "type", "veth", "peer", "name", vethB)
	ip("link", "set", vethA, "netns", nsA)
	ip("link", "set", vethB, "netns", nsB)
	for _, h := range []struct{ ns, dev, addr string }{{nsA, vethA, ipA}, {nsB, vethB, ipB}} {
		ip("-n", h.ns, "addr", "add", h.addr+"/24", "dev", h.dev)
		ip("-n", h.ns, "link", "set", h.dev, "up")
		ip("-n", h.ns, "link", "set", "lo", "up")
	}
	return nsA, nsB, ipA, ipB
}

// inNS runs argv in ns and returns its stdout.
func inNS(t *testing.T, ns string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).Output()
	if err != nil {
		t.Fatalf("in %s: %s: %v", ns, strings.Join(argv, " "), err)
	}
	return string(out)
}

// waitHTTP waits until url answers 200 from inside ns.
func waitHTTP(t *testing.T, ns, url string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if exec.Command("ip", "netns", "exec", ns, "curl", "-sf", "-o", "/dev/null", "--max-time", "1", url).Run() == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not answer from %s within %v", url, ns, limit)
}

// promQueryNS is promQuery through curl inside ns (Prometheus listens in
// the driver's namespace, which the test process is not in).
func promQueryNS(t *testing.T, ns, base, q string) []promSeries {
	t.Helper()
	body := inNS(t, ns, "curl", "-sf", "--max-time", "5", "--data-urlencode", "query="+q, base+"/api/v1/query")
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		t.Fatalf("prometheus query %q: %v %s", q, err, body)
	}
	var out []promSeries
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out = append(out, promSeries{s.Metric, v})
	}
	return out
}

// collectorConfig is Jaeger v2 run as a plain OpenTelemetry Collector on
// the server's host: OTLP in on loopback, OTLP/HTTP out to asrprof's
// receiver on the driver's host.
const collectorConfig = `service:
  extensions: [healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlphttp]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:13133
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch:
    timeout: 200ms
exporters:
  otlphttp:
    endpoint: http://%s:4318
`

// TestScaleTwoHosts is docs/SCALE.md's layout on two network namespaces
// made by the test, each a host. On the server's host (a): the reference
// server, an OpenTelemetry Collector (Jaeger v2) that takes its spans,
// and `asrprof serve` as the agent. On the driver's host (b): `asrprof
// capture --agent`, whose OTLP receiver the collector forwards to, and a
// Prometheus server that scrapes the agent. The capture's bundle must
// hold the agent's probe data (sched.jsonl of the server's threads, per
// pass), the server's spans joined to the requests, and the measured
// clock offset with its uncertainty; Prometheus must have the agent's
// live series.
//
// It checks where the data went, not how fast anything ran, and its time
// is its servers starting: it runs beside the package's other idle tests
// (t.Parallel), in namespaces, ports and folders of its own. Its reference
// server loads two decoders, for the capture's two levels, not the
// default eight: beside the parallel tests' server starts eight (11 s of
// CPU here) once missed the 90 s health limit under a load average of 9.
func TestScaleTwoHosts(t *testing.T) {
	refservertest.RequirePocketSphinx(t)
	t.Parallel()
	jaeger := jaegerBin(t)
	nsA, nsB, ipA, ipB := twoHosts(t)
	const token = "two-hosts-token"
	tmp := t.TempDir()

	// Host a: collector, reference server, agent.
	ccfg := filepath.Join(tmp, "collector.yaml")
	os.WriteFile(ccfg, []byte(fmt.Sprintf(collectorConfig, ipB)), 0o644)
	startProc(t, "collector (jaeger)", nsA, nil, jaeger, "--config="+ccfg)
	waitHTTP(t, nsA, "http://127.0.0.1:13133/status", 30*time.Second)
	ref := startProc(t, "refserver", nsA, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces"},
		refservertest.Python, filepath.Join(refservertest.Root(), "refserver", "refserver.py"), "--host", ipA, "--port", "8000",
		"--max-running-requests", "2")
	target := ref.waitOutput(t, regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`), 60*time.Second)
	waitHTTP(t, nsA, target+"/health", 90*time.Second)
	_, agent := startServe(t, nsA, "--listen", ipA+":7070", "--token", token, "--dir", filepath.Join(tmp, "agent"))

	// Host b: Prometheus scraping the agent; then the capture.
	prom := startPrometheus(t, nsB, ipB+":9090", token, agent)
	waitHTTP(t, nsB, prom+"/-/ready", 30*time.Second)
	out := filepath.Join(tmp, "bundle")
	ds := dataset(t, 3)
	cap := exec.Command("ip", "netns", "exec", nsB, os.Args[0], "capture", "--agent", agent, "--agent-token", token,
		"--target", target, "--dataset", ds, "--concurrency", "1,2", "--repeats", "1", "--probes", "sched",
		"--otlp-http", ipB+":4318", "--otlp-allow-remote", "--otlp-grpc", "off", "--span-grace", "3s", "--out", out, "--quiet")
	cap.Env = append(os.Environ(), "ASRPROF_TEST_MAIN=1")
	capOut, err := cap.CombinedOutput()
	if err != nil {
		t.Fatalf("asrprof capture --agent: %v\n%s", err, capOut)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest
	agentName := "agent " + strings.TrimPrefix(agent, "http://")
	if st, _ := m.Extra["probes"].(map[string]any); st[agentName] != "on" {
		t.Fatalf("the agent probe: %v\n%s", m.Extra["probes"], capOut)
	}
	if !m.Complete {
		t.Errorf("incomplete: %v\n%s", m.Incomplete, capOut)
	}

	// The clock offset, measured at start and end, same kernel clock here:
	// zero within its uncertainty, which is half a veth round trip.
	if len(m.Clock.Agents) != 2 {
		t.Fatalf("clock.agents: %+v", m.Clock.Agents)
	}
	for _, c := range m.Clock.Agents {
		t.Logf("clock at %s: agent minus driver %+d ns ± %d ns (min RTT %d ns, %d samples)", c.When, c.OffsetNs, c.UncertaintyNs, c.MinRTTNs, c.Samples)
		abs := max(c.OffsetNs, -c.OffsetNs)
		if c.Samples != 8 || c.UncertaintyNs <= 0 || c.UncertaintyNs > 50e6 || abs > c.UncertaintyNs+1e6 || c.Agent != agent {
			t.Errorf("clock %s: offset %d ns ± %d ns over %d samples (agent %s)", c.When, c.OffsetNs, c.UncertaintyNs, c.Samples, c.Agent)
		}
	}

	// The agent's probe data, at the bundle's root, per pass of the driver.
	passes, threads := map[string]bool{}, map[string]bool{}
	serverCPU := 0.0
	if _, err := bundle.ReadJSONL(b.Path(bundle.SchedFile), func(r bundle.SchedRecord) error {
		passes[r.Level] = true
		threads[r.Name] = true
		if r.PID == ref.cmd.Process.Pid || isChild(r.PID, ref.cmd.Process.Pid) {
			serverCPU += r.CPUSec
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("sched.jsonl from the agent: passes %v, the server's threads %.3f s CPU", passes, serverCPU)
	if !threads["asr-sched"] || !threads["asr-otlp"] {
		t.Errorf("sched.jsonl lacks the reference server's threads (the agent found the server by its listener?): %v", threads)
	}
	if !passes["c1"] || !passes["c2"] || serverCPU <= 0 {
		t.Errorf("sched.jsonl from the agent: passes %v, the server's CPU %.3f s", passes, serverCPU)
	}
	if _, err := os.Stat(filepath.Join(out, "agents", strings.ReplaceAll(strings.TrimPrefix(agent, "http://"), ":", "_"), "manifest.json")); err != nil {
		t.Errorf("the agent's own manifest did not come back: %v", err)
	}

	// The server's spans came through the collector and joined.
	js, _ := m.Extra["join"].(map[string]any)
	if n, _ := js["with_spans"].(float64); n != 6 {
		t.Errorf("requests joined to server spans through the collector: %v (want 6)\n%s", js, capOut)
	}

	// Prometheus on the driver's host scraped the agent live.
	agents, _ := m.Extra["agents"].([]any)
	if len(agents) != 1 {
		t.Fatalf("extra.agents: %v", m.Extra["agents"])
	}
	id, _ := agents[0].(map[string]any)["capture"].(string)
	var got []promSeries
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got = promQueryNS(t, nsB, prom, fmt.Sprintf(`sum(asrprof_thread_cpu_seconds_total{capture=%q})`, id))
		if len(got) == 1 && got[0].Value > 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("prometheus: sum(asrprof_thread_cpu_seconds_total{capture=%q}) = %v; join %v", id, got, js)
	if len(got) != 1 || got[0].Value <= 0 {
		t.Errorf("prometheus: the agent's thread CPU series for %s: %v", id, got)
	}
	if p := promQueryNS(t, nsB, prom, fmt.Sprintf(`asrprof_thread_cpu_seconds_total{capture=%q,thread="asr-sched"}`, id)); len(p) != 1 {
		t.Errorf("prometheus: the server's scheduler thread: %v", p)
	}
	if p := promQueryNS(t, nsB, prom, fmt.Sprintf(`asrprof_capture_periods_total{capture=%q}`, id)); len(p) != 1 || p[0].Value != 2 {
		t.Errorf("prometheus: the agent's periods: %v (want 2, one per pass)", p)
	}
}

// isChild tells whether pid's parent is ppid.
func isChild(pid, ppid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 1 && f[1] == strconv.Itoa(ppid)
}

// jaegerBin is the Jaeger v2 binary tools/jaeger.sh builds (make test
// runs it); without it the test fails in CI and skips elsewhere.
func jaegerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ASRPROF_JAEGER"); p != "" {
		return p
	}
	dir, _ := os.UserCacheDir()
	p := filepath.Join(dir, "asrprof", "jaeger-v1.76.0")
	if _, err := os.Stat(p); err != nil {
		need.DepVia(t, "jaeger binary", "tools/jaeger.sh (make test runs it)", err)
	}
	return p
}
