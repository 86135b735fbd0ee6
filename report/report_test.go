package report_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"github.com/asrprof/asrprof/internal/bundletest"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/report"
)

var fixed = report.Options{Now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

func render(t *testing.T, dir string) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.Write(context.Background(), &b, dir, fixed); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// externalRefs lists what in doc could make a browser fetch something:
// src/href/action attributes that are not in-page anchors, CSS url() and
// @import, and elements that load (link, img, iframe, object, embed).
func externalRefs(doc string) []string {
	var out []string
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\s(src|href|xlink:href|action|srcset|poster|data)\s*=\s*"([^"#][^"]*)"`),
		regexp.MustCompile(`(?i)url\(`),
		regexp.MustCompile(`(?i)@import`),
		regexp.MustCompile(`(?i)<(link|img|iframe|object|embed|audio|video|source|base)\b`),
		regexp.MustCompile(`(?i)\b(fetch|XMLHttpRequest|WebSocket|EventSource|importScripts|sendBeacon)\s*\(`),
	} {
		out = append(out, re.FindAllString(doc, -1)...)
	}
	// Any URL other than the SVG namespace must be page text (escaped,
	// inside an element), never an attribute value.
	for _, m := range regexp.MustCompile(`="[a-z]+://[^"]*"`).FindAllString(doc, -1) {
		if m != `="http://www.w3.org/2000/svg"` {
			out = append(out, m)
		}
	}
	return out
}

// svgsWellFormed parses every <svg>…</svg> of doc as XML.
func svgsWellFormed(t *testing.T, doc string) int {
	t.Helper()
	n := 0
	for rest := doc; ; {
		i := strings.Index(rest, "<svg ")
		if i < 0 {
			return n
		}
		// Nested svgs (the timeline's panels) close before their parent.
		depth, j := 0, i
		for {
			o := strings.Index(rest[j+1:], "<svg ")
			c := strings.Index(rest[j+1:], "</svg>")
			if c < 0 {
				t.Fatal("unclosed <svg>")
			}
			if o >= 0 && o < c {
				depth++
				j += 1 + o
				continue
			}
			j += 1 + c
			if depth == 0 {
				break
			}
			depth--
		}
		frag := rest[i : j+len("</svg>")]
		d := xml.NewDecoder(strings.NewReader(frag))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("svg %d is not well-formed XML: %v\n%.300s", n, err, frag)
			}
		}
		n++
		rest = rest[j+len("</svg>"):]
	}
}

func TestReportH200(t *testing.T) {
	dir := bundletest.H200(t, "gpu-bound")
	doc := render(t, dir)
	if len(doc) > 3<<20 {
		t.Errorf("report is %d bytes, want < 3 MB", len(doc))
	}
	for _, id := range []string{
		`id="verdict"`, `id="plot-sweep-rps"`, `id="plot-sweep-rtfx"`, `id="plot-sweep-latency"`,
		`id="plot-stages"`, `id="plot-cdf"`, `id="plot-timeline"`, `id="plot-waterfall"`,
		`id="plot-cpu-c16"`, `id="plot-cpu-c64"`, `id="plot-cpu-c128"`,
		`id="plot-flame-c16"`, `id="plot-flame-c64"`, `id="plot-flame-c128"`,
		`id="gpu"`, `id="provenance"`,
		// the timeline's panels, each from its own file
		`requests in flight (client)`, `GPU utilization and SM activity`, `GPU power`,
		`CPU of thread asr-sched (busiest), per pass`, `CUDA launches per second, per pass`,
		// tables under the plots
		`data-table="sweep"`, `data-table="stages"`, `data-table="cpu_python"`, `data-table="gpu"`, `data-table="probes"`,
	} {
		if !strings.Contains(doc, id) {
			t.Errorf("report lacks %s", id)
		}
	}
	// The numbers are the analyses': the verdicts of the bottleneck table,
	// the knee of the knee table, the GPU of gpu.jsonl.
	for _, want := range []string{"c=64: no single cause", "c=16: running batch (no thread data)", "c=128: admission cap", ">knee</text>",
		"NVIDIA H200", "whisper-large-v3", "019417d9836af3a5", "Runner.decode (whisper_model.py)"} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if refs := externalRefs(doc); len(refs) > 0 {
		t.Errorf("report refers outside itself: %q", refs)
	}
	if n := svgsWellFormed(t, doc); n < 15 {
		t.Errorf("%d svg plots, want ≥ 15", n)
	}
	// The timeline's data: every series, and the requests with their stages.
	var tl struct {
		Span   float64 `json:"span"`
		Panels []struct {
			Title  string `json:"title"`
			Series []struct {
				Segs [][][2]float64 `json:"segs"`
			} `json:"series"`
		} `json:"panels"`
		Reqs []struct {
			S [][]any `json:"s"`
		} `json:"reqs"`
		Total int `json:"total"`
	}
	i := strings.Index(doc, `<script type="application/json" id="tl-json">`)
	j := strings.Index(doc[i:], "</script>")
	if err := json.Unmarshal([]byte(doc[i+len(`<script type="application/json" id="tl-json">`):i+j]), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Total != 1728 || len(tl.Reqs) == 0 || len(tl.Reqs) > report.MaxRequests || len(tl.Panels) != 5 {
		t.Errorf("timeline: %d of %d requests, %d panels", len(tl.Reqs), tl.Total, len(tl.Panels))
	}
	withStages := 0
	for _, r := range tl.Reqs {
		if len(r.S) >= 5 {
			withStages++
		}
	}
	if withStages < len(tl.Reqs)*9/10 {
		t.Errorf("%d of %d requests have their stages", withStages, len(tl.Reqs))
	}
	for _, p := range tl.Panels {
		n := 0
		for _, s := range p.Series {
			for _, seg := range s.Segs {
				n += len(seg)
				if len(seg) > 2*report.TimelineBins {
					t.Errorf("%s: %d points in a series, want ≤ %d", p.Title, len(seg), 2*report.TimelineBins)
				}
			}
		}
		if n == 0 {
			t.Errorf("panel %s has no points", p.Title)
		}
	}
	if !strings.Contains(doc, "requests sampled: ") {
		t.Error("the report does not say it sampled the requests")
	}
}

// A simulated capture of 10,000 requests stays under 3 MB.
func TestReportSize10k(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	cfg := fixture.Golden()["refserver"]
	cfg.RequestsPerPass = 834 // 4 levels × 3 repeats
	cfg.Warmup = false
	if _, err := fixture.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	doc := render(t, dir)
	if len(doc) > 3<<20 {
		t.Errorf("10k-request report is %d bytes, want < 3 MB", len(doc))
	}
	if !strings.Contains(doc, "of 10008 drawn") {
		t.Errorf("the timeline does not say how many of the 10,008 requests it drew")
	}
	if refs := externalRefs(doc); len(refs) > 0 {
		t.Errorf("report refers outside itself: %q", refs)
	}
	t.Logf("10,008 requests: %d bytes", len(doc))
}

func TestCompareReport(t *testing.T) {
	cur, base := bundletest.H200(t, "gpu-bound"), bundletest.H200(t, "study")
	var b bytes.Buffer
	if err := report.Compare(context.Background(), &b, cur, base, fixed); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, id := range []string{`id="plot-cmp-rps"`, `id="plot-cmp-rtfx"`, `id="plot-cmp-latency"`, `id="plot-cmp-ratio"`, `id="plot-cmp-stages"`,
		`data-table="compare"`, "current gpu-bound", "baseline study", "only in baseline: c=1, c=8, c=32"} {
		if !strings.Contains(doc, id) {
			t.Errorf("comparison lacks %s", id)
		}
	}
	// 2 and 3 repeats a side: no difference can be significant, so every
	// delta the comparison gives is ~, and the ratio plot says so: 2
	// levels in common, 8 metrics besides corpus WER (summary.Metrics).
	ratio := doc[strings.Index(doc, `id="plot-cmp-ratio"`):]
	ratio = ratio[:strings.Index(ratio, "</figure>")]
	if strings.Count(ratio, `class="tick small">~</text>`) != 16 {
		t.Errorf("ratio plot lacks the ~ marks of the compare table:\n%.2000s", ratio)
	}
	if refs := externalRefs(doc); len(refs) > 0 {
		t.Errorf("comparison refers outside itself: %q", refs)
	}
	svgsWellFormed(t, doc)
}

// A realtime capture gets its panels: first update and final after STOP
// per level (realtime analysis), and each session's lag over the capture.
// realtimeBundle writes the refserver fixture made a realtime capture:
// the protocol in the manifest, the per-session fields a realtime client
// records and, with lags, each session's update lags (realtime_lags.jsonl).
func realtimeBundle(t *testing.T, lags bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rt")
	cfg := fixture.Golden()["refserver"]
	if _, err := fixture.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	mb, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	m["config"].(map[string]any)["protocol"] = "funasr-ws"
	mb, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "manifest.json"), mb, 0o644)
	f, _ := os.Open(filepath.Join(dir, "requests.jsonl"))
	var out, series bytes.Buffer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	k := 0
	for sc.Scan() {
		var r map[string]any
		json.Unmarshal(sc.Bytes(), &r)
		k++
		r["first_update_s"] = 0.3 + 0.001*float64(k%7)
		r["final_after_stop_s"] = 0.2
		r["lag_p95_s"] = 0.1 + 0.0005*float64(k)
		r["lag_max_s"] = 0.5
		r["lag_growth_s"] = 0.01
		b, _ := json.Marshal(r)
		out.Write(append(b, '\n'))
		fmt.Fprintf(&series, `{"id":%q,"level":%q,"repeat":%v,"warmup":%v,"at_s":[0.4,1.3],"lag_s":[0.1,0.2]}`+"\n", r["id"], r["level"], r["repeat"], r["warmup"] == true)
	}
	f.Close()
	os.WriteFile(filepath.Join(dir, "requests.jsonl"), out.Bytes(), 0o644)
	if lags {
		os.WriteFile(filepath.Join(dir, "realtime_lags.jsonl"), series.Bytes(), 0o644)
	}
	return dir
}

func TestReportRealtime(t *testing.T) {
	dir := realtimeBundle(t, false)
	doc := render(t, dir)
	for _, id := range []string{`id="realtime"`, `id="plot-rt-first"`, `id="plot-rt-lag"`, `data-table="realtime"`} {
		if !strings.Contains(doc, id) {
			t.Errorf("realtime report lacks %s", id)
		}
	}
	lag := doc[strings.Index(doc, `id="plot-rt-lag"`):]
	if n := strings.Count(lag[:strings.Index(lag, "</figure>")], "<circle"); n != 4*3*24 {
		t.Errorf("lag plot has %d sessions, want %d (scored ones)", n, 4*3*24)
	}
}

func TestWriteFileDefaultPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := fixture.Write(dir, fixture.Golden()["sglang"]); err != nil {
		t.Fatal(err)
	}
	path, err := report.WriteFile(context.Background(), dir, "", fixed)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, report.File) {
		t.Errorf("wrote %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(b, []byte(`id="plot-stages"`)) || bytes.Contains(b, []byte(`id="plot-timeline"`)) == false {
		t.Errorf("%s: %v (stages and timeline expected)", path, err)
	}
	if _, err := report.WriteFile(context.Background(), filepath.Join(dir, "nope"), "", fixed); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a missing bundle: %v, want an error naming it", err)
	}
}

// The check above would see what a browser could fetch.
func TestExternalRefsCatches(t *testing.T) {
	for _, doc := range []string{`<img src="http://x/y.png">`, `<link rel="stylesheet" href="https://cdn/x.css">`,
		`<style>body{background:url(x.png)}</style>`, `<script>fetch("/x")</script>`, `<svg><image href="//host/x.png"/></svg>`,
		`<a title="x" data="ftp://h/f">`} {
		if len(externalRefs(doc)) == 0 {
			t.Errorf("not caught: %s", doc)
		}
	}
	if refs := externalRefs(`<svg xmlns="http://www.w3.org/2000/svg"><a href="#sweep">x</a><p>target http://127.0.0.1:8000</p></svg>`); len(refs) > 0 {
		t.Errorf("in-page anchors and text caught: %q", refs)
	}
}

// A killed capture (no results.json, manifest not finished, a truncated
// last line) still gets its report, which says it is incomplete.
func TestReportKilledCapture(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k")
	if _, err := fixture.Write(dir, fixture.Golden()["refserver"]); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "results.json"))
	var m map[string]any
	mb, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	json.Unmarshal(mb, &m)
	m["complete"], m["finished"] = false, false
	mb, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "manifest.json"), mb, 0o644)
	rb, _ := os.ReadFile(filepath.Join(dir, "requests.jsonl"))
	os.WriteFile(filepath.Join(dir, "requests.jsonl"), rb[:len(rb)*2/3+17], 0o644)
	doc := render(t, dir)
	for _, want := range []string{"INCOMPLETE: the capture did not finish", "INCOMPLETE: these numbers do not cover the whole workload", `id="plot-sweep-rps"`, `id="plot-timeline"`} {
		if !strings.Contains(doc, want) {
			t.Errorf("killed capture's report lacks %q", want)
		}
	}
}
