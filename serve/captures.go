package serve

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/probe"
)

// entry is one capture the daemon started.
type entry struct {
	id, dir string // its ac's, which never change
	m       *metrics
	log     *logBuf

	cancel   context.CancelFunc
	finished chan struct{} // closed when the capture has ended and its bundle is final

	sent, done, failed atomic.Int64
	periods            atomic.Int64

	cudaMu   sync.Mutex
	cudaKey  string             // the period (level/repeat) cudaRate sums
	cudaRate map[string]float64 // launches/s by symbol, over its threads

	mu       sync.Mutex
	ac       capture.AgentCapture // but the counts above and Report
	run      *capture.ProbeRun    // remote captures
	lastCall time.Time
}

func (e *entry) info() capture.AgentCapture {
	e.mu.Lock()
	defer e.mu.Unlock()
	ac := e.ac
	ac.Sent, ac.Done, ac.Failed, ac.Periods = e.sent.Load(), e.done.Load(), e.failed.Load(), int(e.periods.Load())
	_, err := os.Stat(filepath.Join(e.dir, bundle.ReportFile))
	ac.Report = err == nil
	return ac
}

// finish records how the capture ended.
func (e *entry) finish(out *capture.Outcome, err error) {
	e.mu.Lock()
	e.ac.End = time.Now().UnixNano()
	e.ac.State = "finished"
	if out != nil {
		e.ac.Complete = out.Manifest.Complete
		if p, ok := out.Manifest.Extra["probes"].(map[string]string); ok {
			e.ac.Probes = p
		}
	}
	if err != nil && !errors.Is(err, capture.ErrInterrupted) {
		e.ac.State, e.ac.Error = "failed", err.Error()
		fmt.Fprintf(e.log, "asrprof serve: capture failed: %v\n", err)
	}
	e.mu.Unlock()
	close(e.finished)
}

// start is POST /v1/captures: the body's args are parsed by the CLI's
// own parser; the bundle goes to <dir>/<id>.
func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var req capture.AgentStart
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && len(req.Args) == 0 {
		// {"target": ...}: say so, not that args lacks --target (unknown
		// fields beside args are let pass, for a newer agent)
		d := json.NewDecoder(bytes.NewReader(body))
		d.DisallowUnknownFields()
		err = d.Decode(&capture.AgentStart{})
	}
	if err != nil {
		httpError(w, http.StatusBadRequest, `body: want {"args": ["--target", "URL", ...], "remote": false}: %v`, err)
		return
	}
	cfg, err := s.cfg.Parse(req.Args)
	if err != nil {
		httpError(w, http.StatusBadRequest, "args: %v", err)
		return
	}
	if req.Remote && !cfg.ProbesOnly {
		httpError(w, http.StatusBadRequest, "a remote capture is probes-only: add --probes-only")
		return
	}
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("%s-%d", time.Now().Format("20060102-150405"), s.seq)
	ctx := s.ctx
	s.mu.Unlock()
	cfg.Out = filepath.Join(s.cfg.Dir, id) // its progress lines (plain, not a terminal) go to the log unless --quiet
	e := &entry{id: id, dir: cfg.Out, m: s.m, log: &logBuf{changed: make(chan struct{})}, finished: make(chan struct{}), lastCall: time.Now(),
		ac: capture.AgentCapture{ID: id, Kind: "driven", State: "running", Dir: cfg.Out, Start: time.Now().UnixNano()}}
	switch {
	case req.Remote:
		e.ac.Kind = "remote"
	case cfg.Proxy != "":
		e.ac.Kind = "proxy"
	case cfg.ProbesOnly:
		e.ac.Kind = "probes"
	}
	cctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	if req.Remote {
		// The probes start before the answer, so that the driver knows
		// which run before its first request.
		run, err := capture.StartProbeRun(cctx, cfg, e, e.log)
		if err != nil {
			cancel()
			httpError(w, http.StatusBadRequest, "starting the probes: %v\n%s", err, e.log.String())
			return
		}
		e.run, e.ac.Probes = run, run.Status()
	}
	if err := cfg.Validate(); err != nil {
		cancel()
		httpError(w, http.StatusBadRequest, "args: %v", err)
		return
	}
	s.mu.Lock()
	s.captures = append(s.captures, e)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer s.m.forget(id)
		if e.run != nil {
			s.remote(cctx, e)
			return
		}
		out, err := capture.New(cfg, e.log, e.log).Observe(e).OnFinish(s.cfg.Finish).Run(cctx)
		e.finish(out, err)
	}()
	writeJSON(w, http.StatusCreated, e.info())
}

// remote waits for a remote capture's end: a stop, the daemon's end, or
// a driver that went quiet for RemoteIdle.
func (s *Server) remote(ctx context.Context, e *entry) {
	t := time.NewTicker(max(min(s.cfg.RemoteIdle/4, 30*time.Second), 100*time.Millisecond))
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			e.mu.Lock()
			idle := time.Since(e.lastCall)
			e.mu.Unlock()
			if idle > s.cfg.RemoteIdle {
				fmt.Fprintf(e.log, "asrprof serve: no call from the driver for %v; finishing\n", idle.Round(time.Second))
				done = true
			}
		}
	}
	out, err := e.run.Finish(context.Background())
	e.finish(out, err)
}

func (s *Server) period(w http.ResponseWriter, r *http.Request, e *entry) (probe.Period, bool) {
	if e.run == nil {
		httpError(w, http.StatusConflict, "capture %s is not remote: its periods are its own", e.id)
		return probe.Period{}, false
	}
	var p probe.Period
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&p); err != nil || p.Level == "" {
		httpError(w, http.StatusBadRequest, `body: want a period {"level","repeat","warmup","start_unix_ns","end_unix_ns"}: %v`, err)
		return probe.Period{}, false
	}
	e.mu.Lock()
	e.lastCall = time.Now()
	e.mu.Unlock()
	return p, true
}

func (s *Server) begin(w http.ResponseWriter, r *http.Request, e *entry) {
	p, ok := s.period(w, r, e)
	if !ok {
		return
	}
	if err := e.run.Begin(r.Context(), p); err != nil {
		httpError(w, http.StatusConflict, "begin: %v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) end(w http.ResponseWriter, r *http.Request, e *entry) {
	p, ok := s.period(w, r, e)
	if !ok {
		return
	}
	counts, err := e.run.End(context.WithoutCancel(r.Context()), p)
	if err != nil {
		httpError(w, http.StatusConflict, "end: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, capture.AgentEnd{Counts: counts})
}

// log is GET /v1/captures/{id}/log: the capture's progress lines;
// ?follow=1 streams them until the capture ends.
func (s *Server) log(w http.ResponseWriter, r *http.Request, e *entry) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.URL.Query().Get("follow") == "" {
		io.WriteString(w, e.log.String())
		return
	}
	rc := http.NewResponseController(w)
	off := 0
	for {
		b, changed := e.log.since(off)
		off += len(b)
		w.Write(b)
		rc.Flush()
		select {
		case <-changed:
		case <-e.finished:
			b, _ := e.log.since(off)
			w.Write(b)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) report(w http.ResponseWriter, r *http.Request, e *entry) {
	p := filepath.Join(e.dir, bundle.ReportFile)
	if _, err := os.Stat(p); err != nil {
		httpError(w, http.StatusNotFound, "capture %s has no %s in its bundle (%s)", e.id, bundle.ReportFile, e.dir)
		return
	}
	http.ServeFile(w, r, p)
}

// bundle is GET /v1/captures/{id}/bundle: the finished bundle as tar.gz.
func (s *Server) bundle(w http.ResponseWriter, r *http.Request, e *entry) {
	select {
	case <-e.finished:
	default:
		httpError(w, http.StatusConflict, "capture %s is still running: stop it (POST .../stop) or wait for its end", e.id)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.tar.gz"`, e.id))
	if err := writeTarGz(w, e.dir); err != nil {
		// The header is gone; a broken archive is what the client sees.
		fmt.Fprintf(e.log, "asrprof serve: sending the bundle: %v\n", err)
	}
}

// writeTarGz writes the files under dir as a tar.gz, with paths relative
// to dir (tar.Writer.AddFS; a bundle holds regular files and folders).
func writeTarGz(w io.Writer, dir string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	return errors.Join(tw.AddFS(os.DirFS(dir)), tw.Close(), zw.Close())
}

// logBuf is a capture's log: what it prints, kept for /log.
type logBuf struct {
	mu      sync.Mutex
	b       []byte
	changed chan struct{}
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b) < 4<<20 { // a runaway log is cut, not kept whole
		l.b = append(l.b, p...)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logBuf) String() string {
	b, _ := l.since(0)
	return string(b)
}

// since returns what was written after off and a channel closed at the
// next write.
func (l *logBuf) since(off int) ([]byte, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b[min(off, len(l.b)):]...), l.changed
}
