package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/asrprof/asrprof/internal/bundletest"
	"github.com/asrprof/asrprof/internal/need"
	"image/png"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asrprof/asrprof/report"
)

// chromium returns Debian's chromium (tools/deps.sh installs it). Without
// it the test fails in CI and skips elsewhere, saying how to get it.
func chromium(t *testing.T) string {
	t.Helper()
	return need.Binary(t, "chromium")
}

// refusingProxy accepts connections on loopback, counts them and closes
// them: every request Chromium makes through it is counted and fails.
func refusingProxy(t *testing.T) (addr string, n *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), n
}

type browse struct {
	png     []byte
	dom     string
	netlog  []byte
	proxied int64
}

// open loads page in headless Chromium twice, through a proxy that
// refuses everything and with a net log: once for a screenshot, once
// for the DOM after its scripts ran.
func open(t *testing.T, page string, height int) browse {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	proxy, n := refusingProxy(t)
	shot, netlog := filepath.Join(dir, "shot.png"), filepath.Join(dir, "net.json")
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
		"--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-extensions", "--disable-features=NetworkTimeServiceQuerying", "--disable-default-apps", "--disable-dev-shm-usage",
		"--proxy-server=http://" + proxy, "--proxy-bypass-list=<-loopback>",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		fmt.Sprintf("--window-size=1200,%d", height)}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append(append(append([]string{}, common...), extra...), "file://"+page)
		cmd := exec.CommandContext(ctx, bin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, errb.String())
		}
		return out.Bytes()
	}
	run("--screenshot="+shot, "--log-net-log="+netlog)
	dom := run("--dump-dom", "--virtual-time-budget=3000")
	b := browse{dom: string(dom), proxied: n.Load()}
	var err error
	if b.png, err = os.ReadFile(shot); err != nil {
		t.Fatal(err)
	}
	if b.netlog, err = os.ReadFile(netlog); err != nil {
		t.Fatal(err)
	}
	return b
}

// pageRequests returns the URLs the page asked for, from a Chromium net
// log: the requests whose initiator is a document (the browser's own
// background requests, its component updater, say "not an origin") or
// whose network isolation key is the page's file:// site, other than the
// page's own file:// URL.
func pageRequests(t *testing.T, netlog []byte) []string {
	t.Helper()
	var nl struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int            `json:"type"`
			Params map[string]any `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(netlog, &nl); err != nil {
		t.Fatalf("net log: %v", err)
	}
	start, ok := nl.Constants.LogEventTypes["URL_REQUEST_START_JOB"]
	if !ok {
		t.Fatal("net log without URL_REQUEST_START_JOB events")
	}
	var out []string
	seen := 0
	for _, e := range nl.Events {
		if e.Type != start {
			continue
		}
		url, _ := e.Params["url"].(string)
		if url == "" { // the event's end (its result)
			continue
		}
		seen++
		ini, _ := e.Params["initiator"].(string)
		nik, _ := e.Params["network_isolation_key"].(string)
		if strings.HasPrefix(url, "file://") || strings.HasPrefix(url, "data:") {
			continue
		}
		if ini != "not an origin" || strings.Contains(nik, "file://") {
			out = append(out, url)
		}
	}
	t.Logf("net log: %d requests started, %d by the page", seen, len(out))
	return out
}

// The report of a real H200 capture, in a real browser: it draws (the
// screenshot is not blank), its script runs (the timeline says what it
// shows), and it asks the network for nothing: the net log holds no
// request of the page's. Everything goes to a proxy that refuses it, so
// nothing leaves the machine either way; Chromium's own background
// requests (its component updater, which no flag of Debian's build turns
// off) reach that proxy too, and are told apart by their initiator. A
// page that does fetch something is caught by the same check.
func TestReportInChromium(t *testing.T) {
	chromium(t)
	dir := bundletest.H200(t, "gpu-bound")
	path, err := report.WriteFile(context.Background(), dir, "", fixed)
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, path, 2400)
	if reqs := pageRequests(t, b.netlog); len(reqs) > 0 {
		t.Errorf("the report made network requests: %q", reqs)
	}
	t.Logf("connections to the refusing proxy (Chromium's own included): %d", b.proxied)
	checkNotBlank(t, b.png)
	if !strings.Contains(b.dom, "showing 0–") {
		t.Errorf("the page's script did not run: no 'showing 0–…' in the timeline's range")
	}
	// The script's waterfall and zoom, through the page's links.
	wf := open(t, path+"#req=3", 1200)
	if !strings.Contains(wf.dom, "Waterfall of request 3") || !strings.Contains(wf.dom, ">client latency</text>") || !strings.Contains(wf.dom, ">decode tail</text>") {
		t.Errorf("#req=3 drew no waterfall with the client and the server stages")
	}
	// Its latency bar split into the request's states (the attribution).
	if n := strings.Count(wf.dom, `class="state"`) - strings.Count(b.dom, `class="state"`); n < 2 {
		t.Errorf("#req=3's waterfall splits its latency into %d states, want its attribution's", n)
	}
	if z := open(t, path+"#t=10-20", 1200); !strings.Contains(z.dom, "showing 10–20 s of") || !strings.Contains(z.dom, `viewBox="10 0 10 100"`) {
		t.Errorf("#t=10-20 did not zoom the timeline to 10–20 s")
	}
	if os.Getenv("REPORT_SCREENSHOT") != "" { // docs/report.png: tools/report-shot.sh
		os.WriteFile(os.Getenv("REPORT_SCREENSHOT"), b.png, 0o644)
	}

	// The control: a page that loads one image from the network.
	ctl := filepath.Join(t.TempDir(), "fetches.html")
	os.WriteFile(ctl, []byte(`<!DOCTYPE html><html><body><p>x</p><img src="http://asrprof-test.invalid/x.png"></body></html>`), 0o644)
	c := open(t, ctl, 400)
	if reqs := pageRequests(t, c.netlog); len(reqs) != 1 || reqs[0] != "http://asrprof-test.invalid/x.png" {
		t.Errorf("a page that fetches one image: the net log check found %q", reqs)
	}
}

// checkNotBlank decodes a PNG and wants its pixels to vary: a blank or
// single-colour page fails.
func checkNotBlank(t *testing.T, b []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	r := img.Bounds()
	var sum, sq float64
	n, dark := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			l := (0.299*float64(cr) + 0.587*float64(cg) + 0.114*float64(cb)) / 257
			sum += l
			sq += l * l
			n++
			if l < 160 {
				dark++
			}
		}
	}
	mean := sum / float64(n)
	sd := math.Sqrt(sq/float64(n) - mean*mean)
	t.Logf("screenshot %dx%d: luminance mean %.1f, sd %.1f, %.1f %% dark pixels", r.Dx(), r.Dy(), mean, sd, 100*float64(dark)/float64(n))
	if sd < 20 || float64(dark)/float64(n) < 0.02 {
		t.Errorf("screenshot looks blank: luminance sd %.1f, %.2f %% dark pixels", sd, 100*float64(dark)/float64(n))
	}
}
