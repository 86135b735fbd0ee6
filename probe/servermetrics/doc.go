// Package servermetrics is the probe that scrapes the server's own
// Prometheus /metrics while a capture runs (--probes metrics): the
// server's view of its queue and batch (vllm:num_requests_running,
// sglang:num_running_reqs, asr_running_requests), its token counters and
// its latency histograms, on the capture's clock and per pass.
//
// Every Interval (500 ms) the probe GETs the URL (Config.URL; auto: the
// target's base URL + /metrics) within Timeout (2 s), parses the text
// exposition format with a parser of its own (Parse; the library
// github.com/prometheus/common/expfmt was measured about 4x slower per
// scrape and loses the exposed order and label text, docs/PERFORMANCE.md)
// and appends to server_metrics.jsonl one "sample" record per series that
// changed since the last scrape (a histogram's
// _bucket, _sum and _count are series like any other) and one "scrape"
// record; failed scrapes are counted and said by Losses. At the end of
// every pass it writes one "period" record per series: mean, min, max and
// last of a gauge's samples inside the pass, the increase (delta) and
// rate per second of a cumulative series (counters, histogram buckets,
// _sum, _count). The increase counts from the newest scrape before the
// pass (Begin's baseline) to a scrape sent after the pass ended (End asks
// for it), so a counter of finished requests increases by exactly the
// pass's requests.
//
// Scrapes run one at a time on the probe's own goroutine; one that hangs
// is cut at Timeout and the next tick is skipped, never queued. Memory is
// bounded: at most MaxSeries series, answers of at most MaxBytes, and per
// pass the aggregates plus the scrapes of the last 60 s (at most 1024).
//
// Cost: on the 2-core CI VM parsing and recording a vLLM-shaped exposition
// of 1,008 series takes 2.8 ms of CPU (BenchmarkIngest), 0.6 % of a core
// at the default interval, and writes ~190 bytes of server_metrics.jsonl
// per series per scrape; the server renders /metrics once per scrape.
package servermetrics
