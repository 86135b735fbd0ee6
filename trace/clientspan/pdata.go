package clientspan

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// toTraces converts finished spans to pdata: one ResourceSpans with the
// tracer's resource, one ScopeSpans (ScopeName).
func toTraces(resource []kv, rs []record) ptrace.Traces {
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
	if r.client {
		sp.SetKind(ptrace.SpanKindClient)
	} else {
		sp.SetKind(ptrace.SpanKindInternal)
	}
	sp.SetStartTimestamp(pcommon.Timestamp(r.start))
	sp.SetEndTimestamp(pcommon.Timestamp(r.end))
	putAttrs(sp.Attributes(), r.attrs)
	if r.failed {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage(r.errMsg)
	}
}

func putAttrs(m pcommon.Map, kvs []kv) {
	m.EnsureCapacity(len(kvs))
	for _, a := range kvs {
		switch a.kind {
		case 'b':
			m.PutBool(a.key, a.i != 0)
		case 'i':
			m.PutInt(a.key, a.i)
		case 'f':
			m.PutDouble(a.key, a.f)
		default:
			m.PutStr(a.key, a.s)
		}
	}
}
