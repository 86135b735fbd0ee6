package capture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/proxy"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/guard"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/probe"
)

// ErrCommandFailed means the benchmark command of a proxy capture (`--
// CMD`) exited with a non-zero status; the bundle was finalized anyway.
var ErrCommandFailed = errors.New("benchmark command failed")

// ProxyURLEnv is the environment variable that tells the benchmark
// command where the proxy listens (http://HOST:PORT).
const ProxyURLEnv = "ASRPROF_PROXY_URL"

// validateProxy checks a proxy capture's configuration.
func (c *Config) validateProxy() error {
	u, err := url.Parse(c.Target)
	_, _, perr := net.SplitHostPort(c.Proxy)
	var lerr error
	if len(c.Command) > 0 {
		_, lerr = exec.LookPath(c.Command[0])
	}
	return cmp.Or(
		errIf(lerr != nil, "the benchmark command after --: %v", lerr),
		errIf(len(c.Headers) > 0, "--header and --proxy: your client's requests carry their own headers; drop --header"),
		errIf(c.Target == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "",
			"--target %q: with --proxy, want the server's http(s) base URL such as http://127.0.0.1:8000", c.Target),
		errIf(c.ProbesOnly,
			"--probes-only and --proxy: a proxy capture already runs the probes while your client sends; drop --probes-only"),
		errIf(perr != nil, "--proxy %q: want HOST:PORT such as 127.0.0.1:8001 (%v)", c.Proxy, perr),
		errIf(len(c.Concurrency) > 0 || len(c.Rates) > 0,
			"--concurrency and --rate set asrprof's own load; with --proxy the load is your client's (name its levels with --levels)"),
		errIf(!slices.Contains([]string{"openai", "openai-stream", "funasr-ws", "openai-realtime"}, c.Protocol),
			"--protocol %q: with --proxy, want openai (any HTTP upload; both answer kinds are read), funasr-ws or openai-realtime (WebSocket sessions are then recorded)", c.Protocol),
		errIf(!slices.Contains([]string{"", protocol.PaceRealtime, protocol.PaceNone}, c.Pace),
			"--pace %q: want realtime or none (how your client paces its audio)", c.Pace),
		c.validateDialect(), c.validateLang(), c.validateOutput(),
		errIf(c.Duration < 0 || c.LevelGap < 0, "--duration and --level-gap must be ≥ 0"),
		errIf(slices.ContainsFunc(c.ProxyLevels, func(n string) bool { return strings.TrimSpace(n) == "" }), "--levels: an empty level name"),
	)
}

// runProxy is Run for --proxy: the user's client sends the load through
// a reverse proxy; probes, the OTLP receiver and the request profiler run
// as in a driven capture; the levels are found at the end.
func (s *Session) runProxy(ctx context.Context) (*Outcome, error) {
	cfg, say := &s.cfg, s.say
	var refs *proxy.Index
	var samples []dataset.Sample
	bad := 0
	if cfg.Dataset != "" {
		items, good, badEntries, err := s.prepareDataset(ctx)
		if err != nil {
			return nil, err
		}
		samples, bad = good, len(badEntries)
		refs = proxy.NewIndex()
		var dups []string
		for _, it := range items {
			if !refs.Add(it.Audio, proxy.Ref{SampleID: it.SampleID, Text: it.Ref, Lang: it.Lang, AudioS: it.AudioS}) {
				dups = append(dups, it.SampleID)
			}
		}
		if len(dups) > 0 {
			say(fmt.Sprintf("dataset: %d samples (first %s) have the same audio as an earlier sample; their uploads are matched to the earlier one", len(dups), dups[0]))
		}
	}
	models, err := checkTarget(ctx, cfg, say)
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(cfg.Proxy) // loopback when it names no host
	ln, err := net.Listen("tcp", net.JoinHostPort(cmp.Or(host, "127.0.0.1"), port))
	if err != nil {
		return nil, fmt.Errorf("%w: --proxy %s: %v", ErrInvalidConfig, cfg.Proxy, err)
	}
	defer ln.Close()
	defer s.close()
	if err := s.open(ctx, models, samples, bad); err != nil {
		return nil, err
	}
	realtime := "" // with a realtime --protocol, WebSocket sessions are recorded in it
	if protocol.IsRealtime(cfg.Protocol) {
		realtime = cfg.Protocol
	}
	px, err := proxy.New(proxy.Config{
		Target:   cfg.Target,
		Tracer:   &s.tr.awaited,
		Refs:     refs,
		Lang:     cfg.Lang,
		Realtime: realtime,
		Dialect:  cfg.Dialect,
		Pace:     cfg.Pace,
		OnRecord: func(r *model.Request) {
			if err := s.w.Append(bundle.RequestsFile, r); err != nil {
				s.noteWriteErr(err)
			}
			if s.obs != nil { // asrprof serve's request series (a proxied request is seen when it ends)
				s.obs.RequestStarted()
				s.obs.RequestDone(r)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	hs := &http.Server{Handler: px, ReadHeaderTimeout: 30 * time.Second}
	go hs.Serve(ln)
	proxyURL := "http://" + ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		say("warning: the proxy listens on " + ln.Addr().String() + ", beyond this machine; anyone who can reach it can use your server through it")
	}
	say(fmt.Sprintf("proxy: %s → %s (point your client at %s)", proxyURL, cfg.Target, proxyURL))
	period := probe.Period{Level: proxy.Unassigned, Repeat: 1, StartUnixNs: time.Now().UnixNano()}
	s.pset.begin(period)
	start := time.Now()

	stopTicks := make(chan struct{})
	if !cfg.Quiet {
		go func() { // progress: the count every 10 s while it changes
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			last := int64(-1)
			for {
				select {
				case <-stopTicks:
					return
				case <-t.C:
					if st, _ := px.Stats(); st.Recorded != last {
						last = st.Recorded
						say(fmt.Sprintf("proxy: %d requests recorded, %d in flight", st.Recorded, px.InFlight()))
					}
				}
			}
		}()
	}
	cmdInfo, interrupted, cmdErr := s.proxyWindow(ctx, proxyURL, say)
	close(stopTicks)

	// Requests in flight get the grace to finish, then the proxy closes.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Grace)
	if err := px.Wait(gctx); err != nil {
		say(fmt.Sprintf("proxy: %d requests still in flight after --grace %s; they are not recorded", px.InFlight(), cfg.Grace))
	}
	_ = hs.Shutdown(gctx)
	cancel()
	end := time.Now()
	period.EndUnixNs = end.UnixNano()
	s.end(context.WithoutCancel(ctx), period)

	recs := px.Records()
	results, err := s.proxyLevels(recs, start, end, say)
	if err != nil {
		return nil, err
	}
	px.EndSpans(recs)
	st, audioProblem := px.Stats()
	info := map[string]any{"listen": ln.Addr().String(), "target": cfg.Target, "stats": st, "levels_named": len(cfg.ProxyLevels) > 0}
	if cmdInfo != nil {
		info["command"] = cmdInfo
	}
	if audioProblem != "" {
		info["audio_problem"] = audioProblem
		say(fmt.Sprintf("proxy: %d uploads without usable audio (last: %s)", st.NoAudio, audioProblem))
	}
	if st.Unmatched > 0 {
		say(fmt.Sprintf("proxy: %d uploads matched no sample of --dataset (by audio content); they are not scored", st.Unmatched))
	}
	say(fmt.Sprintf("proxy: recorded %d requests (%d other requests passed through)", st.Recorded, st.Passed))
	s.mu.Lock()
	extra(&s.manifest)["proxy"] = info
	if st.Recorded == 0 {
		s.manifest.Incomplete = append(s.manifest.Incomplete, "the proxy recorded no transcription request")
	}
	s.mu.Unlock()
	out, err := s.finalize(ctx, &results, interrupted, nil)
	return out, cmp.Or(err, cmdErr)
}

// proxyWindow waits for the capture's end: the benchmark command's exit
// (it is started here), --duration, or ctx (Ctrl-C). Without a command,
// Ctrl-C is the ordinary end, not an interruption. It returns the
// command's record for the manifest and, when it failed, an error.
func (s *Session) proxyWindow(ctx context.Context, proxyURL string, say func(string)) (map[string]any, bool, error) {
	cfg := &s.cfg
	var timeout <-chan time.Time
	if cfg.Duration > 0 {
		timeout = time.After(cfg.Duration)
	}
	if len(cfg.Command) == 0 {
		if cfg.Duration > 0 {
			say(fmt.Sprintf("proxy: capturing for %s (Ctrl-C ends it sooner)", cfg.Duration))
		} else {
			say("proxy: capturing until Ctrl-C")
		}
		select {
		case <-ctx.Done():
		case <-timeout:
		}
		return nil, false, nil
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = append(os.Environ(), ProxyURLEnv+"="+proxyURL)
	// The command's output goes to stderr with asrprof's progress, so that
	// stdout keeps only asrprof's tables (--format json stays parseable).
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	info := map[string]any{"argv": secret.Args(cfg.Command)}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		info["error"] = err.Error()
		return info, false, fmt.Errorf("%w: starting %s: %v", ErrCommandFailed, cfg.Command[0], err)
	}
	say(fmt.Sprintf("proxy: started %s (pid %d, %s=%s)", strings.Join(secret.Args(cfg.Command), " "), cmd.Process.Pid, ProxyURLEnv, proxyURL))
	// Its guard stops it should asrprof be killed (internal/guard).
	g, gerr := guard.Start(guard.Spec{PID: cmd.Process.Pid, What: "benchmark command", Grace: cfg.Grace})
	if gerr != nil {
		say(fmt.Sprintf("proxy: the command's guard did not start (%v): if asrprof is killed, the command keeps running", gerr))
	}
	defer g.Release()
	exited, exit := context.WithCancel(context.Background()) // done once the command has exited
	var werr error
	go func() {
		werr = cmd.Wait()
		exit()
	}()
	interrupted, stopped := false, ""
	select {
	case <-exited.Done():
	case <-ctx.Done():
		interrupted, stopped = true, "interrupted"
	case <-timeout:
		stopped = "--duration " + cfg.Duration.String()
	}
	if stopped != "" {
		say(fmt.Sprintf("proxy: stopping the benchmark command (%s)", stopped))
		isExited := func() bool { return exited.Err() != nil }
		if err := proctree.StopGroup(context.Background(), cmd.Process.Pid, cfg.Grace, isExited); err != nil {
			say("proxy: " + err.Error())
		}
		<-exited.Done()
		info["stopped"] = stopped
	}
	info["wall_s"] = time.Since(t0).Seconds()
	code := cmd.ProcessState.ExitCode()
	info["exit_code"] = code
	say(fmt.Sprintf("proxy: the benchmark command exited with status %d", code))
	if stopped == "" && werr != nil {
		return info, interrupted, fmt.Errorf("%w: %s exited with status %d", ErrCommandFailed, cfg.Command[0], code)
	}
	return info, interrupted, nil
}

// proxyLevels finds the client's levels in recs, sets every record's
// level and repeat, rewrites requests.jsonl with them, and records each
// phase in the manifest as a pass; it returns results.json.
func (s *Session) proxyLevels(recs []model.Request, start, end time.Time, say func(string)) (model.Results, error) {
	cfg := &s.cfg
	results := model.Results{Schema: model.Schema, Results: []model.LevelResult{}}
	phases, err := proxy.InferLevels(recs, proxy.LevelOptions{Gap: cfg.LevelGap, Names: cfg.ProxyLevels})
	if err != nil {
		// The records stay, unassigned; the manifest says why.
		say("proxy: levels: " + err.Error())
		s.mu.Lock()
		s.manifest.Incomplete = append(s.manifest.Incomplete, "levels: "+err.Error())
		s.mu.Unlock()
		phases = []proxy.Phase{{Level: proxy.Unassigned, Repeat: 1, StartUnixNs: start.UnixNano(), EndUnixNs: end.UnixNano(), WallS: end.Sub(start).Seconds()}}
		for i := range recs {
			phases[0].Requests = append(phases[0].Requests, i)
		}
	}
	if err := s.w.ReplaceJSONL(bundle.RequestsFile, len(recs), func(i int) any { return &recs[i] }); err != nil {
		return results, err
	}
	var names []string
	byLevel := map[string][]model.PassMetrics{}
	var order []string
	s.mu.Lock()
	for _, ph := range phases {
		prs := make([]model.Request, len(ph.Requests))
		for k, i := range ph.Requests {
			prs[k] = recs[i]
		}
		pm := summary.Pass(prs, ph.WallS)
		pm.Level, pm.Concurrency, pm.Rate, pm.Repeat = ph.Level, ph.Concurrency, ph.Rate, ph.Repeat
		s.manifest.Levels = append(s.manifest.Levels, model.LevelRun{
			Level: ph.Level, Concurrency: ph.Concurrency, Rate: ph.Rate, Repeat: ph.Repeat,
			StartUnixNs: ph.StartUnixNs, EndUnixNs: ph.EndUnixNs, WallS: ph.WallS,
		})
		s.manifest.Coverage.Add(pm.Coverage)
		if gap := CoverageGap(pm.Coverage); gap != "" && cfg.Dataset != "" {
			s.manifest.Incomplete = append(s.manifest.Incomplete, fmt.Sprintf("%s repeat %d: %s", ph.Level, ph.Repeat, gap))
		}
		if byLevel[ph.Level] == nil {
			order = append(order, ph.Level)
		}
		byLevel[ph.Level] = append(byLevel[ph.Level], pm)
		names = append(names, fmt.Sprintf("%s repeat %d (%d requests, %d in flight)", model.LevelLabel(ph.Level), ph.Repeat, len(ph.Requests), ph.Seen))
	}
	s.mu.Unlock()
	for _, lv := range order {
		results.Results = append(results.Results, summary.Level(byLevel[lv]))
	}
	how := "inferred"
	if len(cfg.ProxyLevels) > 0 {
		how = "named by --levels"
	}
	if len(names) > 0 {
		say(fmt.Sprintf("proxy: levels %s: %s", how, strings.Join(names, ", ")))
	}
	return results, s.saveManifest()
}
