"""Helpers shared by the reference server's modules (docs/REFSERVER.md).

refserver.py (the HTTP front end), router.py (the router) and
whisper_engine.py (the whisper engine) import this module; it imports
none of them, so the modules beside it form no import circle:

    rscommon <- refserver, router, whisper_engine
    refserver -> whisper_engine, router, refserver_diarize (on demand)

Here: thread naming (set_thread_name), the host-work model (spin),
Prometheus metrics (Metrics), OTLP/HTTP JSON spans (SpanExporter, trace
and span ids, W3C traceparent), the SGLang-Omni request-profile event
writer (RequestProfiler), audio decoding to 16 kHz mono PCM
(decode_audio), and the PocketSphinx Pipeline (build pool, admission
queue, scheduler) that whisper_engine.WhisperPipeline subclasses.

Standard library only at import time; PocketSphinx is imported when a
Pipeline loads its decoders.
"""

import collections
import ctypes
import ctypes.util
import hashlib
import http.client
import io
import json
import os
import queue
import re
import socket
import subprocess
import threading
import time
import urllib.parse
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


def spin(seconds):
    """Busy CPU work holding the GIL for seconds: a model of host overhead
    (--host-step-ms)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def load_sync(path, ms):
    """The --sync-lib stand-in driver's cuStreamSynchronize, set to block
    for ms (--sync-step-ms); None without --sync-lib, or with ms 0 (the
    library is then only loaded)."""
    if not path:
        return None
    try:
        lib = ctypes.CDLL(path)
        lib.cuStubSetSync(ctypes.c_long(int(ms * 1e6)))
        sync = lib.cuStreamSynchronize
    except (OSError, AttributeError) as e:
        raise SystemExit("--sync-lib %s: %s (want the stand-in, probe/cuda/testdata/stub.c)" % (path, e))
    sync.argtypes = [ctypes.c_void_p]
    return sync if ms > 0 else None


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
                 interval_s=0.2, timeout_s=2.0, service_name=SERVICE_NAME,
                 instance_id=None, thread_name="asr-otlp"):
        self.endpoint = endpoint
        self.service_name = service_name
        self.instance_id = instance_id or default_instance_id()
        self.thread_name = thread_name
        self.metrics = metrics
        self.max_batch = max_batch
        # OTEL_BSP_SCHEDULE_DELAY (ms), as the OpenTelemetry SDKs read it:
        # their BatchSpanProcessor's default is 5000, this exporter's 200.
        delay = os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "")
        self.interval_s = int(delay) / 1000 if delay else interval_s
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
            self.thread = threading.Thread(target=self._run, name=thread_name,
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
        set_thread_name(self.thread_name)
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
        # A kept-alive connection may have been closed by the receiver since
        # the last export (an asrprof capture ends and the next one starts a
        # new receiver on the same port): the first POST on it fails without
        # reaching anyone.  Such a failure is retried once on a fresh
        # connection; a failure on a fresh connection, or a timeout, drops
        # the batch.
        ok = False
        for _ in range(2):
            reused = self.conn is not None
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
                break
            except (OSError, http.client.HTTPException) as e:
                try:
                    self.conn.close()
                except Exception:
                    pass
                self.conn = None
                # A timeout may mean the receiver got the batch: no retry.
                if not reused or isinstance(e, TimeoutError):
                    break
        if ok:
            with self.metrics.lock:
                self.metrics.spans_exported += len(batch)
        else:
            self.metrics.drop_spans("export_failed", len(batch))

    def _encode(self, batch):
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
                "service.name": self.service_name,
                "service.instance.id": self.instance_id,
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


def default_instance_id():
    """service.instance.id when --instance does not name one: host-pid."""
    return "%s-%d" % (socket.gethostname(), os.getpid())


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


# ---------------------------------------------------------------- pipeline


class Pipeline:
    """Build pool, admission queue and the scheduler thread.

    This is the PocketSphinx engine; whisper_engine.WhisperPipeline
    subclasses it and overrides the hooks below (model_card .. extra_metrics)
    along with load_decoders and the scheduler."""

    engine_label = "PocketSphinx"
    model_id = MODEL_ID
    supports_realtime = True
    backlog_flag = ""  # the flag that sizes a backlog beyond the build pool, if any

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
        # --diarize: {audio sha256: speaker turns} and refserver_diarize
        # (set by App); None when off.
        self.diarize = None
        self.dz = None
        # --sync-lib: the stand-in driver's blocking call, one per step
        self.sync = load_sync(getattr(args, "sync_lib", ""), getattr(args, "sync_step_ms", 0.0))

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
        The mean is the front end's, whatever the search: the clip goes
        through a one-word keyphrase search, about 0.06 s of CPU here
        against 0.8-1.4 s through the language model (each server loads a
        decoder per slot), and the answers after it are the same (the
        refset's first 60 clips, compared one by one).
        """
        try:
            with wave.open(WARMUP_WAV, "rb") as w:
                pcm = w.readframes(min(w.getnframes(), 2 * SAMPLE_RATE))
        except (OSError, wave.Error, EOFError):
            return
        search = dec.get_search()
        dec.set_keyphrase("warm-up", "hello")
        dec.set_search("warm-up")
        dec.start_utt()
        dec.process_raw(pcm, False, False)
        dec.end_utt()
        dec.set_search(search)

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

    # -- engine hooks

    def model_card(self):
        """Extra fields of /health and of the /v1/models entry."""
        return {}

    def loading_note(self):
        return "loading %d decoders" % self.args.max_running_requests

    def ready_note(self):
        return "model %s" % self.model_id

    def featurize(self, req):
        """Build-pool work after audio decoding (req.pcm is set)."""

    def complete_extra(self, req):
        """Extra stage_complete metadata."""
        return {}

    def span_extra(self, req, name):
        """Extra attributes of the child span called name."""
        return {}

    def extra_metrics(self):
        """More Prometheus text for /metrics."""
        return ""

    def mark(self, req, name, metadata=None):
        ts = now_ns()
        req.t[name] = ts
        self.profiler.emit(req.id, name, ts, metadata)
        return ts

    # -- build

    def build_limit(self):
        """Requests that may wait for or be in the build pool before a 503."""
        return self.args.build_max_pending

    def submit(self, req):
        """Hand a request to the build pool; HTTPError 503 when it is full."""
        with self.build_lock:
            if self.build_pending >= self.build_limit():
                raise HTTPError(503, "server overloaded: %d requests already waiting for "
                                "the build pool (--build-max-pending%s)"
                                % (self.build_pending, self.backlog_flag), "server_overloaded")
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
        if self.args.build_delay > 0:  # a heavier preprocessor (see --build-delay)
            time.sleep(self.args.build_delay)
        if req.diarize:  # the upload's speaker turns are found by its hash
            req.audio_sha = hashlib.sha256(req.upload).hexdigest()
        req.upload = b""
        req.pcm = pcm
        req.audio_seconds = len(pcm) / 2.0 / SAMPLE_RATE
        try:
            self.featurize(req)
        except Exception as e:
            req.out.put(("error", 500, "feature extraction failed: %s" % e))
            return
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
        if self.args.host_step_ms > 0:  # host work per running request per step
            spin(self.args.host_step_ms / 1000.0)
        if getattr(self.args, "step_sleep_ms", 0) > 0:  # a wait the thread sleeps through
            time.sleep(self.args.step_sleep_ms / 1000.0)
        if self.sync is not None:  # GPU wait per running request per step
            self.sync(None)
        chunk = req.pcm[req.offset:req.offset + self.chunk_bytes]
        req.offset += len(chunk)
        req.steps += 1
        last = req.offset >= len(req.pcm)
        dec = req.decoder
        dec.process_raw(chunk, False, last)
        if last:
            dec.end_utt()
            if req.diarize:
                req.words = self.dz.words_of(dec)
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
            if req.stream and not req.diarize:
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
        meta = {"status": status, "decode_steps": req.steps,
                "audio_seconds": round(req.audio_seconds, 4)}
        meta.update(self.complete_extra(req))
        self.mark(req, "stage_complete", meta)
        if status == "ok":
            with self.metrics.lock:
                self.metrics.audio_seconds += req.audio_seconds
            if req.diarize:
                self._diarize_answer(req)
            req.out.put(("done", req.text))
        elif status == "error":
            req.out.put(("error", 500, "decoding failed: %s" % message))
        else:
            req.out.put(("error", 499, "client disconnected"))

    def _diarize_answer(self, req):
        """--diarize: the text becomes the markup of the recognizer's words,
        timed, with the dataset's speakers (refserver_diarize); a stream
        gets one delta per segment (the markup needs the whole utterance)."""
        turns = self.diarize.get(getattr(req, "audio_sha", ""), [])
        req.segments = self.dz.segments(getattr(req, "words", []), turns)
        req.text = self.dz.markup(req.segments)
        if req.stream:
            for seg in req.segments:
                req.out.put(("delta", self.dz.markup([seg])))

    # -- realtime sessions

    def admit_stream(self, req):
        """Put a realtime session into the admission queue."""
        with self.adm_cond:
            self.admission.append(req)
            self.mark(req, "scheduler_queue_enter", {"queue_depth": len(self.admission)})
            self.adm_cond.notify()

    def wake(self):
        """Tell the scheduler a realtime session may have work."""
        with self.adm_cond:
            self.adm_cond.notify()

    def _stream_admit(self, req):
        self.mark(req, "scheduler_prefill_start",
                  {"batch_size": req.batch_at_admission, "queue_depth": len(self.admission)})
        try:
            req.decoder.start_utt()
        except Exception as e:
            self.mark(req, "scheduler_prefill_end")
            self._finish(req, "error", str(e))

    def _stream_step(self, req):
        """One decode step of a realtime session: up to --decode-interval of
        its audio, fed in --chunk-ms pieces.  PocketSphinx leaving speech is
        an endpoint that locks a sentence; the current hypothesis is the
        partial.  True once the final message is out."""
        with req.lock:
            take = bytes(req.pending[:self.interval_bytes])
            del req.pending[:len(take)]
            last = req.stop_requested and not req.pending
            backlog_s = len(req.pending) / 2.0 / SAMPLE_RATE
        t0 = now_ns()
        dec = req.decoder
        locked = 0
        for off in range(0, len(take), self.chunk_bytes):
            piece = take[off:off + self.chunk_bytes]
            dec.process_raw(piece, False, False)
            req.processed += len(piece)
            speech = dec.get_in_speech()
            if req.in_speech and not speech:
                locked += self._lock_sentence(req, True)
            req.in_speech = speech
        partial = ""
        if last:
            locked += self._lock_sentence(req, False)
        else:
            hyp = dec.hyp()
            partial = hyp.hypstr.strip() if hyp is not None and hyp.hypstr else ""
        req.steps += 1
        req.step_spans.append((t0, now_ns(), req.steps, len(take) / 2.0 / SAMPLE_RATE, backlog_s))
        if req.steps == 1:
            self.mark(req, "scheduler_prefill_end", {"chunk_ms": self.args.chunk_ms,
                                                     "decode_interval_s": self.args.decode_interval})
        if (partial or locked) and "scheduler_first_emit" not in req.t:
            self.mark(req, "scheduler_first_emit", {"step": req.steps})
        duration_ms = int(round(req.processed * 1000.0 / 2 / SAMPLE_RATE))
        if last:
            req.audio_seconds = req.processed / 2.0 / SAMPLE_RATE
            req.text = " ".join(x["text"] for x in req.sentences)
            req.out.put(("update", {"sentences": list(req.sentences), "partial": "",
                                    "is_final": True, "duration_ms": duration_ms}))
            return True
        if partial or locked:
            req.out.put(("update", {"sentences": list(req.sentences), "partial": partial,
                                    "partial_start_ms": req.utt_start_ms, "is_final": False,
                                    "duration_ms": duration_ms}))
        return False

    def _lock_sentence(self, req, restart):
        """End the utterance at an endpoint; its text becomes a sentence."""
        dec = req.decoder
        dec.end_utt()
        hyp = dec.hyp()
        text = " ".join(hyp.hypstr.split()) if hyp is not None and hyp.hypstr else ""
        end_ms = int(round(req.processed * 1000.0 / 2 / SAMPLE_RATE))
        if text:
            req.sentences.append({"text": text, "start": req.utt_start_ms, "end": end_ms})
        if restart:
            dec.start_utt()
        req.utt_start_ms = end_ms
        return 1 if text else 0
