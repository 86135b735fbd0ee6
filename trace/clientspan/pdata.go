package clientspan

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
)

// toTraces converts finished spans to pdata: one ResourceSpans with the
// tracer's resource, one ScopeSpans (ScopeName).
func toTraces(resource []attribute.KeyValue, rs []record) ptrace.Traces {
	td := ptrace.NewTraces()
	r := td.ResourceSpans().AppendEmpty()
	putAttrs(r.Resource().Attributes(), resource)
	sc := r.ScopeSpans().AppendEmpty()
	sc.Scope().SetName(ScopeName)
	out := sc.Spans()
	out.EnsureCapacity(len(rs))
	for i := range rs {
		putSpan(out.AppendEmpty(), &rs[i])
	}
	return td
}

func putSpan(sp ptrace.Span, r *record) {
	sp.SetTraceID(pcommon.TraceID(r.traceID))
	sp.SetSpanID(pcommon.SpanID(r.spanID))
	sp.SetFlags(1) // sampled
	if r.parentID != ([8]byte{}) {
		sp.SetParentSpanID(pcommon.SpanID(r.parentID))
	}
	sp.SetName(r.name)
	sp.SetKind(r.kind)
	sp.SetStartTimestamp(pcommon.Timestamp(r.start))
	sp.SetEndTimestamp(pcommon.Timestamp(r.end))
	putAttrs(sp.Attributes(), r.attrs)
	if r.errMsg != "" {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage(r.errMsg)
	}
}

// putAttrs puts kvs in m; types other than bool and numbers as text.
func putAttrs(m pcommon.Map, kvs []attribute.KeyValue) {
	m.EnsureCapacity(len(kvs))
	for _, a := range kvs {
		switch k := string(a.Key); a.Value.Type() {
		case attribute.BOOL:
			m.PutBool(k, a.Value.AsBool())
		case attribute.INT64:
			m.PutInt(k, a.Value.AsInt64())
		case attribute.FLOAT64:
			m.PutDouble(k, a.Value.AsFloat64())
		default:
			m.PutStr(k, a.Value.String())
		}
	}
}
