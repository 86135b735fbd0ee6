package otlp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxRequestBytes bounds one export request (after decompression)
// when Config.MaxRequestBytes is zero.
const DefaultMaxRequestBytes = 16 << 20

// ErrRemoteBind is returned by Start for a non-loopback listen address when
// Config.AllowRemote is not set.
var ErrRemoteBind = errors.New("refusing to listen on a non-loopback address without AllowRemote")

// Config says where a Receiver listens.
type Config struct {
	// HTTPAddr and GRPCAddr are host:port listen addresses; "" or "off"
	// disables that protocol. Port 0 picks a free port.
	HTTPAddr string
	GRPCAddr string
	// AllowRemote permits non-loopback listen addresses. The receiver has
	// no authentication: anyone who can reach it can add spans.
	AllowRemote bool
	// MaxRequestBytes bounds one export request, decompressed
	// (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int64
}

// Stats counts what a Receiver received.
type Stats struct {
	Requests   int64 `json:"requests"`    // export requests, accepted or not
	Spans      int64 `json:"spans"`       // spans handed to the sink without error
	Malformed  int64 `json:"malformed"`   // payloads that did not decode (HTTP 400)
	TooLarge   int64 `json:"too_large"`   // payloads over MaxRequestBytes (HTTP 413)
	Rejected   int64 `json:"rejected"`    // wrong method, path or content type (HTTP 404/405/415)
	SinkErrors int64 `json:"sink_errors"` // requests the sink refused (HTTP 503, gRPC Unavailable)
}

// Receiver is an OTLP trace receiver. Its methods are safe for concurrent
// use; Start and Stop are called once each.
type Receiver struct {
	cfg     Config
	sink    func(ptrace.Traces) error
	handler http.Handler

	requests, spans, malformed, tooLarge, rejected, sinkErrors atomic.Int64

	mu       sync.Mutex
	httpLn   net.Listener
	grpcLn   net.Listener
	httpSrv  *http.Server
	grpcSrv  *grpc.Server
	warning  string
	serveErr chan error
	started  int
}

// NewReceiver returns a receiver that passes every decoded export request to
// sink, synchronously, from the goroutine serving that request (so sink must
// be safe for concurrent use). sink must not keep td after it returns. When
// sink returns an error the sender is told to retry later (HTTP 503, gRPC
// Unavailable).
func NewReceiver(cfg Config, sink func(ptrace.Traces) error) *Receiver {
	cfg.MaxRequestBytes = cmp.Or(max(cfg.MaxRequestBytes, 0), DefaultMaxRequestBytes) // zero or less: the default
	r := &Receiver{cfg: cfg, sink: sink}
	r.handler = &httpHandler{r: r, bodies: sync.Pool{New: func() any { return new(bytes.Buffer) }}}
	return r
}

// Enabled says whether a listen address is on: neither "" nor "off".
func Enabled(addr string) bool { return addr != "" && addr != "off" }

// Start binds the configured addresses and serves them until Stop. It fails,
// naming the address, when a port is taken, and refuses non-loopback
// addresses unless AllowRemote is set (then Warning says so).
func (r *Receiver) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.httpLn != nil || r.grpcLn != nil {
		return errors.New("otlp receiver: already started")
	}
	addrs := []struct{ proto, addr string }{{"http", r.cfg.HTTPAddr}, {"grpc", r.cfg.GRPCAddr}}
	var warnings []string
	for _, a := range addrs {
		if !Enabled(a.addr) {
			continue
		}
		loop, err := isLoopback(a.addr)
		if err != nil {
			return fmt.Errorf("otlp %s receiver address %q: %w", a.proto, a.addr, err)
		}
		if !loop {
			if !r.cfg.AllowRemote {
				return fmt.Errorf("otlp %s receiver address %q: %w", a.proto, a.addr, ErrRemoteBind)
			}
			warnings = append(warnings, fmt.Sprintf("otlp %s receiver listens on non-loopback address %s without authentication: anyone who can reach it can add spans to the capture", a.proto, a.addr))
		}
	}
	var lc net.ListenConfig
	var lns [2]net.Listener // http, grpc
	for i, a := range addrs {
		if !Enabled(a.addr) {
			continue
		}
		ln, err := lc.Listen(ctx, "tcp", a.addr)
		if err != nil {
			hint := ""
			if errors.Is(err, syscall.EADDRINUSE) {
				hint = " (the port is taken: is another collector or Jaeger running? pick another port)"
			}
			if lns[0] != nil {
				lns[0].Close()
			}
			return fmt.Errorf("otlp %s receiver: listening on %s: %w%s", a.proto, a.addr, err, hint)
		}
		lns[i] = ln
	}
	r.httpLn, r.grpcLn = lns[0], lns[1]
	r.serveErr = make(chan error, 2)
	if r.httpLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/", r.handler)
		r.httpSrv = &http.Server{Handler: mux, MaxHeaderBytes: 1 << 20}
		r.serve(r.httpSrv.Serve, r.httpLn, http.ErrServerClosed)
	}
	if r.grpcLn != nil {
		r.grpcSrv = grpc.NewServer(
			grpc.MaxRecvMsgSize(int(min(r.cfg.MaxRequestBytes, 1<<31-1))),
		)
		ptraceotlp.RegisterGRPCServer(r.grpcSrv, &grpcServer{r: r})
		r.serve(r.grpcSrv.Serve, r.grpcLn, grpc.ErrServerStopped) // ErrServerStopped: stopped before it began serving
	}
	r.warning = strings.Join(warnings, "; ")
	return nil
}

// serve runs serve(ln) on its own goroutine, which reports its error on
// serveErr: nil when it is stopped (the error stopped).
func (r *Receiver) serve(serve func(net.Listener) error, ln net.Listener, stopped error) {
	r.started++
	go func() {
		err := serve(ln)
		if errors.Is(err, stopped) {
			err = nil
		}
		r.serveErr <- err
	}()
}

// Warning is non-empty after Start when the receiver listens on a
// non-loopback address; callers print it or record it in the manifest.
func (r *Receiver) Warning() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.warning
}

// HTTPEndpoint is the OTLP/HTTP traces URL to give the server, e.g.
// "http://127.0.0.1:4318/v1/traces" ("" when HTTP is off or not started).
func (r *Receiver) HTTPEndpoint() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.httpLn == nil {
		return ""
	}
	return "http://" + r.httpLn.Addr().String() + "/v1/traces"
}

// GRPCAddr is the bound gRPC host:port ("" when gRPC is off or not started).
func (r *Receiver) GRPCAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.grpcLn == nil {
		return ""
	}
	return r.grpcLn.Addr().String()
}

// Stop stops accepting exports and waits for those in progress, until ctx
// is done; then it closes the remaining connections and returns ctx's error.
func (r *Receiver) Stop(ctx context.Context) error {
	r.mu.Lock()
	httpSrv, grpcSrv, n, errc := r.httpSrv, r.grpcSrv, r.started, r.serveErr
	r.started = 0
	r.mu.Unlock()
	var errs []error
	if httpSrv != nil {
		if err := httpSrv.Shutdown(ctx); err != nil {
			httpSrv.Close()
			errs = append(errs, fmt.Errorf("stopping otlp http receiver: %w", err))
		}
	}
	if grpcSrv != nil {
		done := make(chan struct{})
		go func() {
			grpcSrv.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			grpcSrv.Stop()
			<-done
			errs = append(errs, fmt.Errorf("stopping otlp grpc receiver: %w", ctx.Err()))
		}
	}
	for range n {
		if err := <-errc; err != nil {
			errs = append(errs, fmt.Errorf("otlp receiver: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Stats returns the counters so far.
func (r *Receiver) Stats() Stats {
	return Stats{
		Requests:   r.requests.Load(),
		Spans:      r.spans.Load(),
		Malformed:  r.malformed.Load(),
		TooLarge:   r.tooLarge.Load(),
		Rejected:   r.rejected.Load(),
		SinkErrors: r.sinkErrors.Load(),
	}
}

// Handler is the OTLP/HTTP handler (POST /v1/traces), usable without Start.
func (r *Receiver) Handler() http.Handler { return r.handler }

// deliver hands td to the sink and counts it.
func (r *Receiver) deliver(td ptrace.Traces) error {
	n := td.SpanCount()
	if n == 0 {
		return nil
	}
	if err := r.sink(td); err != nil {
		r.sinkErrors.Add(1)
		return err
	}
	r.spans.Add(int64(n))
	return nil
}

// isLoopback reports whether a listen address binds only loopback.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		return false, nil // a host name: it may resolve anywhere
	}
	return ip.IsLoopback(), nil
}

type grpcServer struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

func (g *grpcServer) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	g.r.requests.Add(1)
	if err := g.r.deliver(req.Traces()); err != nil {
		return ptraceotlp.NewExportResponse(), status.Error(codes.Unavailable, "storing spans: "+err.Error())
	}
	return ptraceotlp.NewExportResponse(), nil
}
