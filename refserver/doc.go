// Package refserver holds the Go tests of the asrprof reference ASR server.
//
// The server itself is refserver.py in this folder: a PocketSphinx
// speech-to-text server (Debian's /usr/bin/python3 with python3-pocketsphinx)
// shaped like the SGLang-Omni pipeline, with an HTTP front end, a build pool,
// an admission queue and one scheduler thread, instrumented with OTLP spans,
// SGLang-Omni request-profile events and Prometheus metrics. With --engine
// whisper it serves a Whisper in plain PyTorch (whisper_engine.py,
// whisper_model.py) with continuously batched decode steps. The package has
// no Go API; its tests start the Python server and check its protocol and
// telemetry, and skip when pocketsphinx (or, for the whisper tests, torch)
// is not installed. docs/REFSERVER.md describes the server.
package refserver
