// Package events imports SGLang-Omni request-profile events into a bundle.
//
// SGLang-Omni's request profiler is started with POST /start_request_profile
// {"run_id","event_dir"} and stopped with POST /stop_request_profile (see
// Profiler). While it runs, every server process appends one JSON line per
// event to <event_dir>/events_<stage>_<pid>.jsonl:
//
//	{"request_id": "transcription-…", "stage": "thinker", "event_name": "scheduler_prefill_start",
//	 "timestamp_ns": 1764480000123456789, "run_id": "…", "pid": 4242, "metadata": {…}}
//
// timestamp_ns is wall clock, so events join the client's records and the
// server's spans on one time line. ImportDir copies every event into the
// bundle's events.jsonl; bundle.ReadAll reads them back.
package events
