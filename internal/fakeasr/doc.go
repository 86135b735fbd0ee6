// Package fakeasr provides a fake speech-to-text server for tests of the
// benchmark driver and of any package that talks to a transcription
// server.
//
// [NewServer] starts a loopback httptest server that speaks the
// OpenAI-compatible transcription API (POST /v1/audio/transcriptions,
// multipart, JSON or text answers, and SSE streams in the SGLang-Omni or
// vLLM dialect) and also answers GET /health and GET /v1/models, and with
// Config.Metrics GET /metrics (vLLM's gauge, counter and histogram names in
// the Prometheus text format, from the requests it is serving). Its
// [Config] sets the transcript, the service time (slept, or spun on one
// CPU-bound worker thread), a capacity limit (a server that queues), a
// slowdown after N requests, an unhealthy /health, and failures injected
// per request number ([Failure]: status codes, connection resets, hangs,
// malformed JSON or SSE, SSE error events). [Server.Requests] returns what
// the server received, so a test can check the headers and form fields a
// client really sent.
//
// [Command] and [Main] run the same server as a child process (the test
// binary re-executed), for tests of server lifecycles: start-up failures,
// a child that ignores SIGTERM, a failure on the n-th start.
//
// [NewWSServer] starts a fake realtime transcription server (WebSocket) in
// Fun-ASR's protocol or one of the openai-realtime dialects (OpenAI GA,
// vLLM, SGLang-Omni): it reveals its transcript word by word as audio
// arrives, and can delay its updates, leave out audio positions, close a
// session midway or never send the final message. [WSServer.Sessions]
// returns what each session sent.
//
// [NewNoop] starts the no-op server, [NoopHandler], which reads the body
// and answers {"text":"ok"}, for benchmarks of the client side; the
// command noopserver (internal/fakeasr/cmd/noopserver) serves it to `make
// bench`.
//
// Servers are closed by t.Cleanup; a hanging or waiting handler is released
// when the server closes or the client goes away.
package fakeasr
