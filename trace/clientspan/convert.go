package clientspan

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// toTraces converts finished SDK spans to pdata, one ResourceSpans per
// resource and one ScopeSpans per instrumentation scope.
func toTraces(ss []sdktrace.ReadOnlySpan) ptrace.Traces {
	td := ptrace.NewTraces()
	type key struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	rsOf := map[*resource.Resource]ptrace.ResourceSpans{}
	ssOf := map[key]ptrace.SpanSlice{}
	for _, s := range ss {
		res := s.Resource()
		rs, ok := rsOf[res]
		if !ok {
			rs = td.ResourceSpans().AppendEmpty()
			if res != nil {
				rs.SetSchemaUrl(res.SchemaURL())
				putAttrs(rs.Resource().Attributes(), res.Attributes())
			}
			rsOf[res] = rs
		}
		k := key{res, s.InstrumentationScope()}
		out, ok := ssOf[k]
		if !ok {
			sc := rs.ScopeSpans().AppendEmpty()
			sc.Scope().SetName(k.scope.Name)
			sc.Scope().SetVersion(k.scope.Version)
			sc.SetSchemaUrl(k.scope.SchemaURL)
			out = sc.Spans()
			ssOf[k] = out
		}
		putSpan(out.AppendEmpty(), s)
	}
	return td
}

func putSpan(sp ptrace.Span, s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	sp.SetTraceID(pcommon.TraceID(sc.TraceID()))
	sp.SetSpanID(pcommon.SpanID(sc.SpanID()))
	sp.TraceState().FromRaw(sc.TraceState().String())
	sp.SetFlags(uint32(sc.TraceFlags()))
	if p := s.Parent(); p.SpanID().IsValid() {
		sp.SetParentSpanID(pcommon.SpanID(p.SpanID()))
	}
	sp.SetName(s.Name())
	sp.SetKind(kind(s.SpanKind()))
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime()))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime()))
	putAttrs(sp.Attributes(), s.Attributes())
	sp.SetDroppedAttributesCount(uint32(s.DroppedAttributes()))
	switch st := s.Status(); st.Code {
	case codes.Error:
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage(st.Description)
	case codes.Ok:
		sp.Status().SetCode(ptrace.StatusCodeOk)
	}
	for _, ev := range s.Events() {
		e := sp.Events().AppendEmpty()
		e.SetName(ev.Name)
		e.SetTimestamp(pcommon.NewTimestampFromTime(ev.Time))
		putAttrs(e.Attributes(), ev.Attributes)
	}
	sp.SetDroppedEventsCount(uint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		pl := sp.Links().AppendEmpty()
		pl.SetTraceID(pcommon.TraceID(l.SpanContext.TraceID()))
		pl.SetSpanID(pcommon.SpanID(l.SpanContext.SpanID()))
		putAttrs(pl.Attributes(), l.Attributes)
	}
	sp.SetDroppedLinksCount(uint32(s.DroppedLinks()))
}

func kind(k oteltrace.SpanKind) ptrace.SpanKind {
	switch k {
	case oteltrace.SpanKindInternal:
		return ptrace.SpanKindInternal
	case oteltrace.SpanKindServer:
		return ptrace.SpanKindServer
	case oteltrace.SpanKindClient:
		return ptrace.SpanKindClient
	case oteltrace.SpanKindProducer:
		return ptrace.SpanKindProducer
	case oteltrace.SpanKindConsumer:
		return ptrace.SpanKindConsumer
	}
	return ptrace.SpanKindUnspecified
}

func putAttrs(m pcommon.Map, kvs []attribute.KeyValue) {
	m.EnsureCapacity(len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		switch kv.Value.Type() {
		case attribute.BOOL:
			m.PutBool(k, kv.Value.AsBool())
		case attribute.INT64:
			m.PutInt(k, kv.Value.AsInt64())
		case attribute.FLOAT64:
			m.PutDouble(k, kv.Value.AsFloat64())
		case attribute.STRING:
			m.PutStr(k, kv.Value.AsString())
		case attribute.BOOLSLICE:
			s := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsBoolSlice() {
				s.AppendEmpty().SetBool(v)
			}
		case attribute.INT64SLICE:
			s := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsInt64Slice() {
				s.AppendEmpty().SetInt(v)
			}
		case attribute.FLOAT64SLICE:
			s := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsFloat64Slice() {
				s.AppendEmpty().SetDouble(v)
			}
		case attribute.STRINGSLICE:
			s := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsStringSlice() {
				s.AppendEmpty().SetStr(v)
			}
		default:
			m.PutStr(k, kv.Value.Emit())
		}
	}
}
