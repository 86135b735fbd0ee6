package otlp

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TracesPath is the OTLP/HTTP traces path.
const TracesPath = "/v1/traces"

const (
	ctProto = "application/x-protobuf"
	ctJSON  = "application/json"
)

type httpHandler struct {
	r *Receiver
	// bodies are reused between requests: pdata copies what it keeps.
	bodies sync.Pool
}

var errTooLarge = errors.New("request body too large")

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := h.r
	if req.URL.Path != TracesPath {
		r.rejected.Add(1)
		writeStatus(w, ctJSON, http.StatusNotFound, codes.NotFound, "not found: OTLP traces are accepted at "+TracesPath)
		return
	}
	r.requests.Add(1)
	if req.Method != http.MethodPost {
		r.rejected.Add(1)
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, ctJSON, http.StatusMethodNotAllowed, codes.Unimplemented, req.Method+" not allowed: use POST")
		return
	}
	ct := contentType(req.Header.Get("Content-Type"))
	if ct == "" {
		r.rejected.Add(1)
		writeStatus(w, ctJSON, http.StatusUnsupportedMediaType, codes.InvalidArgument,
			"unsupported content type "+strconv.Quote(req.Header.Get("Content-Type"))+": use "+ctProto+" or "+ctJSON)
		return
	}
	var gz bool
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz = true
	default:
		r.rejected.Add(1)
		writeStatus(w, ct, http.StatusUnsupportedMediaType, codes.InvalidArgument, "unsupported content encoding "+strconv.Quote(enc)+": use gzip or none")
		return
	}
	max := r.cfg.MaxRequestBytes
	tooLarge := func() {
		r.tooLarge.Add(1)
		writeStatus(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "request body exceeds "+strconv.FormatInt(max, 10)+" bytes")
	}
	if req.ContentLength > max {
		tooLarge()
		return
	}
	buf := h.bodies.Get().(*bytes.Buffer)
	defer h.putBuf(buf)
	err := readBody(buf, req.Body, gz, max)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			tooLarge()
			return
		}
		r.malformed.Add(1)
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "reading body: "+err.Error())
		return
	}
	ereq := ptraceotlp.NewExportRequest()
	if ct == ctProto {
		err = ereq.UnmarshalProto(buf.Bytes())
	} else {
		err = ereq.UnmarshalJSON(buf.Bytes())
	}
	if err != nil {
		r.malformed.Add(1)
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "decoding OTLP traces: "+err.Error())
		return
	}
	if err := r.deliver(ereq.Traces()); err != nil {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, ct, http.StatusServiceUnavailable, codes.Unavailable, "storing spans: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	if ct == ctJSON {
		w.Write(emptyJSONResponse)
	} // an empty ExportTraceServiceResponse is zero protobuf bytes
}

var emptyJSONResponse, _ = ptraceotlp.NewExportResponse().MarshalJSON()

// contentType maps a Content-Type header to ctProto or ctJSON ("" when it is
// neither).
func contentType(h string) string {
	mt, _, err := mime.ParseMediaType(h)
	if err != nil {
		return ""
	}
	switch mt {
	case ctProto, "application/protobuf":
		return ctProto
	case ctJSON:
		return ctJSON
	}
	return ""
}

func readBody(buf *bytes.Buffer, body io.Reader, gz bool, max int64) error {
	if gz {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return err
		}
		defer zr.Close()
		body = zr
	}
	n, err := buf.ReadFrom(io.LimitReader(body, max+1))
	if err != nil {
		return err
	}
	if n > max {
		return errTooLarge
	}
	return nil
}

func (h *httpHandler) putBuf(b *bytes.Buffer) {
	if b.Cap() > 4<<20 {
		return // let a one-off huge body go
	}
	b.Reset()
	h.bodies.Put(b)
}

// writeStatus answers an error with a google.rpc.Status body in the
// request's encoding, as OTLP/HTTP specifies.
func writeStatus(w http.ResponseWriter, ct string, httpCode int, code codes.Code, msg string) {
	var b []byte
	if ct == ctProto {
		b, _ = proto.Marshal(&spb.Status{Code: int32(code), Message: msg})
	} else {
		ct = ctJSON
		b, _ = json.Marshal(struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		}{int32(code), msg})
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(httpCode)
	w.Write(b)
}
