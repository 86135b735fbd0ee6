package columns

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/spans"
)

// Spans is the spans table in memory: every span of spans.otlp, client
// spans included, in store order. RequestIndex is the request the span
// joins (trace/join's rules; -1 for none). Attributes holds each span's
// attributes as a JSON object's text ("" for none); Attr reads one.
type Spans struct {
	RequestIndex []int32
	TraceID      []string
	SpanID       []string
	ParentSpanID []string
	Name         Strings
	Service      Strings
	Kind         Strings
	StartUnixNs  []int64
	EndUnixNs    []int64
	StatusCode   Strings
	Attributes   []string
	// AttrMaps, when set, holds the attributes as values instead (spans
	// made from a request's joined spans, not from the table).
	AttrMaps []map[string]any
}

func (s *Spans) serverNames() []string {
	client := s.Service.Code(spans.ClientService)
	return s.Name.distinct(func(i int) bool { return s.Service.Codes[i] != client })
}

// Len is the number of spans.
func (s *Spans) Len() int { return len(s.StartUnixNs) }

// IsClient reports whether span i is one of asrprof's own client spans.
func (s *Spans) IsClient(i int) bool { return s.Service.At(i) == spans.ClientService }

// Attr returns the number in attribute key of span i; ok is false when the
// span has no such attribute or it is not a number.
func (s *Spans) Attr(i int, key string) (float64, bool) {
	if s.AttrMaps != nil {
		switch v := s.AttrMaps[i][key].(type) {
		case float64:
			return v, true
		case int64:
			return float64(v), true
		}
		return 0, false
	}
	if v, ok := s.attrValue(i, key, 'n'); ok {
		if f, err := strconv.ParseFloat(string(v.raw), 64); err == nil {
			return f, true
		}
	}
	return 0, false
}

// AttrString returns the string in attribute key of span i; ok is false
// when the span has no such attribute or it is not a string.
func (s *Spans) AttrString(i int, key string) (string, bool) {
	if s.AttrMaps != nil {
		v, ok := s.AttrMaps[i][key].(string)
		return v, ok
	}
	if v, ok := s.attrValue(i, key, 's'); ok {
		if x, err := v.str(); err == nil {
			return x, true
		}
	}
	return "", false
}

// attrValue finds attribute key of span i, of the kind of value kind, in
// the span's attributes' JSON text (whose keys are distinct).
func (s *Spans) attrValue(i int, key string, kind byte) (value, bool) {
	var out value
	found := false
	if a := s.Attributes[i]; a != "" {
		scanObject([]byte(a), func(k []byte, v value) error {
			if !found && v.kind == kind && string(k) == key {
				out, found = v, true
			}
			return nil
		})
	}
	return out, found
}

// ReadSpansOTLP reads spans.otlp (absent: no spans) and joins its spans
// to reqs.
func ReadSpansOTLP(path string, reqs []model.Request) (*Spans, error) {
	chunks, err := spans.ReadChunks(path)
	if err != nil {
		return nil, err
	}
	owner := join.SpanOwners(reqs, chunks)
	n := len(owner)
	out := &Spans{RequestIndex: owner, TraceID: make([]string, 0, n), SpanID: make([]string, 0, n),
		ParentSpanID: make([]string, 0, n), StartUnixNs: make([]int64, 0, n), EndUnixNs: make([]int64, 0, n),
		Attributes: make([]string, 0, n)}
	var name, svc, kind, status dictBuilder
	var buf []byte
	for _, c := range chunks {
		for k := range c {
			s := &c[k]
			out.TraceID = append(out.TraceID, s.TraceID)
			out.SpanID = append(out.SpanID, s.SpanID)
			out.ParentSpanID = append(out.ParentSpanID, s.ParentSpanID)
			name.addString(s.Name)
			svc.addString(s.Service)
			kind.addString(s.Kind)
			status.addString(s.StatusCode)
			out.StartUnixNs = append(out.StartUnixNs, s.StartUnixNs)
			out.EndUnixNs = append(out.EndUnixNs, s.EndUnixNs)
			buf = appendAttrs(buf[:0], s.Attrs)
			out.Attributes = append(out.Attributes, string(buf))
		}
	}
	out.Name, out.Service = mergeStrings([]*dictBuilder{&name}), mergeStrings([]*dictBuilder{&svc})
	out.Kind, out.StatusCode = mergeStrings([]*dictBuilder{&kind}), mergeStrings([]*dictBuilder{&status})
	return out, nil
}

// appendAttrs appends attrs as a JSON object, keys sorted ("" for none):
// strings, numbers and booleans by hand, anything else by encoding/json
// (a million spans' attributes through json.Marshal took seconds).
func appendAttrs(b []byte, attrs map[string]any) []byte {
	if len(attrs) == 0 {
		return b
	}
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(attrs)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		switch v := attrs[k].(type) {
		case string:
			b = appendJSONString(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendFloat(b, v, 'g', -1, 64)
			}
		default:
			j, err := json.Marshal(v)
			if err != nil {
				j = []byte("null")
			}
			b = append(b, j...)
		}
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

type spanRow struct {
	RequestIndex *int32  `parquet:"request_index,optional"`
	TraceID      string  `parquet:"trace_id"`
	SpanID       string  `parquet:"span_id"`
	ParentSpanID string  `parquet:"parent_span_id"`
	Name         string  `parquet:"name,dict"`
	Service      string  `parquet:"service,dict"`
	Kind         string  `parquet:"kind,dict"`
	StartUnixNs  int64   `parquet:"start_unix_ns"`
	EndUnixNs    int64   `parquet:"end_unix_ns"`
	DurationS    float64 `parquet:"duration_s"`
	StatusCode   string  `parquet:"status_code,dict"`
	Attributes   *string `parquet:"attributes,optional"` // JSON text (a json tag wrote nulls)
}

func writeSpans(path string, s *Spans, meta map[string]string) error {
	return writeRows(path, meta, s.Len(), func(i int) spanRow {
		r := spanRow{TraceID: s.TraceID[i], SpanID: s.SpanID[i], ParentSpanID: s.ParentSpanID[i],
			Name: s.Name.At(i), Service: s.Service.At(i), Kind: s.Kind.At(i),
			StartUnixNs: s.StartUnixNs[i], EndUnixNs: s.EndUnixNs[i],
			DurationS: float64(s.EndUnixNs[i]-s.StartUnixNs[i]) / 1e9, StatusCode: s.StatusCode.At(i)}
		if s.RequestIndex[i] >= 0 {
			r.RequestIndex = &s.RequestIndex[i]
		}
		if s.Attributes[i] != "" {
			r.Attributes = &s.Attributes[i]
		}
		return r
	})
}

// ReadSpans reads the columns of spans.parquet that the stage engine needs
// (request_index, span_id, name, service, start_unix_ns, end_unix_ns,
// attributes).
func ReadSpans(path string) (*Spans, error) {
	cols, err := readColumns(path, []string{"request_index", "span_id", "name", "service", "start_unix_ns", "end_unix_ns", "attributes"}, nil)
	if err != nil {
		return nil, err
	}
	return &Spans{RequestIndex: cols[0].int32s(-1), SpanID: cols[1].str.values(), Name: cols[2].str, Service: cols[3].str,
		StartUnixNs: cols[4].int64s(), EndUnixNs: cols[5].int64s(), Attributes: cols[6].str.values()}, nil
}
