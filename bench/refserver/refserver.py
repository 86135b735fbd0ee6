#!/usr/bin/python3
"""asrprof reference ASR server.

A small speech-to-text server with the shape of the SGLang-Omni / vLLM
serving pipelines, built on PocketSphinx (US English) so that it runs on any
CPU.  It exists so that asrprof has a real, instrumented target to profile:
a real recognizer with real errors, a real admission queue and a single
scheduler thread that is the bottleneck, like the host-bound servers of the
seed study.

Pipeline (see docs/REFSERVER.md):

    HTTP thread (asr-http)      parse the multipart upload
      -> build pool (asr-build-N)   decode WAV/FLAC, resample to 16 kHz mono
      -> admission queue            waits for a free decoder slot
      -> scheduler (asr-sched)      admit up to --max-running-requests,
                                    first step ("first forward"), then
                                    round-robin decode steps until done
      -> HTTP thread                JSON / text / SSE answer

Telemetry: OTLP/HTTP JSON spans (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
exporter thread asr-otlp), SGLang-Omni request-profile event files
(POST /start_request_profile, /stop_request_profile) and Prometheus /metrics.

Standard library plus Debian's python3-pocketsphinx only.  Run with
/usr/bin/python3 bench/refserver/refserver.py --port 8000
"""

import argparse
import base64
import collections
import ctypes
import ctypes.util
import http.client
import http.server
import io
import json
import os
import queue
import hashlib
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
import warnings
import wave

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop  # removed in Python 3.13; sox is the fallback.
    except ImportError:  # pragma: no cover - newer Pythons
        audioop = None

MODEL_ID = "pocketsphinx-en-us"
SERVICE_NAME = "asrprof-refserver"
STAGE = "asr"
SAMPLE_RATE = 16000
MODEL_DIR = "/usr/share/pocketsphinx/model/en-us"
WARMUP_WAV = ("/usr/share/pocketsphinx/test/data/librivox/"
              "sense_and_sensibility_01_austen_64kb-0880.wav")
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
LANGUAGES = {"", "en", "eng", "english", "en-us", "en_us"}
RESPONSE_FORMATS = {"json", "text", "verbose_json"}
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# ---------------------------------------------------------------- threads

_PR_SET_NAME = 15
_libc = None


def set_thread_name(name):
    """Set the OS name (comm) of the calling thread; CPython < 3.14 doesn't."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6",
                                use_errno=True)
        _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def now_ns():
    return time.time_ns()


class HTTPError(Exception):
    """An error answered to the client as {"error": {...}}."""

    def __init__(self, status, message, err_type="invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


# ---------------------------------------------------------------- metrics


class Metrics:
    """Counters, gauges and histograms rendered as Prometheus text."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = collections.Counter()  # by HTTP status
        self.audio_seconds = 0.0
        self.hist = {}  # stage -> [bucket counts..., sum, count]
        self.spans_exported = 0
        self.spans_dropped = collections.Counter()  # by reason
        self.events_written = 0

    def count_request(self, status):
        with self.lock:
            self.requests[str(status)] += 1

    def observe(self, stage, seconds):
        if seconds is None or seconds < 0:
            return
        with self.lock:
            h = self.hist.get(stage)
            if h is None:
                h = self.hist[stage] = [0] * len(STAGE_BUCKETS) + [0.0, 0]
            for i, b in enumerate(STAGE_BUCKETS):
                if seconds <= b:
                    h[i] += 1
            h[-2] += seconds
            h[-1] += 1

    def drop_spans(self, reason, n):
        with self.lock:
            self.spans_dropped[reason] += n

    def render(self, gauges):
        out = []

        def head(name, typ, help_):
            out.append("# HELP %s %s" % (name, help_))
            out.append("# TYPE %s %s" % (name, typ))

        for name, help_, value in gauges:
            head(name, "gauge", help_)
            out.append("%s %s" % (name, value))
        with self.lock:
            head("asr_requests_total", "counter",
                 "Transcription requests answered, by HTTP status.")
            for status in sorted(self.requests):
                out.append('asr_requests_total{status="%s"} %d'
                           % (status, self.requests[status]))
            head("asr_audio_seconds_total", "counter",
                 "Seconds of audio transcribed.")
            out.append("asr_audio_seconds_total %.3f" % self.audio_seconds)
            head("asr_stage_duration_seconds", "histogram",
                 "Per-request stage durations (build, queue, first_forward, "
                 "decode, e2e).")
            for stage in sorted(self.hist):
                h = self.hist[stage]
                for i, b in enumerate(STAGE_BUCKETS):
                    out.append('asr_stage_duration_seconds_bucket{stage="%s",le="%g"} %d'
                               % (stage, b, h[i]))
                out.append('asr_stage_duration_seconds_bucket{stage="%s",le="+Inf"} %d'
                           % (stage, h[-1]))
                out.append('asr_stage_duration_seconds_sum{stage="%s"} %.6f'
                           % (stage, h[-2]))
                out.append('asr_stage_duration_seconds_count{stage="%s"} %d'
                           % (stage, h[-1]))
            head("asr_otlp_spans_exported_total", "counter",
                 "Spans accepted by the OTLP collector.")
            out.append("asr_otlp_spans_exported_total %d" % self.spans_exported)
            head("asr_otlp_spans_dropped_total", "counter",
                 "Spans dropped (queue_full: exporter queue full; "
                 "export_failed: collector unreachable or refused).")
            for reason in ("queue_full", "export_failed"):
                out.append('asr_otlp_spans_dropped_total{reason="%s"} %d'
                           % (reason, self.spans_dropped[reason]))
            head("asr_profile_events_written_total", "counter",
                 "Request-profile event lines written.")
            out.append("asr_profile_events_written_total %d" % self.events_written)
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------- OTLP spans


def _otlp_value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _otlp_attrs(attrs):
    return [{"key": k, "value": _otlp_value(v)} for k, v in attrs.items()]


class SpanExporter:
    """Batches finished spans and POSTs them as OTLP/HTTP JSON.

    record() never blocks: spans go into a bounded queue and are dropped
    (counted in /metrics) when it is full.  A failed export drops its batch,
    also counted.  Disabled when no endpoint is configured.
    """

    def __init__(self, endpoint, metrics, max_queue=4096, max_batch=512,
                 interval_s=0.2, timeout_s=2.0):
        self.endpoint = endpoint
        self.metrics = metrics
        self.max_batch = max_batch
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.q = queue.Queue(maxsize=max_queue)
        self.stopping = threading.Event()
        self.thread = None
        self.conn = None
        if endpoint:
            u = urllib.parse.urlsplit(endpoint)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an "
                                 "http(s) URL, got %r" % endpoint)
            self.scheme = u.scheme
            self.host = u.hostname
            self.port = u.port or (443 if u.scheme == "https" else 80)
            self.path = (u.path or "/v1/traces") + ("?" + u.query if u.query else "")
            self.thread = threading.Thread(target=self._run, name="asr-otlp",
                                           daemon=True)
            self.thread.start()

    @property
    def enabled(self):
        return self.thread is not None

    def record(self, span):
        if not self.enabled:
            return
        try:
            self.q.put_nowait(span)
        except queue.Full:
            self.metrics.drop_spans("queue_full", 1)

    def _run(self):
        set_thread_name("asr-otlp")
        while True:
            batch = []
            deadline = time.monotonic() + self.interval_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    batch.append(self.q.get(timeout=left))
                except queue.Empty:
                    break
            if batch:
                self._export(batch)
            if self.stopping.is_set() and self.q.empty():
                return

    def _export(self, batch):
        body = json.dumps(self._encode(batch), separators=(",", ":")).encode()
        try:
            if self.conn is None:
                cls = (http.client.HTTPSConnection if self.scheme == "https"
                       else http.client.HTTPConnection)
                self.conn = cls(self.host, self.port, timeout=self.timeout_s)
            self.conn.request("POST", self.path, body=body,
                              headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            resp.read()
            ok = 200 <= resp.status < 300
        except (OSError, http.client.HTTPException):
            ok = False
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
        if ok:
            with self.metrics.lock:
                self.metrics.spans_exported += len(batch)
        else:
            self.metrics.drop_spans("export_failed", len(batch))

    @staticmethod
    def _encode(batch):
        spans = []
        for s in batch:
            d = {
                "traceId": s["trace_id"],
                "spanId": s["span_id"],
                "name": s["name"],
                "kind": s["kind"],
                "startTimeUnixNano": str(s["start"]),
                "endTimeUnixNano": str(max(s["end"], s["start"])),
                "attributes": _otlp_attrs(s["attrs"]),
                "status": s.get("status", {"code": 0}),
            }
            if s.get("parent"):
                d["parentSpanId"] = s["parent"]
            spans.append(d)
        return {"resourceSpans": [{
            "resource": {"attributes": _otlp_attrs({
                "service.name": SERVICE_NAME,
                "service.instance.id": "%s-%d" % (socket.gethostname(), os.getpid()),
                "process.pid": os.getpid(),
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "asrprof-refserver",
            })},
            "scopeSpans": [{
                "scope": {"name": "asrprof.refserver", "version": "1"},
                "spans": spans,
            }],
        }]}

    def close(self, timeout_s=1.0):
        if self.enabled:
            self.stopping.set()
            self.thread.join(timeout_s)


def new_trace_id():
    return os.urandom(16).hex()


def new_span_id():
    return os.urandom(8).hex()


_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(value):
    """Return (trace_id, parent_span_id) from a W3C traceparent, or None."""
    m = _TRACEPARENT.match((value or "").strip().lower())
    if not m or m.group(1) == "ff":
        return None
    if m.group(2) == "0" * 32 or m.group(3) == "0" * 16:
        return None
    return m.group(2), m.group(3)


# ---------------------------------------------------------------- request profile


class RequestProfiler:
    """SGLang-Omni request-profile events: events_<stage>_<pid>.jsonl."""

    def __init__(self, metrics, stage=STAGE):
        self.metrics = metrics
        self.stage = stage
        self.lock = threading.Lock()
        self.file = None
        self.run_id = None
        self.path = None
        self.count = 0

    def start(self, run_id, event_dir):
        os.makedirs(event_dir, exist_ok=True)
        path = os.path.join(event_dir, "events_%s_%d.jsonl" % (self.stage, os.getpid()))
        f = open(path, "a", buffering=1, encoding="utf-8")
        with self.lock:
            if self.file is not None:
                self.file.close()
            self.file, self.run_id, self.path, self.count = f, run_id, path, 0
        return path

    def stop(self):
        with self.lock:
            f, path, count = self.file, self.path, self.count
            self.file = self.run_id = None
        if f is not None:
            f.close()
        return path, count

    def emit(self, request_id, event_name, ts_ns, metadata=None):
        if self.file is None:  # fast path, profiling off
            return
        with self.lock:
            if self.file is None:
                return
            line = json.dumps({
                "request_id": request_id,
                "stage": self.stage,
                "event_name": event_name,
                "timestamp_ns": ts_ns,
                "run_id": self.run_id,
                "pid": os.getpid(),
                "metadata": metadata or {},
            }, separators=(",", ":"))
            self.file.write(line + "\n")
            self.count += 1
        with self.metrics.lock:
            self.metrics.events_written += 1


# ---------------------------------------------------------------- audio


class AudioError(Exception):
    pass


def _run_converter(cmd, data):
    try:
        p = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise AudioError("%s is not installed" % cmd[0])
    except subprocess.TimeoutExpired:
        raise AudioError("audio conversion timed out")
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip().splitlines()
        raise AudioError("cannot decode audio: %s" % (msg[-1] if msg else "converter failed"))
    return p.stdout


def _sox_to_pcm(data, in_type):
    return _run_converter(["sox", "-t", in_type, "-", "-t", "raw", "-r", str(SAMPLE_RATE),
                           "-c", "1", "-b", "16", "-e", "signed-integer", "-L", "-"], data)


def _wave_to_pcm(data):
    with wave.open(io.BytesIO(data), "rb") as w:
        nch, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        frames = w.readframes(w.getnframes())
    if audioop is None or nch > 2 or width not in (1, 2, 3, 4):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if width == 1:  # 8-bit WAV is unsigned
            frames = audioop.bias(frames, 1, -128)
        if width != 2:
            frames = audioop.lin2lin(frames, width, 2)
        if nch == 2:
            frames = audioop.tomono(frames, 2, 0.5, 0.5)
        if rate != SAMPLE_RATE:
            frames, _ = audioop.ratecv(frames, 2, 1, rate, SAMPLE_RATE, None)
    return frames


def decode_audio(data):
    """Return 16 kHz mono signed 16-bit little-endian PCM from an upload."""
    if len(data) < 12:
        raise AudioError("file is too short to be audio")
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        pcm = None
        try:
            pcm = _wave_to_pcm(data)
        except (wave.Error, EOFError):
            pcm = None  # float or extensible WAV: let sox try
        if pcm is None:
            pcm = _sox_to_pcm(data, "wav")
    elif data[:4] == b"fLaC":
        try:
            pcm = _sox_to_pcm(data, "flac")
        except AudioError:
            wav = _run_converter(["flac", "-d", "-c", "-s", "-"], data)
            pcm = _wave_to_pcm(wav) or _sox_to_pcm(wav, "wav")
    elif data[:4] == b"OggS":
        pcm = _sox_to_pcm(data, "ogg")
    else:
        raise AudioError("unsupported or unrecognized audio format (send WAV or FLAC)")
    if len(pcm) < 2:
        raise AudioError("audio has no samples")
    return pcm[: len(pcm) & ~1]


# ---------------------------------------------------------------- multipart


def parse_multipart(body, content_type):
    """Parse multipart/form-data into {name: (filename or None, bytes)}."""
    m = re.search(r'boundary="?([^";]+)"?', content_type or "", re.I)
    if not m:
        raise HTTPError(400, "multipart/form-data request without a boundary")
    delim = b"--" + m.group(1).encode("latin-1")
    fields = {}
    pos = body.find(delim)
    if pos < 0:
        raise HTTPError(400, "malformed multipart body: boundary not found")
    pos += len(delim)
    while True:
        if body[pos:pos + 2] == b"--":
            break  # closing delimiter
        if body[pos:pos + 2] == b"\r\n":
            pos += 2
        hdr_end = body.find(b"\r\n\r\n", pos)
        if hdr_end < 0:
            raise HTTPError(400, "malformed multipart body: part without headers")
        headers = body[pos:hdr_end].decode("utf-8", "replace")
        nxt = body.find(b"\r\n" + delim, hdr_end + 4)
        if nxt < 0:
            raise HTTPError(400, "malformed multipart body: unterminated part")
        content = body[hdr_end + 4:nxt]
        name = filename = None
        for line in headers.split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                n = re.search(r'\bname="([^"]*)"', line)
                f = re.search(r'\bfilename="([^"]*)"', line)
                name = n.group(1) if n else None
                filename = f.group(1) if f else None
        if name is not None:
            fields[name] = (filename, content)
        pos = nxt + 2 + len(delim)
    return fields


def _field_text(fields, name, default=""):
    v = fields.get(name)
    return v[1].decode("utf-8", "replace").strip() if v else default


# ---------------------------------------------------------------- requests


class Request:
    """One transcription request as it moves through the pipeline."""

    realtime = False  # StreamSession overrides

    def __init__(self, request_id, trace_id, parent_span_id, stream):
        self.id = request_id
        self.trace_id = trace_id
        self.parent_span_id = parent_span_id
        self.span_id = new_span_id()
        self.stream = stream
        self.upload = b""
        self.pcm = b""
        self.audio_seconds = 0.0
        self.t = {}  # event name -> wall ns
        self.out = queue.Queue()  # ("built",) ("delta", s) ("done", text) ("error", status, msg)
        self.cancelled = False
        # scheduler state
        self.decoder = None
        self.offset = 0
        self.steps = 0
        self.batch_at_admission = 0
        self.prev_words = []
        self.emitted = []
        self.text = ""


class Pipeline:
    """Build pool, admission queue and the scheduler thread."""

    def __init__(self, args, metrics, profiler):
        self.args = args
        self.metrics = metrics
        self.profiler = profiler
        self.chunk_bytes = max(1, int(SAMPLE_RATE * args.chunk_ms / 1000)) * 2
        self.interval_bytes = max(1, int(SAMPLE_RATE * args.decode_interval)) * 2
        self.build_q = queue.Queue()
        self.build_lock = threading.Lock()
        self.build_pending = 0
        self.adm_cond = threading.Condition()
        self.admission = collections.deque()
        self.running = []
        self.decoders = []
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.threads = []

    # -- lifecycle

    def load_decoders(self):
        from pocketsphinx import pocketsphinx as ps
        for _ in range(self.args.max_running_requests):
            cfg = ps.Decoder.default_config()
            cfg.set_string("-hmm", os.path.join(MODEL_DIR, "en-us"))
            cfg.set_string("-lm", os.path.join(MODEL_DIR, "en-us.lm.bin"))
            cfg.set_string("-dict", os.path.join(MODEL_DIR, "cmudict-en-us.dict"))
            cfg.set_string("-logfn", os.devnull)
            dec = ps.Decoder(cfg)
            self._warm_up(dec)
            self.decoders.append(dec)

    @staticmethod
    def _warm_up(dec):
        """Decode one short clip so a decoder's first request isn't special.

        PocketSphinx adapts its cepstral mean across utterances; a fresh
        decoder's first answer differs from later ones for the same audio.
        """
        try:
            with wave.open(WARMUP_WAV, "rb") as w:
                pcm = w.readframes(min(w.getnframes(), 2 * SAMPLE_RATE))
        except (OSError, wave.Error, EOFError):
            return
        dec.start_utt()
        dec.process_raw(pcm, False, False)
        dec.end_utt()

    def start(self):
        for i in range(self.args.build_workers):
            t = threading.Thread(target=self._build_worker, args=(i,),
                                 name="asr-build-%d" % i, daemon=True)
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self._scheduler, name="asr-sched", daemon=True)
        t.start()
        self.threads.append(t)

    def stop(self):
        self.stopping.set()
        with self.adm_cond:
            self.adm_cond.notify_all()
        for _ in range(self.args.build_workers):
            self.build_q.put(None)

    def gauges(self):
        with self.adm_cond:
            depth, running, free = len(self.admission), len(self.running), len(self.decoders)
        return [
            ("asr_queue_depth", "Requests waiting in the admission queue.", depth),
            ("asr_build_pending", "Requests submitted to the build pool and not yet built.",
             self.build_pending),
            ("asr_running_requests", "Requests admitted by the scheduler and decoding.",
             running),
            ("asr_max_running_requests", "Configured --max-running-requests.",
             self.args.max_running_requests),
            ("asr_decoders_free", "Idle decoders in the pool.", free),
            ("asr_ready", "1 once the decoders are loaded.", 1 if self.ready.is_set() else 0),
        ]

    def mark(self, req, name, metadata=None):
        ts = now_ns()
        req.t[name] = ts
        self.profiler.emit(req.id, name, ts, metadata)
        return ts

    # -- build

    def submit(self, req):
        """Hand a request to the build pool; HTTPError 503 when it is full."""
        with self.build_lock:
            if self.build_pending >= self.args.build_max_pending:
                raise HTTPError(503, "server overloaded: %d requests already waiting for "
                                "the build pool (--build-max-pending)" % self.build_pending,
                                "server_overloaded")
            self.build_pending += 1
        self.build_q.put(req)

    def _build_worker(self, index):
        set_thread_name("asr-build-%d" % index)
        while True:
            req = self.build_q.get()
            if req is None:
                return
            try:
                self._build(req)
            finally:
                with self.build_lock:
                    self.build_pending -= 1

    def _build(self, req):
        if req.cancelled:  # the client hung up while the request waited
            self.mark(req, "stage_complete", {"status": "cancelled", "decode_steps": 0})
            return
        self.mark(req, "scheduler_request_build_start")
        try:
            pcm = decode_audio(req.upload)
        except AudioError as e:
            req.out.put(("error", 400, str(e)))
            return
        except Exception as e:  # a converter bug must not kill the worker
            req.out.put(("error", 500, "audio decoding failed: %s" % e))
            return
        req.upload = b""
        req.pcm = pcm
        req.audio_seconds = len(pcm) / 2.0 / SAMPLE_RATE
        self.mark(req, "scheduler_request_build_end",
                  {"audio_seconds": round(req.audio_seconds, 4)})
        req.out.put(("built",))
        with self.adm_cond:
            self.admission.append(req)
            self.mark(req, "scheduler_queue_enter", {"queue_depth": len(self.admission)})
            self.adm_cond.notify()

    # -- scheduler

    def _scheduler(self):
        set_thread_name("asr-sched")
        self.ready.wait()
        while not self.stopping.is_set():
            with self.adm_cond:
                while (not self.admission and not self._runnable()
                       and not self.stopping.is_set()):
                    self.adm_cond.wait(0.5)
                admitted = []
                while self.admission and self.decoders:
                    req = self.admission.popleft()
                    if req.cancelled:
                        self._complete(req, "cancelled")
                        continue
                    req.decoder = self.decoders.pop()
                    self.running.append(req)
                    req.batch_at_admission = len(self.running)
                    admitted.append(req)
            for req in admitted:
                self._first_forward(req)
            for req in list(self.running):
                if req in admitted:
                    continue
                if req.cancelled:
                    self._finish(req, "cancelled")
                    continue
                try:
                    if self._step(req):
                        self._finish(req, "ok")
                except Exception as e:
                    self._finish(req, "error", str(e))

    def _runnable(self):
        """Whether a running request has work (a realtime session may be
        waiting for audio); adm_cond is held."""
        return any(not r.realtime or r.cancelled or r.has_work() for r in self.running)

    def _first_forward(self, req):
        if req.realtime:
            return self._stream_admit(req)
        self.mark(req, "scheduler_prefill_start",
                  {"batch_size": req.batch_at_admission,
                   "queue_depth": len(self.admission)})
        try:
            req.decoder.start_utt()
            done = self._step(req)
        except Exception as e:
            self.mark(req, "scheduler_prefill_end")
            self._finish(req, "error", str(e))
            return
        self.mark(req, "scheduler_prefill_end", {"chunk_ms": self.args.chunk_ms})
        if done:
            self._finish(req, "ok")

    def _step(self, req):
        """Feed one chunk to the request's decoder; True when the audio is used up."""
        if req.realtime:
            return self._stream_step(req) if req.has_work() else False
        chunk = req.pcm[req.offset:req.offset + self.chunk_bytes]
        req.offset += len(chunk)
        req.steps += 1
        last = req.offset >= len(req.pcm)
        dec = req.decoder
        dec.process_raw(chunk, False, last)
        if last:
            dec.end_utt()
        hyp = dec.hyp()
        words = hyp.hypstr.split() if hyp is not None and hyp.hypstr else []
        if last:
            req.text = " ".join(words)
            new = words[len(req.emitted):] if words[:len(req.emitted)] == req.emitted else []
        else:
            # a word is emitted once two consecutive partials agree on it
            stable = []
            for a, b in zip(words, req.prev_words):
                if a != b:
                    break
                stable.append(a)
            req.prev_words = words
            new = []
            if len(stable) > len(req.emitted) and stable[:len(req.emitted)] == req.emitted:
                new = stable[len(req.emitted):]
        if new:
            if "scheduler_first_emit" not in req.t:
                self.mark(req, "scheduler_first_emit", {"step": req.steps})
            if req.stream:
                for w in new:
                    req.out.put(("delta", (" " if req.emitted else "") + w))
                    req.emitted.append(w)
            else:
                req.emitted.extend(new)
        return last

    def _finish(self, req, status, message=None):
        with self.adm_cond:
            if req in self.running:
                self.running.remove(req)
            dec, req.decoder = req.decoder, None
            if dec is not None:
                if status != "ok":
                    try:
                        dec.end_utt()
                    except Exception:
                        pass
                self.decoders.append(dec)
        req.pcm = b""
        self._complete(req, status, message)

    def _complete(self, req, status, message=None):
        if "scheduler_first_emit" not in req.t and status == "ok":
            self.mark(req, "scheduler_first_emit", {"step": req.steps, "empty": True})
        self.mark(req, "stage_complete", {"status": status, "decode_steps": req.steps,
                                          "audio_seconds": round(req.audio_seconds, 4)})
        if status == "ok":
            with self.metrics.lock:
                self.metrics.audio_seconds += req.audio_seconds
            req.out.put(("done", req.text))
        elif status == "error":
            req.out.put(("error", 500, "decoding failed: %s" % message))
        else:
            req.out.put(("error", 499, "client disconnected"))


# ---------------------------------------------------------------- HTTP


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "asrprof-refserver/1"

    # set by serve()
    app = None

    def handle(self):
        set_thread_name("asr-http")
        super().handle()

    def log_message(self, fmt, *args):
        if self.app.args.access_log:
            sys.stderr.write("%s - %s\n" % (self.address_string(), fmt % args))

    def handle_expect_100(self):
        # Refuse an oversized upload before the client sends it.
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if n > MAX_UPLOAD_BYTES:
            self.close_connection = True
            self.app.metrics.count_request(400)
            self._send_error_json(HTTPError(400, "upload larger than %d bytes"
                                            % MAX_UPLOAD_BYTES), self._request_id())
            return False
        return super().handle_expect_100()

    # -- helpers

    def _request_id(self):
        rid = (self.headers.get("X-Request-Id") or "").strip()
        if rid and len(rid) <= 256 and rid.isprintable():
            return rid
        return "transcription-%s" % uuid.uuid4()

    def _send(self, status, body, content_type, rid, extra=None):
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Request-Id", rid)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status, obj, rid, extra=None):
        self._send(status, json.dumps(obj), "application/json", rid, extra)

    def _send_error_json(self, err, rid):
        extra = {"Retry-After": "1"} if err.status == 503 else None
        self._send_json(err.status, {"error": {"message": err.message, "type": err.err_type,
                                               "code": err.status}}, rid, extra)

    def _read_body(self, limit):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            parts, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > limit:
                    self.close_connection = True
                    raise HTTPError(400, "upload larger than %d bytes" % limit)
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(parts)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise HTTPError(400, "bad Content-Length")
        if n > limit:
            # Drain a moderately oversized body so the client can read the
            # answer instead of a reset; beyond that, just close.
            self.close_connection = True
            left = n if n <= 8 * limit else 0
            while left > 0:
                got = self.rfile.read(min(left, 1 << 20))
                if not got:
                    break
                left -= len(got)
            raise HTTPError(400, "upload larger than %d bytes" % limit)
        body = self.rfile.read(n) if n > 0 else b""
        if len(body) != n:
            self.close_connection = True
            raise HTTPError(400, "request body truncated")
        return body

    def _peer_closed(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    # -- routes

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        rid = self._request_id()
        path = urllib.parse.urlsplit(self.path).path
        app = self.app
        if path in ("/", "/ws") and "websocket" in (self.headers.get("Upgrade") or "").lower():
            return self._websocket(rid)
        if path == "/health":
            if app.pipeline.ready.is_set():
                self._send_json(200, {"status": "ok", "model": MODEL_ID}, rid)
            else:
                self._send_json(503, {"status": "loading"}, rid)
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{
                "id": MODEL_ID, "object": "model", "created": app.started,
                "owned_by": "asrprof", "root": MODEL_ID,
            }]}, rid)
        elif path == "/metrics":
            self._send(200, app.metrics.render(app.pipeline.gauges()),
                       "text/plain; version=0.0.4; charset=utf-8", rid)
        else:
            self._send_error_json(HTTPError(404, "no route for GET %s" % path, "not_found"), rid)

    def do_POST(self):
        rid = self._request_id()
        path = urllib.parse.urlsplit(self.path).path
        try:
            if path == "/v1/audio/transcriptions":
                return self._transcribe(rid)
            body = self._read_body(1 << 20)
            if path == "/start_request_profile":
                try:
                    cfg = json.loads(body or b"{}")
                except ValueError:
                    raise HTTPError(400, "body must be JSON {\"run_id\",\"event_dir\"}")
                event_dir = cfg.get("event_dir") if isinstance(cfg, dict) else None
                if not event_dir:
                    raise HTTPError(400, "event_dir is required")
                run_id = str(cfg.get("run_id") or uuid.uuid4())
                try:
                    p = self.app.profiler.start(run_id, event_dir)
                except OSError as e:
                    raise HTTPError(400, "cannot open event file: %s" % e)
                self._send_json(200, {"status": "started", "run_id": run_id,
                                      "event_dir": event_dir, "path": p}, rid)
            elif path == "/stop_request_profile":
                p, n = self.app.profiler.stop()
                self._send_json(200, {"status": "stopped", "path": p, "events": n}, rid)
            else:
                raise HTTPError(404, "no route for POST %s" % path, "not_found")
        except HTTPError as e:
            self._send_error_json(e, rid)

    def _transcribe(self, rid):
        app = self.app
        arrival = now_ns()
        ctx = parse_traceparent(self.headers.get("traceparent"))
        trace_id, parent = ctx if ctx else (new_trace_id(), None)
        req = None
        status = 500
        stream = False
        try:
            body = self._read_body(MAX_UPLOAD_BYTES)
            ctype = self.headers.get("Content-Type") or ""
            if not ctype.lower().startswith("multipart/form-data"):
                raise HTTPError(400, "expected multipart/form-data, got %r" % ctype)
            fields = parse_multipart(body, ctype)
            body = None
            if "file" not in fields:
                raise HTTPError(400, "missing form field 'file'")
            language = _field_text(fields, "language").lower()
            if language not in LANGUAGES:
                raise HTTPError(400, "language %r is not supported (English only)" % language)
            fmt = _field_text(fields, "response_format", "json").lower() or "json"
            if fmt not in RESPONSE_FORMATS:
                raise HTTPError(400, "response_format must be json, text or verbose_json")
            stream = _field_text(fields, "stream").lower() in ("true", "1", "yes", "on")
            upload = fields["file"][1]
            if not upload:
                raise HTTPError(400, "uploaded file is empty")
            if not app.pipeline.ready.is_set():
                raise HTTPError(503, "model is still loading", "server_overloaded")
            req = Request(rid, trace_id, parent, stream)
            req.upload = upload
            req.t["arrival"] = arrival
            app.pipeline.mark(req, "stage_input_received",
                              {"bytes": len(upload), "stream": stream})
            app.pipeline.submit(req)
            first = self._wait(req)
            if first[0] == "error":
                raise HTTPError(first[1], first[2],
                                "invalid_audio" if first[1] == 400 else "server_error")
            if stream:
                status = self._answer_stream(req, rid)
            else:
                item = self._wait(req)
                if item[0] == "error":
                    raise HTTPError(item[1], item[2], "server_error")
                text = item[1]
                if fmt == "text":
                    self._send(200, text + "\n", "text/plain; charset=utf-8", rid)
                elif fmt == "verbose_json":
                    self._send_json(200, {"task": "transcribe", "language": "english",
                                          "duration": round(req.audio_seconds, 3),
                                          "text": text, "segments": []}, rid)
                else:
                    self._send_json(200, {"text": text}, rid)
                status = 200
        except HTTPError as e:
            status = e.status
            if status != 499:
                try:
                    self._send_error_json(e, rid)
                except OSError:
                    status = 499
        except OSError:
            status = 499
            if req is not None:
                req.cancelled = True
        finally:
            app.metrics.count_request(status)
            self._record(req, rid, trace_id, parent, arrival, status, stream)

    def _wait(self, req):
        """Next pipeline message for req; cancels it if the client goes away."""
        while True:
            try:
                return req.out.get(timeout=0.25)
            except queue.Empty:
                if self._peer_closed():
                    req.cancelled = True
                    raise HTTPError(499, "client disconnected")

    def _answer_stream(self, req, rid):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Request-Id", rid)
        self.end_headers()

        def event(obj):
            data = ("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        status = 200
        try:
            while True:
                item = self._wait(req)
                if item[0] == "delta":
                    event({"type": "transcript.text.delta", "delta": item[1]})
                elif item[0] == "done":
                    event({"type": "transcript.text.done", "text": item[1],
                           "usage": {"type": "duration",
                                     "seconds": round(req.audio_seconds, 3)}})
                    break
                else:
                    status = item[1]
                    event({"type": "error", "error": {"message": item[2]}})
                    break
            event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except HTTPError:  # peer closed while waiting
            self.close_connection = True
            return 499
        except OSError:
            req.cancelled = True
            self.close_connection = True
            return 499
        return status

    # -- telemetry

    def _record(self, req, rid, trace_id, parent, arrival, status, stream):
        app = self.app
        end = now_ns()
        t = req.t if req is not None else {}
        if req is not None and "stage_complete" not in t and status not in (200, 499):
            # refused or failed before the scheduler saw it
            app.pipeline.mark(req, "stage_complete", {"status": "error", "http_status": status})

        def dur(a, b):
            return (t[b] - t[a]) / 1e9 if a in t and b in t else None

        lat = {
            "gen_ai.latency.time_in_queue": dur("scheduler_queue_enter", "scheduler_prefill_start"),
            "gen_ai.latency.time_to_first_token": dur("arrival", "scheduler_prefill_end"),
            "gen_ai.latency.time_in_model_prefill": dur("scheduler_prefill_start",
                                                        "scheduler_prefill_end"),
            "gen_ai.latency.time_in_model_decode": dur("scheduler_prefill_end", "stage_complete"),
            "gen_ai.latency.time_in_model_inference": dur("scheduler_prefill_start",
                                                          "stage_complete"),
        }
        e2e = (end - arrival) / 1e9
        m = app.metrics
        m.observe("build", dur("scheduler_request_build_start", "scheduler_request_build_end"))
        m.observe("queue", lat["gen_ai.latency.time_in_queue"])
        m.observe("first_forward", lat["gen_ai.latency.time_in_model_prefill"])
        m.observe("decode", lat["gen_ai.latency.time_in_model_decode"])
        if status == 200:
            m.observe("e2e", e2e)
        if not app.exporter.enabled:
            return
        audio_s = round(req.audio_seconds, 4) if req is not None else 0.0
        attrs = {
            "request.id": rid,
            "gen_ai.request.id": rid,
            "gen_ai.request.model": MODEL_ID,
            "http.request.method": "POST",
            "http.route": "/v1/audio/transcriptions",
            "http.response.status_code": status,
            "asr.stream": stream,
            "audio.seconds": audio_s,
            "gen_ai.latency.e2e": e2e,
        }
        for k, v in lat.items():
            if v is not None:
                attrs[k] = v
        if req is not None:
            attrs["batch.size_at_admission"] = req.batch_at_admission
            attrs["decode.steps"] = req.steps
        span_id = req.span_id if req is not None else new_span_id()
        root = {"trace_id": trace_id, "span_id": span_id, "parent": parent,
                "name": "transcription", "kind": 2, "start": arrival, "end": end,
                "attrs": attrs}
        if status != 200:
            root["status"] = {"code": 2, "message": "HTTP %d" % status}
        app.exporter.record(root)

        def child(name, a, b, extra):
            if a in t:
                ca = {"request.id": rid}
                ca.update(extra)
                app.exporter.record({"trace_id": trace_id, "span_id": new_span_id(),
                                     "parent": span_id, "name": name, "kind": 1,
                                     "start": t[a], "end": t.get(b, end), "attrs": ca})

        child("build", "scheduler_request_build_start", "scheduler_request_build_end",
              {"audio.seconds": audio_s})
        child("queue", "scheduler_queue_enter", "scheduler_prefill_start",
              {"batch.size_at_admission": req.batch_at_admission if req else 0})
        child("first_forward", "scheduler_prefill_start", "scheduler_prefill_end",
              {"batch.size_at_admission": req.batch_at_admission if req else 0,
               "chunk_ms": app.args.chunk_ms})
        child("decode", "scheduler_prefill_end", "stage_complete",
              {"decode.steps": req.steps if req else 0, "audio.seconds": audio_s})


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # A client that goes away is normal under load; other errors are not.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class App:
    def __init__(self, args):
        self.args = args
        self.started = int(time.time())
        self.metrics = Metrics()
        self.profiler = RequestProfiler(self.metrics)
        self.exporter = SpanExporter(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
                                     self.metrics)
        self.pipeline = Pipeline(args, self.metrics, self.profiler)


def parse_args(argv):
    p = argparse.ArgumentParser(description="asrprof reference ASR server (PocketSphinx, "
                                "SGLang-Omni-shaped pipeline)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--build-workers", type=int, default=2,
                   help="request build threads (audio decode + resample)")
    p.add_argument("--build-max-pending", type=int, default=16,
                   help="requests waiting for or in the build pool before HTTP 503")
    p.add_argument("--max-running-requests", type=int, default=8,
                   help="requests the scheduler decodes at once (= decoder pool size)")
    p.add_argument("--chunk-ms", type=int, default=100,
                   help="audio per decode step in milliseconds")
    p.add_argument("--decode-interval", type=float, default=0.48,
                   help="realtime sessions: seconds of audio per decode step (one partial "
                   "hypothesis each)")
    p.add_argument("--access-log", action="store_true", help="log every HTTP request to stderr")
    a = p.parse_args(argv)
    for name in ("build_workers", "build_max_pending", "max_running_requests", "chunk_ms"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if not 0.01 <= a.decode_interval <= 10:
        p.error("--decode-interval must be between 0.01 and 10 seconds")
    return a


def main(argv=None):
    args = parse_args(argv)
    set_thread_name("asr-main")
    try:
        app = App(args)
    except ValueError as e:
        print("refserver: %s" % e, file=sys.stderr)
        return 2
    Handler.app = app
    httpd = Server((args.host, args.port), Handler)
    host, port = httpd.server_address[:2]
    app.pipeline.start()
    stop = threading.Event()

    def on_signal(signum, frame):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def accept_loop():
        set_thread_name("asr-http")
        httpd.serve_forever(poll_interval=0.2)

    acceptor = threading.Thread(target=accept_loop, name="asr-http", daemon=True)
    acceptor.start()
    print("refserver: listening on http://%s:%d (loading %d decoders)"
          % (host, port, args.max_running_requests), flush=True)
    t0 = time.monotonic()
    try:
        app.pipeline.load_decoders()
    except Exception as e:
        print("refserver: cannot load PocketSphinx: %s" % e, file=sys.stderr, flush=True)
        httpd.shutdown()
        return 1
    app.pipeline.ready.set()
    print("refserver: ready in %.1fs (model %s, otlp %s)"
          % (time.monotonic() - t0, MODEL_ID, app.exporter.endpoint or "off"), flush=True)
    while acceptor.is_alive():
        acceptor.join(0.5)
    app.pipeline.stop()
    app.profiler.stop()
    app.exporter.close()
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
