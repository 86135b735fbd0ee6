package spans

import (
	"cmp"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ClientService is the service.name of the spans asrprof itself writes (the
// client side of each request); joins use it to tell them from the server's.
const ClientService = "asrprof"

// Span kinds and status codes as Span reports them.
const (
	KindUnspecified = "UNSPECIFIED"
	KindInternal    = "INTERNAL"
	KindServer      = "SERVER"
	KindClient      = "CLIENT"
	KindProducer    = "PRODUCER"
	KindConsumer    = "CONSUMER"

	StatusUnset = "UNSET"
	StatusOK    = "OK"
	StatusError = "ERROR"
)

// Span is one span, flattened: ids in lowercase hex (ParentSpanID empty for
// a root), times in unix nanoseconds, Service from the resource's
// service.name, Attrs the span's own attributes as Go values (string, int64,
// float64, bool, []any, map[string]any, []byte; nil when none).
type Span struct {
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id,omitempty"`
	Name         string         `json:"name"`
	Service      string         `json:"service"`
	Kind         string         `json:"kind"`
	StartUnixNs  int64          `json:"start_unix_ns"`
	EndUnixNs    int64          `json:"end_unix_ns"`
	Attrs        map[string]any `json:"attrs,omitempty"`
	StatusCode   string         `json:"status_code"`
}

// IsClient reports whether s is one of asrprof's own client spans.
func (s *Span) IsClient() bool { return s.Service == ClientService }

// Flatten lists td's spans in the order they appear in td.
func Flatten(td ptrace.Traces) []Span {
	out := make([]Span, 0, td.SpanCount())
	return appendFlat(out, td)
}

func appendFlat(out []Span, td ptrace.Traces) []Span {
	var (
		lastTID  pcommon.TraceID
		lastTIDs string
	)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				sp := ss.At(k)
				// Spans of one trace tend to come together: they share
				// one trace id string.
				if tid := sp.TraceID(); tid != lastTID || lastTIDs == "" {
					lastTID, lastTIDs = tid, tid.String()
				}
				s := Span{
					TraceID:     lastTIDs,
					SpanID:      sp.SpanID().String(),
					Name:        sp.Name(),
					Service:     service,
					Kind:        enumName(kindNames[:], sp.Kind()),
					StartUnixNs: int64(sp.StartTimestamp()),
					EndUnixNs:   int64(sp.EndTimestamp()),
					StatusCode:  enumName(statusNames[:], sp.Status().Code()),
				}
				if p := sp.ParentSpanID(); !p.IsEmpty() {
					s.ParentSpanID = p.String()
				}
				if sp.Attributes().Len() > 0 {
					s.Attrs = sp.Attributes().AsRaw()
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// ReadAll reads every span of the span store at path, dropping a truncated
// last record. A missing file is an error wrapping fs.ErrNotExist.
func ReadAll(path string) ([]Span, error) {
	var out []Span
	_, err := Read(path, func(td ptrace.Traces) error {
		out = appendFlat(out, td)
		return nil
	})
	return out, err
}

// SortByStart orders spans by start time, then by span id.
func SortByStart(ss []Span) {
	slices.SortStableFunc(ss, func(a, b Span) int {
		return cmp.Or(cmp.Compare(a.StartUnixNs, b.StartUnixNs), strings.Compare(a.SpanID, b.SpanID))
	})
}

var (
	kindNames = [...]string{KindUnspecified, ptrace.SpanKindInternal: KindInternal, ptrace.SpanKindServer: KindServer,
		ptrace.SpanKindClient: KindClient, ptrace.SpanKindProducer: KindProducer, ptrace.SpanKindConsumer: KindConsumer}
	statusNames = [...]string{StatusUnset, ptrace.StatusCodeOk: StatusOK, ptrace.StatusCodeError: StatusError}
)

// enumName is names[v], or names[0] for a value it does not know.
func enumName[T ~int32](names []string, v T) string {
	if v < 0 || int(v) >= len(names) {
		return names[0]
	}
	return names[v]
}
