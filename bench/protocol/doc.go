// Package protocol holds the HTTP clients that send one transcription
// request to a speech-to-text server and record what happened and when.
//
// A [Client] is built once per run with [New] (by protocol name) or
// [NewOpenAI], and its Do method is called concurrently by the load
// driver, one [Job] per request. Do never panics and always returns a
// [Result] whose End is set; failures are reported in Result.Err and
// classified in Result.ErrKind with one of the Kind constants, so the
// caller can count them without inspecting error strings.
//
// Four protocols are known:
//
//   - "openai": a multipart POST to {target}/v1/audio/transcriptions
//     answered by JSON {"text": ...} or by plain text.
//   - "openai-stream": the same request with stream=true, answered by
//     Server-Sent Events in either the SGLang-Omni dialect
//     (transcript.text.delta / transcript.text.done / [DONE]) or the vLLM
//     dialect (transcription.chunk with choices[].delta.content, then
//     [DONE]). Both are read by the same decoder.
//   - "funasr-ws": a WebSocket session in Fun-ASR's realtime protocol
//     ([NewFunASR]).
//   - "openai-realtime": a WebSocket session in OpenAI's GA, vLLM's or
//     SGLang-Omni's realtime transcription dialect ([NewRealtime]).
//
// The realtime clients stream the audio as PCM16 frames paced at real time
// (or not, Options.Pace) and fill Result.Realtime with the session's
// timings: first update, end of input, final message, per-update lags
// (docs/REALTIME.md). They decode each sample's audio once per client and
// keep the PCM by Job.SampleID.
//
// Timings in [Result] are time.Now readings taken on the client: the end
// of the upload and the first response byte come from net/http/httptrace
// hooks (which [H1Transport] calls as net/http's transport does), first
// token and chunk arrivals from the SSE decoder.
//
// For a load test, share one *http.Client built on [NewH1Transport]
// between all requests: http:// requests go over its own keep-alive
// HTTP/1.1 connections, read on the caller's goroutine, the rest through
// its Fallback, net/http's transport from [NewTransport] (give that a
// WriteBufferSize from [WriteBufferFor] the largest upload). Build each
// sample's body once with the client's [Preparer] method, passing it as
// Job.Upload on every request of that sample (the load driver does both
// through capture): the body is then neither rebuilt nor copied per
// request, and is written with the request's head in one writev(2) (one
// write(2) through net/http's transport).
package protocol
