package refserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// The tests of plainserver.py, the reference server that emits nothing
// (no OTel, no events): each starts it with one performance cause and
// checks that clients see that cause. They need only Debian's
// /usr/bin/python3 (the standard library) and run in a few seconds; they
// run one after another, since they measure timing.

// plainServer is a running plainserver.py.
type plainServer struct {
	url    string
	cmd    *exec.Cmd
	stderr *plainLog
	done   chan struct{} // closed when the process has been waited for
	err    error         // cmd.Wait's, once done is closed
}

type plainLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *plainLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *plainLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// plainScript returns plainserver.py's path, and skips the test (fails
// it under CI) where Debian's python3 is missing.
func plainScript(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(refservertest.Python); err != nil {
		need.Dep(t, "python3 (Debian's "+refservertest.Python+")", err)
	}
	return filepath.Join(refservertest.Root(), "refserver", "plainserver.py")
}

// plainListening is the line plainserver.py prints once it listens.
var plainListening = regexp.MustCompile(`^plainserver: listening on (http://[0-9.]+:[0-9]+)$`)

// startPlain runs plainserver.py on a free loopback port with args, in its
// own process group, waits for its listening line, and stops it (SIGTERM,
// then SIGKILL to the group) at cleanup.
func startPlain(t *testing.T, args ...string) *plainServer {
	t.Helper()
	script := plainScript(t)
	cmd := exec.Command(refservertest.Python, append([]string{script, "--port", "0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &plainServer{cmd: cmd, stderr: &plainLog{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting plainserver: %v", err)
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := plainListening.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		s.err = cmd.Wait() // after the last read of stdout, as StdoutPipe wants
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			t.Logf("plainserver %v stderr:\n%s", args, s.stderr)
		}
	})
	select {
	case s.url = <-urlc:
		return s
	case <-s.done:
		t.Fatalf("plainserver %v exited (%v) before listening; stderr:\n%s", args, s.err, s.stderr)
	case <-time.After(10 * time.Second):
		t.Fatalf("plainserver %v did not report its address; stderr:\n%s", args, s.stderr)
	}
	return nil
}

// plainWAV is a silent 16 kHz mono 16-bit WAV of the given length.
func plainWAV(seconds float64) []byte {
	return audiotest.WAV16(16000, 1, make([]int16, int(seconds*16000))...)
}

// plainTiming is one transcription as the client saw it.
type plainTiming struct {
	start, firstByte, end time.Time
}

// plainTranscribe posts wav to s and checks the answer; it returns when
// the request was sent, when its first response byte came and when the
// body ended.
func plainTranscribe(t *testing.T, s *plainServer, wav []byte) plainTiming {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	fw, err := w.CreateFormFile("file", "audio.wav")
	if err != nil {
		t.Error(err)
		return plainTiming{}
	}
	fw.Write(wav)
	w.WriteField("model", "plain-asr")
	w.WriteField("language", "en")
	w.Close()
	var tm plainTiming
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotFirstResponseByte: func() { tm.firstByte = time.Now() },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/audio/transcriptions", &b)
	if err != nil {
		t.Error(err)
		return tm
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	tm.start = time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("transcribe: %v", err)
		return tm
	}
	body, err := io.ReadAll(resp.Body)
	tm.end = time.Now()
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"text"`) {
		t.Errorf("transcribe: %s %q %v", resp.Status, body, err)
	}
	return tm
}

// plainConcurrent sends n requests at once and returns their timings.
func plainConcurrent(t *testing.T, s *plainServer, n int, wav []byte) []plainTiming {
	t.Helper()
	out := make([]plainTiming, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = plainTranscribe(t, s, wav) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func plainEnds(ts []plainTiming) []time.Time {
	var ends []time.Time
	for _, tm := range ts {
		ends = append(ends, tm.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	return ends
}

func plainMS(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func plainGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// plainMetrics parses a Prometheus text exposition into sample -> value,
// the sample keyed as written (name{labels}).
func plainMetrics(t *testing.T, text string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("bad exposition line %q", line)
		}
		m[line[:i]] = v
	}
	return m
}

// Serial mode: four requests at once are served one after another, so
// their answers end about --service-ms apart; the vLLM metrics count them
// and their queue times add up to 0+1+2+3 services.
func TestPlainServerSerial(t *testing.T) {
	s := startPlain(t, "--work", "sleep", "--service-ms", "100", "--vllm-metrics")
	ts := plainConcurrent(t, s, 4, plainWAV(0.5))
	ends := plainEnds(ts)
	for i := 1; i < len(ends); i++ {
		if gap := ends[i].Sub(ends[i-1]); gap < 70*time.Millisecond || gap > 200*time.Millisecond {
			t.Errorf("answer %d ended %s after answer %d, want about 100 ms", i, plainMS(gap), i-1)
		}
	}
	for _, tm := range ts {
		if d := tm.end.Sub(tm.firstByte); d > 50*time.Millisecond {
			t.Errorf("first byte to end %s without --response-delay-ms", plainMS(d))
		}
	}

	code, text := plainGet(t, s.url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, text)
	}
	m := plainMetrics(t, text)
	const lab = `model_name="plain-asr",engine="0"`
	sum := func(h string) float64 { return m["vllm:"+h+"_sum{"+lab+"}"] }
	for _, h := range []string{"e2e_request_latency_seconds", "request_queue_time_seconds",
		"request_inference_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"} {
		name := "vllm:" + h
		if !strings.Contains(text, "# TYPE "+name+" histogram\n") {
			t.Errorf("no # TYPE line for histogram %s", name)
		}
		if c, ok := m[name+"_count{"+lab+"}"]; !ok || c != 4 {
			t.Errorf("%s_count = %v (present %v), want 4", name, c, ok)
		}
		prev := 0.0
		for _, le := range []string{"0.3", "0.5", "0.8", "1.0", "2.5", "60.0", "7680.0", "+Inf"} {
			v, ok := m[name+"_bucket{"+lab+`,le="`+le+`"}`]
			if !ok || v < prev {
				t.Errorf("%s bucket le=%s = %v (present %v), after %v: not cumulative", name, le, v, ok, prev)
			}
			prev = v
		}
		if prev != 4 {
			t.Errorf("%s bucket le=+Inf = %v, want 4", name, prev)
		}
	}
	if v := m["vllm:request_success_total{"+lab+`,finished_reason="stop"}`]; v != 4 {
		t.Errorf("vllm:request_success_total stop = %v, want 4", v)
	}
	for _, g := range []string{"num_requests_running", "num_requests_waiting"} {
		if v, ok := m["vllm:"+g+"{"+lab+"}"]; !ok || v != 0 {
			t.Errorf("vllm:%s = %v (present %v), want 0 when idle", g, v, ok)
		}
	}
	if q := sum("request_queue_time_seconds"); q < 0.45 || q > 0.9 {
		t.Errorf("queue time sum %.3f s, want about 0.6 (0+0.1+0.2+0.3)", q)
	}
	inf := sum("request_inference_time_seconds")
	if inf < 0.39 || inf > 0.6 {
		t.Errorf("inference time sum %.3f s, want about 0.4", inf)
	}
	if p, d := sum("request_prefill_time_seconds"), sum("request_decode_time_seconds"); plainAbs(p-0.2*inf) > 1e-6 || plainAbs(d-0.8*inf) > 1e-6 {
		t.Errorf("prefill %.4f + decode %.4f: want 20 %% / 80 %% of inference %.4f", p, d, inf)
	}
	if e, want := sum("e2e_request_latency_seconds"), sum("request_queue_time_seconds")+inf; plainAbs(e-want) > 1e-3 {
		t.Errorf("e2e sum %.4f, want queue + inference %.4f", e, want)
	}
}

func plainAbs(x float64) float64 { return max(x, -x) }

// Batch mode: four requests at once are served by one generate and
// answered together; without --vllm-metrics /metrics is 404.
func TestPlainServerBatch(t *testing.T) {
	s := startPlain(t, "--work", "sleep", "--mode", "batch", "--max-batch", "4",
		"--batch-wait-ms", "500", "--service-ms", "100", "--per-audio-ms", "100")
	ts := plainConcurrent(t, s, 4, plainWAV(0.5))
	ends := plainEnds(ts)
	if spread := ends[3].Sub(ends[0]); spread > 10*time.Millisecond {
		t.Errorf("batch answers ended %s apart, want within 10 ms", plainMS(spread))
	}
	for _, tm := range ts {
		// 100 ms + 100 ms/s x 0.5 s; well under the 500 ms batch wait, as
		// the fourth request fills the batch.
		if d := tm.end.Sub(tm.start); d < 140*time.Millisecond || d > 450*time.Millisecond {
			t.Errorf("batched request took %s, want about 150 ms", plainMS(d))
		}
	}
	if code, _ := plainGet(t, s.url+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without --vllm-metrics: %d, want 404", code)
	}
	if code, body := plainGet(t, s.url+"/v1/models"); code != 200 || !strings.Contains(body, `"id": "plain-asr"`) {
		t.Errorf("/v1/models: %d %s", code, body)
	}
}

// --response-delay-ms: the first byte comes after generate, the end that
// much later.
func TestPlainServerResponseDelay(t *testing.T) {
	s := startPlain(t, "--work", "sleep", "--service-ms", "50", "--response-delay-ms", "300")
	tm := plainTranscribe(t, s, plainWAV(0.2))
	if d := tm.end.Sub(tm.firstByte); d < 290*time.Millisecond || d > 450*time.Millisecond {
		t.Errorf("first byte to end %s, want about 300 ms", plainMS(d))
	}
	if d := tm.firstByte.Sub(tm.start); d < 45*time.Millisecond || d > 200*time.Millisecond {
		t.Errorf("request to first byte %s, want about 50 ms", plainMS(d))
	}
}

// --upload-kbps: a 64 kB upload at 160 kB/s takes about 0.4 s to be read.
func TestPlainServerUpload(t *testing.T) {
	s := startPlain(t, "--work", "sleep", "--service-ms", "10", "--upload-kbps", "160")
	tm := plainTranscribe(t, s, plainWAV(2)) // 64 044 bytes
	if d := tm.firstByte.Sub(tm.start); d < 330*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("request to first byte %s, want about 400 ms", plainMS(d))
	}
}

// --contend: a busy child pinned with the server to CPU 0, where it takes
// half the CPU, so 100 ms of host work takes about 200 ms; threads are
// named in /proc; SIGTERM stops the server cleanly and its child with it.
func TestPlainServerContend(t *testing.T) {
	s := startPlain(t, "--work", "host", "--service-ms", "100", "--contend", "1")
	pid := s.cmd.Process.Pid
	// Its keep-alive connection holds an http thread.
	if tm := plainTranscribe(t, s, plainWAV(0.1)); tm.end.Sub(tm.start) < 160*time.Millisecond {
		t.Errorf("100 ms of host work beside a contender took %s, want about 200 ms", plainMS(tm.end.Sub(tm.start)))
	}
	cpus := func(p int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)`).FindSubmatch(b)
		if m == nil {
			return ""
		}
		return string(m[1])
	}
	if c := cpus(pid); c != "0" {
		t.Errorf("server's CPUs %q, want 0", c)
	}
	comms := map[string]int{}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		comms[strings.TrimSpace(string(b))]++
	}
	if comms["http"] < 1 || comms["generate"] != 1 {
		t.Errorf("server thread names %v, want http and one generate", comms)
	}
	var kids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, _ := os.ReadFile(f)
		// pid (comm) state ppid ...
		if i := bytes.LastIndexByte(b, ')'); i > 0 && bytes.Contains(b[:i], []byte("(contend")) {
			if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				p, _ := strconv.Atoi(strings.Fields(string(b))[0])
				kids = append(kids, p)
			}
		}
	}
	if len(kids) != 1 {
		t.Fatalf("contend children of %d: %v, want 1", pid, kids)
	}
	if c := cpus(kids[0]); c != "0" {
		t.Errorf("contender's CPUs %q, want 0", c)
	}
	// SIGTERM to the server alone, not its group: it must stop its child.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("server still running 5 s after SIGTERM")
	}
	if s.err != nil {
		t.Errorf("server exit after SIGTERM: %v, want status 0", s.err)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", kids[0])); err == nil && !strings.Contains(string(b), ") Z ") {
		t.Errorf("contender %d outlived the server: %s", kids[0], b)
	}
}

// --spin: the idle server's generate thread is on a CPU most of the time
// (it polls its queue), and still serves: a request is answered.
func TestPlainServerSpin(t *testing.T) {
	s := startPlain(t, "--work", "sleep", "--service-ms", "20", "--spin")
	plainTranscribe(t, s, plainWAV(0.1))
	pid := s.cmd.Process.Pid
	ticks := func() (n uint64) { // the generate thread's utime + stime
		for _, tid := range proctree.Threads(pid) {
			if proctree.Comm(pid, tid) != "generate" {
				continue
			}
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
			if st, err := proctree.ParseStat(string(b)); err == nil {
				n += st.Utime + st.Stime
			}
		}
		return n
	}
	before := ticks()
	time.Sleep(time.Second)
	if d := int64(ticks()) - int64(before); d < 30 { // clock ticks, 100 a second
		t.Errorf("an idle spinning generate thread used %d ticks in 1 s, want most of 100", d)
	}
}

// Bad flag values are argparse errors: exit status 2.
func TestPlainServerBadArgs(t *testing.T) {
	script := plainScript(t)
	for _, args := range [][]string{
		{"--cap", "0", "--mode", "cap"}, {"--mode", "bogus"}, {"--service-ms", "-1"},
		{"--upload-kbps", "nan"}, {"--cpu", "100000"}, {"--port", "70000"}, {"--cap", "2"},
	} {
		out, err := exec.Command(refservertest.Python, append([]string{script}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "error:") {
			t.Errorf("plainserver %v: %v %s, want an argparse error (exit 2)", args, err, out)
		}
	}
}
