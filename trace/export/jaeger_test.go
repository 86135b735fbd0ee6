package export

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/trace/clientspan"
	"github.com/asrprof/asrprof/trace/spans"
)

// jaegerVersion is the Jaeger module version tools/jaeger.sh builds.
const jaegerVersion = "v1.76.0"

// jaegerBinary finds the Jaeger binary: $ASRPROF_JAEGER, else the cache
// path tools/jaeger.sh builds into.
func jaegerBinary() (string, error) {
	if p := os.Getenv("ASRPROF_JAEGER"); p != "" {
		_, err := os.Stat(p)
		return p, err
	}
	dir, err := os.UserCacheDir() // $XDG_CACHE_HOME or ~/.cache, as tools/jaeger.sh
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "asrprof", "jaeger-"+jaegerVersion)
	_, err = os.Stat(p)
	return p, err
}

// jaegerConfig runs only what the test needs, every listener on loopback
// at the given ports: the OTLP/HTTP receiver, the query API (HTTP and the
// gRPC port it always opens) and the health check. Internal telemetry
// (metrics on 8888) is off.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: mem
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

type jaeger struct {
	cmd         *exec.Cmd
	otlp, query string // base URLs
	health      string
	done        chan struct{}
	log         *bytes.Buffer
	exitErr     error
}

// startJaeger starts Jaeger on free loopback ports and waits until its
// health check and query API answer; it is stopped (SIGTERM, then waited
// for) when the test ends.
func startJaeger(t *testing.T, bin string) *jaeger {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // Jaeger may fail to start
		p := []int{fakeasr.FreePort(t), fakeasr.FreePort(t), fakeasr.FreePort(t), fakeasr.FreePort(t)}
		cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, p[0], p[1], p[2], p[3])), 0o644); err != nil {
			t.Fatal(err)
		}
		j := &jaeger{
			query:  "http://127.0.0.1:" + strconv.Itoa(p[0]),
			health: "http://127.0.0.1:" + strconv.Itoa(p[2]) + "/status",
			otlp:   "http://127.0.0.1:" + strconv.Itoa(p[3]),
			done:   make(chan struct{}),
			log:    &bytes.Buffer{},
		}
		j.cmd = exec.Command(bin, "--config="+cfg)
		j.cmd.Stdout, j.cmd.Stderr = j.log, j.log
		if err := j.cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		go func() { j.exitErr = j.cmd.Wait(); close(j.done) }()
		if lastErr = j.waitReady(20 * time.Second); lastErr == nil {
			t.Cleanup(func() { j.stop(t) })
			return j
		}
		j.stop(t)
	}
	t.Fatalf("jaeger did not start: %v", lastErr)
	return nil
}

func (j *jaeger) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-j.done:
			return fmt.Errorf("jaeger exited (%v): %s", j.exitErr, j.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if get(j.health) == nil && get(j.query+"/api/services") == nil {
			return nil
		}
	}
	return fmt.Errorf("jaeger not ready after %v", limit)
}

func get(url string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

func (j *jaeger) stop(t *testing.T) {
	select {
	case <-j.done:
		return
	default:
	}
	j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.done:
	case <-time.After(15 * time.Second):
		t.Errorf("jaeger did not stop within 15 s of SIGTERM; killing it")
		j.cmd.Process.Kill()
		<-j.done
	}
}

// jaegerTrace is the part of GET /api/traces/{id} the test reads.
type jaegerTrace struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
			References    []struct {
				RefType string `json:"refType"`
				TraceID string `json:"traceID"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			Tags []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
			Tags        []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"processes"`
	} `json:"data"`
}

func (j *jaeger) trace(id string, want int, limit time.Duration) (*jaegerTrace, error) {
	deadline := time.Now().Add(limit)
	var last string
	for {
		resp, err := http.Get(j.query + "/api/traces/" + id)
		if err == nil {
			var tr jaegerTrace
			err = json.NewDecoder(resp.Body).Decode(&tr)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && len(tr.Data) == 1 && len(tr.Data[0].Spans) >= want {
				return &tr, nil
			}
			last = fmt.Sprintf("HTTP %d, decode error %v", resp.StatusCode, err)
			if len(tr.Data) == 1 {
				last += fmt.Sprintf(", %d spans", len(tr.Data[0].Spans))
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("trace %s: %s", id, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestJaegerRoundTrip exports a capture to a real Jaeger and reads every
// trace back through its query API: all spans arrive, the client span is
// the root, the server's top span and the stage spans hang under it, and
// the capture's attributes are on the resource and the level on the spans.
func TestJaegerRoundTrip(t *testing.T) {
	bin, err := jaegerBinary()
	if err != nil {
		need.DepVia(t, "jaeger binary", "tools/jaeger.sh (make test runs it)", err)
	}
	j := startJaeger(t, bin)
	checkLoopbackOnly(t, j.cmd.Process.Pid)
	dir := filepath.Join(t.TempDir(), "cap-jaeger")
	sb := writeSmallBundle(t, dir, 6)
	st, err := OTLP(context.Background(), openBundle(t, dir), OTLPConfig{
		URL:        j.otlp, // without /v1/traces
		PlanConfig: sb.plan(7),
	})
	if err != nil {
		t.Fatalf("export: %v\n%s", err, j.log.String())
	}
	if want := len(sb.reqs) * sb.perTrace; st.SentSpans != want || st.FailedBatches != 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v, want %d spans sent", st, want)
	}
	for _, r := range sb.reqs {
		tr, err := j.trace(r.TraceID, sb.perTrace, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d := tr.Data[0]
		if len(d.Spans) != sb.perTrace {
			t.Errorf("trace %s: %d spans in Jaeger, want %d", r.TraceID, len(d.Spans), sb.perTrace)
		}
		byID := map[string]string{} // span id → operation
		for _, s := range d.Spans {
			byID[s.SpanID] = s.OperationName
		}
		client := sb.clientID[r.TraceID]
		if byID[client] != clientspan.SpanRequest {
			t.Fatalf("trace %s: client span %s is %q in Jaeger, want %q", r.TraceID, client, byID[client], clientspan.SpanRequest)
		}
		for _, s := range d.Spans {
			parent := ""
			for _, ref := range s.References {
				if ref.RefType == "CHILD_OF" && ref.TraceID == r.TraceID {
					parent = ref.SpanID
				}
			}
			proc := d.Processes[s.ProcessID]
			switch {
			case s.SpanID == client:
				if parent != "" {
					t.Errorf("client span has parent %s, want none (the root)", parent)
				}
			case s.OperationName == srvRoot, proc.ServiceName == StageService,
				s.OperationName == clientspan.SpanUpload, s.OperationName == clientspan.SpanWaitFirstByte:
				if parent != client {
					t.Errorf("%s span %q: parent %s, want the client span %s", proc.ServiceName, s.OperationName, parent, client)
				}
			default: // build, decode: under the server's top span
				if byID[parent] != srvRoot {
					t.Errorf("span %q: parent %s (%q), want the %q span", s.OperationName, parent, byID[parent], srvRoot)
				}
			}
			level := ""
			for _, tag := range s.Tags {
				if tag.Key == clientspan.AttrLevel {
					level = fmt.Sprint(tag.Value)
				}
			}
			if level != r.Level {
				t.Errorf("span %q: %s = %q, want %q", s.OperationName, clientspan.AttrLevel, level, r.Level)
			}
			capture := ""
			for _, tag := range proc.Tags {
				if tag.Key == AttrCapture {
					capture = fmt.Sprint(tag.Value)
				}
			}
			if capture != "cap-jaeger" {
				t.Errorf("process %q of span %q: %s = %q, want cap-jaeger", proc.ServiceName, s.OperationName, AttrCapture, capture)
			}
		}
		services := map[string]bool{}
		for _, p := range d.Processes {
			services[p.ServiceName] = true
		}
		for _, s := range []string{spans.ClientService, "asrprof-refserver", StageService} {
			if !services[s] {
				t.Errorf("trace %s: no process of service %q in %v", r.TraceID, s, services)
			}
		}
	}
}

// checkLoopbackOnly fails the test if process pid has a listening TCP
// socket or a UDP socket bound to anything but a loopback address. It reads
// the socket inodes from /proc/PID/fd and their addresses from
// /proc/net/{tcp,tcp6,udp,udp6}.
func checkLoopbackOnly(t *testing.T, pid int) {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Logf("cannot list the sockets of pid %d (%v): loopback check skipped", pid, err)
		return
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	listening := 0
	for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			// TCP: only listeners (state 0A); UDP: every bound socket.
			if strings.HasPrefix(f, "tcp") && fields[3] != "0A" {
				continue
			}
			listening++
			addr := fields[1][:strings.IndexByte(fields[1], ':')]
			if addr != "0100007F" && addr != "00000000000000000000000001000000" {
				t.Errorf("jaeger listens on %s %s, not loopback", f, fields[1])
			}
		}
	}
	if listening == 0 {
		t.Errorf("found no listening socket of jaeger (pid %d) in /proc: the check is broken", pid)
	}
	t.Logf("jaeger: %d listening sockets, all on loopback", listening)
}
