package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// makeTraces returns n spans of one trace, named name-0, name-1...
func makeTraces(n int, name string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "server")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range n {
		sp := ss.AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		sp.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		sp.SetName(fmt.Sprintf("%s-%d", name, i))
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(i) * time.Millisecond)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(i+5) * time.Millisecond)))
		sp.Attributes().PutStr("gen_ai.request.id", fmt.Sprintf("transcribe-x_%d", i))
		sp.Attributes().PutDouble("gen_ai.latency.e2e", 0.25)
	}
	return td
}

func protoBody(t testing.TB, td ptrace.Traces) []byte {
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonBody(t testing.TB, td ptrace.Traces) []byte {
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// collector is a sink that keeps span names.
type collector struct {
	mu    sync.Mutex
	names []string
	err   error
}

func (c *collector) sink(td ptrace.Traces) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				c.names = append(c.names, ss.At(k).Name())
			}
		}
	}
	return nil
}

func (c *collector) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

func startReceiver(t *testing.T, cfg Config, sink func(ptrace.Traces) error) *Receiver {
	t.Helper()
	r := NewReceiver(cfg, sink)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return r
}

func TestHTTP(t *testing.T) {
	three := makeTraces(3, "s")
	tests := []struct {
		name     string
		method   string
		path     string
		ct, enc  string
		body     []byte
		wantCode int
		wantCT   string
		want     []string // span names stored
		wantStat Stats
	}{
		{name: "proto", ct: "application/x-protobuf", body: protoBody(t, three), wantCode: 200, wantCT: ctProto,
			want: []string{"s-0", "s-1", "s-2"}, wantStat: Stats{Requests: 1, Spans: 3}},
		{name: "json", ct: "application/json; charset=utf-8", body: jsonBody(t, three), wantCode: 200, wantCT: ctJSON,
			want: []string{"s-0", "s-1", "s-2"}, wantStat: Stats{Requests: 1, Spans: 3}},
		{name: "proto gzip", ct: "application/x-protobuf", enc: "gzip", body: gzipped(protoBody(t, three)), wantCode: 200, wantCT: ctProto,
			want: []string{"s-0", "s-1", "s-2"}, wantStat: Stats{Requests: 1, Spans: 3}},
		{name: "json gzip", ct: "application/json", enc: "gzip", body: gzipped(jsonBody(t, three)), wantCode: 200, wantCT: ctJSON,
			want: []string{"s-0", "s-1", "s-2"}, wantStat: Stats{Requests: 1, Spans: 3}},
		{name: "empty proto", ct: "application/x-protobuf", body: nil, wantCode: 200, wantCT: ctProto,
			wantStat: Stats{Requests: 1}},
		{name: "malformed proto", ct: "application/x-protobuf", body: []byte{0x0a, 0xff, 0xff, 0x01}, wantCode: 400, wantCT: ctProto,
			wantStat: Stats{Requests: 1, Malformed: 1}},
		{name: "malformed json", ct: "application/json", body: []byte(`{"resourceSpans": [`), wantCode: 400, wantCT: ctJSON,
			wantStat: Stats{Requests: 1, Malformed: 1}},
		{name: "bad gzip", ct: "application/x-protobuf", enc: "gzip", body: []byte("not gzip"), wantCode: 400, wantCT: ctProto,
			wantStat: Stats{Requests: 1, Malformed: 1}},
		{name: "too large", ct: "application/x-protobuf", body: protoBody(t, makeTraces(200, "big")), wantCode: 413, wantCT: ctProto,
			wantStat: Stats{Requests: 1, TooLarge: 1}},
		{name: "too large once unzipped", ct: "application/x-protobuf", enc: "gzip", body: gzipped(make([]byte, 64<<10)), wantCode: 413, wantCT: ctProto,
			wantStat: Stats{Requests: 1, TooLarge: 1}},
		{name: "wrong type", ct: "text/plain", body: []byte("hi"), wantCode: 415, wantCT: ctJSON,
			wantStat: Stats{Requests: 1, Rejected: 1}},
		{name: "wrong encoding", ct: "application/json", enc: "br", body: []byte("{}"), wantCode: 415, wantCT: ctJSON,
			wantStat: Stats{Requests: 1, Rejected: 1}},
		{name: "wrong method", method: "GET", ct: "application/json", wantCode: 405, wantCT: ctJSON,
			wantStat: Stats{Requests: 1, Rejected: 1}},
		{name: "wrong path", path: "/v1/logs", ct: "application/json", body: []byte("{}"), wantCode: 404, wantCT: ctJSON,
			wantStat: Stats{Rejected: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collector{}
			r := startReceiver(t, Config{HTTPAddr: "127.0.0.1:0", MaxRequestBytes: 16 << 10}, c.sink)
			url := r.HTTPEndpoint()
			if tt.path != "" {
				url = strings.TrimSuffix(url, TracesPath) + tt.path
			}
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, url, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ct)
			if tt.enc != "" {
				req.Header.Set("Content-Encoding", tt.enc)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tt.wantCode, body)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.wantCT {
				t.Errorf("Content-Type %q, want %q", got, tt.wantCT)
			}
			checkBody(t, tt.wantCode, tt.wantCT, body)
			if got := c.got(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("stored %v, want %v", got, tt.want)
			}
			if got := r.Stats(); got != tt.wantStat {
				t.Errorf("stats %+v, want %+v", got, tt.wantStat)
			}
		})
	}
}

// checkBody asserts an ExportTraceServiceResponse on success and a
// google.rpc.Status otherwise, in the given encoding.
func checkBody(t *testing.T, code int, ct string, body []byte) {
	t.Helper()
	if code == 200 {
		resp := ptraceotlp.NewExportResponse()
		var err error
		if ct == ctProto {
			err = resp.UnmarshalProto(body)
		} else {
			err = resp.UnmarshalJSON(body)
			if len(body) == 0 {
				err = errors.New("empty JSON body")
			}
		}
		if err != nil {
			t.Errorf("response %q: %v", body, err)
		}
		return
	}
	var st spb.Status
	if ct == ctProto {
		if err := proto.Unmarshal(body, &st); err != nil {
			t.Fatalf("status body %q: %v", body, err)
		}
	} else {
		var js struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(body, &js); err != nil {
			t.Fatalf("status body %q: %v", body, err)
		}
		st.Code, st.Message = js.Code, js.Message
	}
	if st.Code == 0 || st.Message == "" {
		t.Errorf("status body %+v: want a code and a message", &st)
	}
}

func TestHTTPSinkError(t *testing.T) {
	c := &collector{err: errors.New("disk full")}
	r := NewReceiver(Config{}, c.sink)
	body := protoBody(t, makeTraces(2, "s"))
	for _, ct := range []string{ctProto, ctJSON} {
		if ct == ctJSON {
			body = jsonBody(t, makeTraces(2, "s"))
		}
		rec := serve(r.Handler(), ct, body)
		if rec.code != http.StatusServiceUnavailable {
			t.Errorf("%s: status %d, want 503", ct, rec.code)
		}
		if !strings.Contains(string(rec.body), "disk full") && ct == ctJSON {
			t.Errorf("%s: body %q does not carry the sink's error", ct, rec.body)
		}
	}
	if s := r.Stats(); s.SinkErrors != 2 || s.Spans != 0 {
		t.Errorf("stats %+v, want 2 sink errors and no spans", s)
	}
}

func TestGRPCRoundTrip(t *testing.T) {
	c := &collector{}
	r := startReceiver(t, Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off"}, c.sink)
	if r.HTTPEndpoint() != "" {
		t.Errorf("HTTP is off but HTTPEndpoint = %q", r.HTTPEndpoint())
	}
	cc, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := ptraceotlp.NewGRPCClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(makeTraces(4, "g"))); err != nil {
		t.Fatal(err)
	}
	if got := c.got(); strings.Join(got, ",") != "g-0,g-1,g-2,g-3" {
		t.Errorf("stored %v", got)
	}
	if s := r.Stats(); s.Requests != 1 || s.Spans != 4 {
		t.Errorf("stats %+v, want 1 request, 4 spans", s)
	}

	c.mu.Lock()
	c.err = errors.New("disk full")
	c.mu.Unlock()
	_, err = client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(makeTraces(1, "g")))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("sink error: got %v, want Unavailable", err)
	}
}

func TestGRPCTooLarge(t *testing.T) {
	c := &collector{}
	r := startReceiver(t, Config{GRPCAddr: "127.0.0.1:0", MaxRequestBytes: 4 << 10}, c.sink)
	cc, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = ptraceotlp.NewGRPCClient(cc).Export(ctx, ptraceotlp.NewExportRequestFromTraces(makeTraces(200, "big")))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("got %v, want ResourceExhausted", err)
	}
	if len(c.got()) != 0 {
		t.Error("oversized export reached the sink")
	}
}

func TestStartRefusesRemote(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		wantErr     error
		wantWarning bool
	}{
		{name: "all interfaces", cfg: Config{HTTPAddr: "0.0.0.0:0"}, wantErr: ErrRemoteBind},
		{name: "empty host", cfg: Config{GRPCAddr: ":0"}, wantErr: ErrRemoteBind},
		{name: "host name", cfg: Config{HTTPAddr: "example.invalid:0"}, wantErr: ErrRemoteBind},
		{name: "allowed", cfg: Config{HTTPAddr: "0.0.0.0:0", AllowRemote: true}, wantWarning: true},
		{name: "loopback v4", cfg: Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"}},
		{name: "localhost", cfg: Config{HTTPAddr: "localhost:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReceiver(tt.cfg, (&collector{}).sink)
			err := r.Start(context.Background())
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Start: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer r.Stop(context.Background())
			if got := r.Warning() != ""; got != tt.wantWarning {
				t.Errorf("Warning() = %q, want a warning: %v", r.Warning(), tt.wantWarning)
			}
		})
	}
}

func TestStartPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	for _, cfg := range []Config{{HTTPAddr: addr}, {HTTPAddr: "127.0.0.1:0", GRPCAddr: addr}} {
		r := NewReceiver(cfg, (&collector{}).sink)
		err := r.Start(context.Background())
		if err == nil {
			r.Stop(context.Background())
			t.Fatalf("%+v: Start succeeded on a taken port", cfg)
		}
		if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "port is taken") {
			t.Errorf("error %q does not name %s as taken", err, addr)
		}
	}
}

func TestEndpointRealPort(t *testing.T) {
	r := startReceiver(t, Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"}, (&collector{}).sink)
	if ep := r.HTTPEndpoint(); !strings.HasPrefix(ep, "http://127.0.0.1:") || strings.HasPrefix(ep, "http://127.0.0.1:0/") || !strings.HasSuffix(ep, "/v1/traces") {
		t.Errorf("HTTPEndpoint() = %q", ep)
	}
	if a := r.GRPCAddr(); strings.HasSuffix(a, ":0") || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Errorf("GRPCAddr() = %q", a)
	}
}
