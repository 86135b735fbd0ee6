// Package serve is `asrprof serve`: a long-running daemon that starts,
// lists, follows and stops captures over a JSON API, serves their reports
// and bundles, exports live Prometheus metrics of what its captures
// record (/metrics), and is the agent of remote captures: `asrprof
// capture --agent URL` runs its driver on one host while the probes run
// in this daemon on the server's host (docs/SCALE.md).
//
// The daemon parses a capture's options with the CLI's own flag parser
// (Config.Parse, handed in by cmd/asrprof), so the API takes exactly the
// flags a user types, and it runs them through capture.Session or, for
// remote and probes-only captures, capture.ProbeRun. It reads probe
// records as the probes write them (capture.Observer, tapped at the
// capture's counting sink), not from the bundle's files.
package serve

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/asrprof/asrprof/capture"
)

// DefaultAddr is where the daemon listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7070"

// ErrNeedsToken is returned by Listen for a non-loopback address without
// a token.
var ErrNeedsToken = errors.New("a non-loopback address needs a token")

// Config configures a Server.
type Config struct {
	// Addr is the listen address (DefaultAddr when empty). Any address
	// that is not loopback needs Token.
	Addr string
	// Token, when set, is the bearer token every route asks for.
	Token string
	// Dir is where the captures' bundles go (<Dir>/<id>).
	Dir string
	// PIDFile, when set, gets the daemon's pid once it listens (the
	// command removes it when the daemon stops).
	PIDFile string
	// Parse turns the flags of `asrprof capture` into a configuration
	// (the CLI's own parser), so that the API takes the CLI's options.
	Parse func(args []string) (capture.Config, error)
	// Finish is a driven capture's end-of-capture hook, as `asrprof
	// capture`'s: its tables are printed into the capture's log and its
	// report.html written into the bundle (nil: none; GET
	// /v1/captures/ID/report then answers 404).
	Finish capture.Finish
	// RemoteIdle finishes a remote capture whose driver has not called
	// for this long (0: 10 minutes): a driver that died leaves no probes
	// running forever.
	RemoteIdle time.Duration
}

// Server is the daemon. Create it with New; Serve runs it.
type Server struct {
	cfg Config
	m   *metrics

	mu       sync.Mutex
	captures []*entry
	seq      int
	ctx      context.Context // captures run under it; Serve's
	wg       sync.WaitGroup
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	if cfg.Parse == nil {
		return nil, errors.New("serve: Config.Parse is nil")
	}
	if cfg.Dir == "" {
		return nil, errors.New("serve: Config.Dir is empty")
	}
	if cfg.RemoteIdle < 0 {
		return nil, fmt.Errorf("--remote-idle %v: must be > 0", cfg.RemoteIdle)
	}
	cfg.RemoteIdle = cmp.Or(cfg.RemoteIdle, 10*time.Minute)
	return &Server{cfg: cfg, m: newMetrics(), ctx: context.Background()}, nil
}

// CheckAddr says whether addr may be listened on with token: loopback
// always; any other address only with a token, and then warning is what
// to print.
func CheckAddr(addr, token string) (warning string, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return "", nil
	}
	if token == "" {
		return "", fmt.Errorf("%w: --listen %s is reachable from other hosts and the API starts processes and probes; give --token (or $ASRPROF_TOKEN), or listen on 127.0.0.1", ErrNeedsToken, addr)
	}
	return fmt.Sprintf("warning: asrprof serve listens on %s, reachable from other hosts; every route asks for the bearer token, but the traffic is plain HTTP (use a private network or a TLS proxy)", addr), nil
}

// Listen opens the listener after CheckAddr; warnings go to stderr.
func (s *Server) Listen(stderr io.Writer) (net.Listener, error) {
	warn, err := CheckAddr(s.cfg.Addr, s.cfg.Token)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		fmt.Fprintln(stderr, warn)
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("--dir: %w", err)
	}
	return net.Listen("tcp", s.cfg.Addr)
}

// Serve answers on ln until ctx is done, then stops every capture (each
// finalizes its bundle) and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	for _, e := range s.entries() {
		e.cancel()
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(shut)
	s.wg.Wait()
	return nil
}

// entries is a copy of the list of captures.
func (s *Server) entries() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.captures)
}

// Handler is the daemon's routes, behind the token check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+capture.AgentTimePath, s.timeNow)
	mux.HandleFunc("GET "+capture.AgentCapturesPath, s.list)
	mux.HandleFunc("POST "+capture.AgentCapturesPath, s.start)
	mux.HandleFunc("GET "+capture.AgentCapturesPath+"/{id}", s.route(s.get))
	mux.HandleFunc("GET "+capture.AgentCapturesPath+"/{id}/log", s.route(s.log))
	mux.HandleFunc("POST "+capture.AgentCapturesPath+"/{id}/stop", s.route(s.stop))
	mux.HandleFunc("POST "+capture.AgentCapturesPath+"/{id}/begin", s.route(s.begin))
	mux.HandleFunc("POST "+capture.AgentCapturesPath+"/{id}/end", s.route(s.end))
	mux.HandleFunc("GET "+capture.AgentCapturesPath+"/{id}/report", s.route(s.report))
	mux.HandleFunc("GET "+capture.AgentCapturesPath+"/{id}/bundle", s.route(s.bundle))
	routes := jsonFallback(mux)
	if s.cfg.Token == "" {
		return routes
	}
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="asrprof"`)
			httpError(w, http.StatusUnauthorized, "asrprof serve: missing or wrong bearer token (Authorization: Bearer TOKEN)")
			return
		}
		routes.ServeHTTP(w, r)
	})
}

// jsonFallback answers what mux has no route for in JSON, as every other
// error: an unknown path is a 404 that points to the API's list, a known
// path with another method a 405 that names the methods it takes (the
// Allow header, as net/http sets it).
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // it sets the path's values ({id})
			return
		}
		// net/http's own answer (404, 405 with Allow, or a redirect to
		// the cleaned path) is read from a recorder, then said in JSON.
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for _, k := range []string{"Allow", "Location"} {
			if v := rec.Header().Get(k); v != "" {
				w.Header().Set(k, v)
			}
		}
		switch code := rec.Code; code {
		case http.StatusNotFound:
			httpError(w, code, "no route %s %s (the API: GET / lists it; GET %s lists the captures)", r.Method, r.URL.Path, capture.AgentCapturesPath)
		case http.StatusMethodNotAllowed:
			httpError(w, code, "%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, rec.Header().Get("Allow"))
		default:
			httpError(w, code, "%s %s: %s", r.Method, r.URL.Path, strings.TrimSpace(rec.Body.String()))
		}
	})
}

func (s *Server) timeNow(w http.ResponseWriter, r *http.Request) {
	recv := time.Now().UnixNano()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"recv_unix_ns":%d,"send_unix_ns":%d}`, recv, time.Now().UnixNano())
}

// lookup finds a capture by id, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *entry {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.captures, func(e *entry) bool { return e.id == id }); i >= 0 {
		return s.captures[i]
	}
	httpError(w, http.StatusNotFound, "no capture %q (GET %s lists them)", id, capture.AgentCapturesPath)
	return nil
}

// route is h as the handler of a route of one capture: h is given the
// capture the path's {id} names (lookup).
func (s *Server) route(h func(http.ResponseWriter, *http.Request, *entry)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e := s.lookup(w, r); e != nil {
			h(w, r, e)
		}
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.infos())
}

func (s *Server) infos() []capture.AgentCapture {
	out := []capture.AgentCapture{}
	for _, e := range s.entries() {
		out = append(out, e.info())
	}
	return out
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, e *entry) {
	writeJSON(w, http.StatusOK, e.info())
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, e *entry) {
	e.cancel()
	if r.URL.Query().Get("wait") != "" {
		select {
		case <-e.finished:
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(w, http.StatusAccepted, e.info())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// APIError is how the daemon answers an error, in JSON as every other
// answer: {"error": "args: --dataset none.jsonl: no such file or
// directory", "status": 400}.
type APIError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

func httpError(w http.ResponseWriter, code int, format string, a ...any) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeJSON(w, code, APIError{Error: strings.TrimSpace(fmt.Sprintf(format, a...)), Status: code})
}
