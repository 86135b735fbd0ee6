// Package join gives each client request its server-side view: the spans of
// its trace and the server's profile events for it.
//
// Spans join by trace id: the client sends a W3C traceparent with every
// request and a server that propagates it puts its spans in the client's
// trace. One request may have several server spans of the same name: vLLM
// splits long audio into chunks, one llm_request span each. As a fallback
// for servers that ignore traceparent, spans whose gen_ai.request.id is
// vLLM's transcribe-<X-Request-Id>[_<chunk>] join the request that sent
// that X-Request-Id.
//
// Events (SGLang-Omni's request profiler) join by the server's request id
// (model.Request.ServerRequestID, or RequestID when the server gave none).
package join
