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
/usr/bin/python3 refserver/refserver.py --port 8000

rscommon.py beside this file holds what this module shares with the
router and the whisper engine: thread naming, metrics, the OTLP span
exporter, the request-profile event writer, audio decoding and the
PocketSphinx Pipeline.  Imports go one way: this module imports
rscommon, and whisper_engine, router and refserver_diarize on demand;
none of them imports this module.

--diarize MANIFEST adds a diarization model that answers in
MOSS-Transcribe-Diarize's markup (refserver_diarize.py beside this file).

--engine whisper serves a Whisper in plain PyTorch instead, with batched
decode steps (whisper_engine.py, whisper_model.py beside this file; they
need torch and numpy, and are imported only for that engine).
"""

import argparse
import base64
import hashlib
import http.server
import json
import os
import queue
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
import uuid

# What this module shares with router.py and whisper_engine.py lives in
# rscommon.py beside it, which imports none of them.
from rscommon import (
    MODEL_ID,
    SAMPLE_RATE,
    HTTPError,
    Metrics,
    Pipeline,
    RequestProfiler,
    SpanExporter,
    default_instance_id,
    new_span_id,
    new_trace_id,
    now_ns,
    parse_traceparent,
    set_thread_name,
)

DIARIZE_MODEL_ID = "pocketsphinx-en-us-diarize"  # --diarize: answers in the diarization markup
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
LANGUAGES = {"", "en", "eng", "english", "en-us", "en_us", "英文"}  # 英文: Fun-ASR's name
RESPONSE_FORMATS = {"json", "text", "verbose_json"}

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
    diarize = False  # asked for DIARIZE_MODEL_ID (refserver_diarize)

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


# ---------------------------------------------------------------- WebSocket (RFC 6455)

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
WS_MAX_MESSAGE = 16 * 1024 * 1024


class WSError(Exception):
    """A protocol violation by the peer; code is the close status to send."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def ws_accept_key(key):
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode("ascii")).digest()).decode("ascii")


def ws_unmask(data, mask):
    n = len(data)
    if n == 0:
        return data
    m = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(m, "little")).to_bytes(n, "little")


class WebSocket:
    """The server side of RFC 6455 framing on a handler's rfile/wfile.

    One thread reads (read_message), one thread writes (send*).  Client
    frames must be masked; fragmented messages are reassembled, with
    control frames (ping, pong, close) allowed in between; lengths use the
    7-bit, 16-bit and 64-bit forms.
    """

    def __init__(self, rfile, wfile, max_message=WS_MAX_MESSAGE):
        self.rfile = rfile
        self.wfile = wfile
        self.max_message = max_message
        self.closed = False
        self._parts, self._first, self._size = [], None, 0  # a fragmented message

    def _read(self, n):
        b = self.rfile.read(n)
        if b is None or len(b) < n:
            raise EOFError("connection closed")
        return b

    def read_frame(self):
        b0, b1 = self._read(2)
        fin, op, n = bool(b0 & 0x80), b0 & 0x0F, b1 & 0x7F
        if b0 & 0x70:
            raise WSError(1002, "reserved bits set")
        if op not in (OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG):
            raise WSError(1002, "unknown opcode %d" % op)
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        if not b1 & 0x80:
            raise WSError(1002, "client frames must be masked")
        if op >= OP_CLOSE and (not fin or n > 125):
            raise WSError(1002, "control frames must be whole and at most 125 bytes")
        if n > self.max_message:
            raise WSError(1009, "frame of %d bytes is too large" % n)
        mask = self._read(4)
        return fin, op, ws_unmask(self._read(n) if n else b"", mask)

    def read_message(self):
        """Return (opcode, payload) of the next message or control frame.
        A control frame between the fragments of a message is returned at
        once; the fragments read so far are kept for the next call."""
        while True:
            fin, op, data = self.read_frame()
            if op >= OP_CLOSE:
                return op, data
            if op == OP_CONT:
                if self._first is None:
                    raise WSError(1002, "continuation frame without a message")
            elif self._first is not None:
                raise WSError(1002, "new message inside a fragmented one")
            else:
                self._first = op
            self._size += len(data)
            if self._size > self.max_message:
                raise WSError(1009, "message too large")
            self._parts.append(data)
            if fin:
                msg, first = b"".join(self._parts), self._first
                self._parts, self._first, self._size = [], None, 0
                if first == OP_TEXT:
                    try:
                        msg.decode("utf-8")
                    except UnicodeDecodeError:
                        raise WSError(1007, "text message is not UTF-8")
                return first, msg

    def send(self, op, payload):
        n = len(payload)
        if n < 126:
            head = struct.pack(">BB", 0x80 | op, n)
        elif n < 1 << 16:
            head = struct.pack(">BBH", 0x80 | op, 126, n)
        else:
            head = struct.pack(">BBQ", 0x80 | op, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def send_json(self, obj):
        self.send(OP_TEXT, json.dumps(obj).encode("utf-8"))

    def send_close(self, code=1000, reason=""):
        if self.closed:
            return
        self.closed = True
        self.send(OP_CLOSE, struct.pack(">H", code) + reason.encode("utf-8")[:120])


class StreamSession(Request):
    """A realtime (Fun-ASR protocol) session as it moves through the
    pipeline: admitted like a request, then stepped by the scheduler each
    time --decode-interval of its audio has arrived (or it was stopped)."""

    realtime = True

    def __init__(self, request_id, trace_id, parent_span_id, interval_bytes, out):
        super().__init__(request_id, trace_id, parent_span_id, True)
        self.out = out  # the connection's queue: ("update", msg) ("done", text) ("error", status, msg)
        self.lock = threading.Lock()  # guards pending, stop_requested
        self.pending = bytearray()
        self.interval_bytes = interval_bytes
        self.stop_requested = False
        self.received = 0  # bytes of audio received
        self.processed = 0  # bytes fed to the decoder
        self.in_speech = False
        self.utt_start_ms = 0
        self.sentences = []
        self.last_partial = ""
        self.step_spans = []  # (start_ns, end_ns, step, audio_s, backlog_s)
        self.language = ""

    def has_work(self):
        return self.stop_requested or len(self.pending) >= self.interval_bytes

    def feed(self, pcm):
        with self.lock:
            self.pending += pcm
            self.received += len(pcm)

    def stop(self):
        with self.lock:
            self.stop_requested = True


# ---------------------------------------------------------------- HTTP


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "asrprof-refserver/1"
    # TCP_NODELAY: the handler writes the headers and then the body (wfile
    # is unbuffered), two small segments; with Nagle's algorithm on, the
    # body waited for the client's delayed ACK of the headers, about 40 ms
    # added to most responses' end (first byte to end, in requests.jsonl).
    disable_nagle_algorithm = True

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
        body = self._read_paced(n) if n > 0 else b""
        if len(body) != n:
            self.close_connection = True
            raise HTTPError(400, "request body truncated")
        return body

    def _read_paced(self, n):
        """n bytes of the body, at most --upload-kbps fast when that is set."""
        rate = self.app.args.upload_kbps * 1000.0
        if rate <= 0:
            return self.rfile.read(n)
        parts, got, t0 = [], 0, time.monotonic()
        while got < n:
            part = self.rfile.read(min(4096, n - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            ahead = got / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        return b"".join(parts)

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
                self._send_json(200, dict({"status": "ok", "model": app.pipeline.model_id,
                                           "instance": app.instance},
                                          **app.pipeline.model_card()), rid)
            else:
                self._send_json(503, {"status": "loading"}, rid)
        elif path == "/v1/models":
            mid = app.pipeline.model_id
            models = [dict({
                "id": mid, "object": "model", "created": app.started,
                "owned_by": "asrprof", "root": mid,
            }, **app.pipeline.model_card())]
            if app.pipeline.diarize is not None:
                models.append({"id": DIARIZE_MODEL_ID, "object": "model", "created": app.started,
                               "owned_by": "asrprof", "root": mid})
            self._send_json(200, {"object": "list", "data": models}, rid)
        elif path == "/metrics":
            self._send(200, app.metrics.render(app.pipeline.gauges()) + app.pipeline.extra_metrics(),
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
            model = _field_text(fields, "model")
            if model == DIARIZE_MODEL_ID and app.pipeline.diarize is None:
                raise HTTPError(400, "model %s needs the server started with --diarize MANIFEST"
                                % DIARIZE_MODEL_ID, "model_not_found")
            req = Request(rid, trace_id, parent, stream)
            req.diarize = model == DIARIZE_MODEL_ID
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
                if app.args.response_delay_ms > 0:
                    time.sleep(app.args.response_delay_ms / 1000.0)
                if fmt == "text":
                    self._send(200, text + "\n", "text/plain; charset=utf-8", rid)
                elif fmt == "verbose_json":
                    self._send_json(200, {"task": "transcribe", "language": "english",
                                          "duration": round(req.audio_seconds, 3),
                                          "text": text,
                                          "segments": getattr(req, "segments", [])}, rid)
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
            "gen_ai.request.model": app.pipeline.model_id,
            "http.request.method": "POST",
            "http.route": "/v1/audio/transcriptions",
            "http.response.status_code": status,
            "asr.stream": stream,
            "audio.seconds": audio_s,
            "service.instance.id": app.instance,
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

        # reading and parsing the upload, before the build pool sees it
        child("receive", "arrival", "stage_input_received", {})
        child("build", "scheduler_request_build_start", "scheduler_request_build_end",
              {"audio.seconds": audio_s})
        child("queue", "scheduler_queue_enter", "scheduler_prefill_start",
              {"batch.size_at_admission": req.batch_at_admission if req else 0})
        child("first_forward", "scheduler_prefill_start", "scheduler_prefill_end",
              {"batch.size_at_admission": req.batch_at_admission if req else 0,
               "chunk_ms": app.args.chunk_ms})
        child("decode", "scheduler_prefill_end", "stage_complete",
              dict({"decode.steps": req.steps if req else 0, "audio.seconds": audio_s},
                   **app.pipeline.span_extra(req, "decode")))


    # -- realtime sessions (Fun-ASR's WebSocket protocol)

    def _websocket(self, rid):
        """Serve one Fun-ASR realtime session on this connection: START,
        optional LANGUAGE:x and HOTWORDS:a,b, binary PCM16 16 kHz mono
        frames, STOP; updates as the scheduler steps the session."""
        app = self.app
        arrival = now_ns()
        key = (self.headers.get("Sec-WebSocket-Key") or "").strip()
        try:
            key_ok = len(base64.b64decode(key, validate=True)) == 16
        except ValueError:
            key_ok = False
        if not app.pipeline.supports_realtime:
            self.close_connection = True
            app.metrics.count_request(501)
            self._send_error_json(HTTPError(501, "realtime sessions are not supported by the %s "
                                            "engine; use POST /v1/audio/transcriptions"
                                            % app.pipeline.engine_label, "not_supported"), rid)
            return
        if (self.headers.get("Sec-WebSocket-Version") or "").strip() != "13" or not key_ok:
            self.close_connection = True
            app.metrics.count_request(400)
            self._send_error_json(HTTPError(400, "bad WebSocket handshake (want version 13 and a "
                                            "16-byte Sec-WebSocket-Key)"), rid)
            return
        if not app.pipeline.ready.is_set():
            app.metrics.count_request(503)
            self._send_error_json(HTTPError(503, "model is still loading", "server_overloaded"), rid)
            return
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", ws_accept_key(key))
        self.send_header("X-Request-Id", rid)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        ctx = parse_traceparent(self.headers.get("traceparent"))
        trace_id, parent = ctx if ctx else (new_trace_id(), None)
        ws = WebSocket(self.rfile, self.wfile)
        q = queue.Queue()

        def reader():
            set_thread_name("asr-http")
            try:
                while True:
                    op, data = ws.read_message()
                    q.put(("in", op, data))
                    if op == OP_CLOSE:
                        return
            except WSError as e:
                q.put(("bad", e.code, str(e)))
            except (OSError, EOFError, ValueError):
                q.put(("gone",))

        threading.Thread(target=reader, name="asr-http", daemon=True).start()
        sess, done, status = None, False, 200
        try:
            while True:
                item = q.get()
                kind = item[0]
                if kind == "in":
                    op, data = item[1], item[2]
                    if op == OP_CLOSE:
                        code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else 1000
                        ws.send_close(code if code in (1000, 1001) else 1000)
                        break
                    if op == OP_PING:
                        ws.send(OP_PONG, data)
                    elif op == OP_TEXT:
                        sess = self._ws_command(ws, q, data.decode("utf-8").strip(), sess, done,
                                                rid, trace_id, parent)
                    elif op == OP_BINARY:
                        if sess is None or sess.stop_requested:
                            ws.send_json({"event": "error", "error": "audio outside START..STOP"})
                        elif len(data) % 2:
                            ws.send_json({"event": "error", "error": "PCM16 frames need an even "
                                          "number of bytes"})
                        else:
                            sess.feed(data)
                            app.pipeline.wake()
                elif kind == "update":
                    ws.send_json(item[1])
                elif kind == "done":
                    done = True
                    ws.send_json({"event": "stopped"})
                elif kind == "error":
                    done, status = True, item[1]
                    ws.send_json({"event": "error", "error": item[2]})
                elif kind == "bad":
                    status = 400
                    ws.send_close(item[1], item[2])
                    break
                else:  # the peer went away
                    break
        except OSError:
            pass
        finally:
            if sess is not None and not done:
                sess.cancelled = True
                app.pipeline.wake()
                status = 499
            app.metrics.count_request(status)
            self._record_session(sess, rid, trace_id, parent, arrival, status)

    def _ws_command(self, ws, q, cmd, sess, done, rid, trace_id, parent):
        """Handle one text command; returns the (new) session."""
        app = self.app
        if cmd == "START":
            if sess is not None:
                ws.send_json({"event": "error", "error": "one session per connection"})
                return sess
            sess = StreamSession(rid, trace_id, parent, app.pipeline.interval_bytes, q)
            sess.t["arrival"] = now_ns()
            pl = app.pipeline
            pl.mark(sess, "stage_input_received", {"bytes": 0, "stream": True, "realtime": True})
            pl.mark(sess, "scheduler_request_build_start")
            pl.mark(sess, "scheduler_request_build_end", {"audio_seconds": 0.0})
            pl.admit_stream(sess)
            ws.send_json({"event": "started"})
        elif cmd.startswith("LANGUAGE:"):
            lang = cmd[len("LANGUAGE:"):].strip()
            if lang.lower() not in LANGUAGES:
                ws.send_json({"event": "error", "error": "language %r is not supported "
                              "(English only)" % lang})
            else:
                if sess is not None:
                    sess.language = lang
                ws.send_json({"event": "language_set", "language": lang})
        elif cmd.startswith("HOTWORDS:"):
            words = [w.strip() for w in cmd[len("HOTWORDS:"):].split(",") if w.strip()]
            ws.send_json({"event": "hotwords_set", "hotwords": words})  # accepted, unused
        elif cmd == "STOP":
            if sess is None or done:
                ws.send_json({"event": "error", "error": "STOP without START"})
            else:
                sess.stop()
                app.pipeline.wake()
        else:
            ws.send_json({"event": "error", "error": "unknown command %r" % cmd[:40]})
        return sess

    def _record_session(self, req, rid, trace_id, parent, arrival, status):
        """Spans, metrics and the closing event of a realtime session: the
        file requests' spans plus one decode_step span per step."""
        app = self.app
        end = now_ns()
        t = req.t if req is not None else {}
        if req is not None and "stage_complete" not in t:
            app.pipeline.mark(req, "stage_complete", {"status": "cancelled" if status == 499 else "error",
                                                      "decode_steps": req.steps})

        def dur(a, b):
            return (t[b] - t[a]) / 1e9 if a in t and b in t else None

        m = app.metrics
        m.observe("queue", dur("scheduler_queue_enter", "scheduler_prefill_start"))
        m.observe("first_forward", dur("scheduler_prefill_start", "scheduler_prefill_end"))
        m.observe("decode", dur("scheduler_prefill_end", "stage_complete"))
        if not app.exporter.enabled:
            return
        audio_s = round(req.received / 2.0 / SAMPLE_RATE, 4) if req is not None else 0.0
        attrs = {
            "request.id": rid, "gen_ai.request.id": rid, "gen_ai.request.model": MODEL_ID,
            "http.request.method": "GET", "http.route": urllib.parse.urlsplit(self.path).path,
            "http.response.status_code": status, "asr.stream": True, "asr.realtime": True,
            "audio.seconds": audio_s, "gen_ai.latency.e2e": (end - arrival) / 1e9,
        }
        q_s = dur("scheduler_queue_enter", "scheduler_prefill_start")
        if q_s is not None:
            attrs["gen_ai.latency.time_in_queue"] = q_s
        if req is not None:
            attrs["batch.size_at_admission"] = req.batch_at_admission
            attrs["decode.steps"] = req.steps
        span_id = req.span_id if req is not None else new_span_id()
        root = {"trace_id": trace_id, "span_id": span_id, "parent": parent, "name": "transcription",
                "kind": 2, "start": arrival, "end": end, "attrs": attrs}
        if status != 200:
            root["status"] = {"code": 2, "message": "status %d" % status}
        app.exporter.record(root)
        if req is None:
            return

        def child(name, a_ns, b_ns, extra):
            ca = {"request.id": rid}
            ca.update(extra)
            app.exporter.record({"trace_id": trace_id, "span_id": new_span_id(), "parent": span_id,
                                 "name": name, "kind": 1, "start": a_ns, "end": b_ns, "attrs": ca})

        for name, a, b, extra in (
                ("build", "scheduler_request_build_start", "scheduler_request_build_end",
                 {"audio.seconds": 0.0}),
                ("queue", "scheduler_queue_enter", "scheduler_prefill_start",
                 {"batch.size_at_admission": req.batch_at_admission}),
                ("first_forward", "scheduler_prefill_start", "scheduler_prefill_end",
                 {"batch.size_at_admission": req.batch_at_admission,
                  "chunk_ms": app.args.chunk_ms}),
                ("decode", "scheduler_prefill_end", "stage_complete",
                 {"decode.steps": req.steps, "audio.seconds": audio_s})):
            if a in t:
                child(name, t[a], t.get(b, end), extra)
        for a_ns, b_ns, step, step_audio, backlog in list(req.step_spans):
            child("decode_step", a_ns, b_ns, {"decode.step": step, "audio.seconds": round(step_audio, 4),
                                              "backlog.seconds": round(backlog, 4)})


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
        self.instance = args.instance or default_instance_id()
        self.exporter = SpanExporter(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
                                     self.metrics, instance_id=self.instance)
        if args.engine == "whisper":
            self.pipeline = _whisper().WhisperPipeline(args, self.metrics, self.profiler)
        else:
            self.pipeline = Pipeline(args, self.metrics, self.profiler)
        if args.diarize:
            import refserver_diarize  # beside this file; stdlib only
            self.pipeline.dz = refserver_diarize
            self.pipeline.diarize = refserver_diarize.load_manifest(args.diarize)


def _whisper():
    """Import whisper_engine (beside this file) on demand: it needs torch
    and numpy once the model loads, and only rscommon, not this module."""
    import whisper_engine
    return whisper_engine


def parse_args(argv):
    engines = ("pocketsphinx", "whisper")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--engine", choices=engines, default="pocketsphinx")
    engine, _ = pre.parse_known_args(argv)
    p = argparse.ArgumentParser(description="asrprof reference ASR server (PocketSphinx or "
                                "Whisper, SGLang-Omni-shaped pipeline)")
    p.add_argument("--engine", choices=engines, default="pocketsphinx",
                   help="recognizer: pocketsphinx (default; CPU, Debian packages) or whisper "
                   "(PyTorch; `--engine whisper --help` lists its flags)")
    if engine.engine == "whisper":
        _whisper().add_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--build-workers", type=int, default=2,
                   help="request build threads (audio decode + resample)")
    p.add_argument("--build-max-pending", type=int, default=16,
                   help="requests waiting for or in the build pool before HTTP 503")
    p.add_argument("--build-delay", type=float, default=0,
                   help="extra seconds each build takes, as a heavier preprocessor would "
                   "(e.g. 0.5; default 0)")
    p.add_argument("--max-running-requests", type=int, default=8,
                   help="requests the scheduler decodes at once (= decoder pool size)")
    p.add_argument("--chunk-ms", type=int, default=100,
                   help="audio per decode step in milliseconds")
    p.add_argument("--decode-interval", type=float, default=0.48,
                   help="realtime sessions: seconds of audio per decode step (one partial "
                   "hypothesis each)")
    p.add_argument("--host-step-ms", type=float, default=0.0,
                   help="extra host work per decode step, in ms per running request: a Python "
                   "busy loop holding the GIL on the scheduler thread (default 0)")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="a wait per decode step, in ms per running request, that the scheduler "
                   "thread sleeps through off-CPU, as a blocking GPU synchronize would (default 0)")
    p.add_argument("--response-delay-ms", type=float, default=0.0,
                   help="hold each transcription's answer this long after the decode ends, as a "
                   "buffering proxy or a slow network would (default 0)")
    p.add_argument("--sync-lib", metavar="LIB", default="",
                   help="a stand-in CUDA driver (probe/cuda/testdata/stub.c built as "
                   "libcuda.so.1) loaded at start; with --sync-step-ms > 0 each decode step "
                   "calls its cuStreamSynchronize, which the cuda probe times (default: none)")
    p.add_argument("--sync-step-ms", type=float, default=0.0,
                   help="with --sync-lib: GPU wait per decode step, in ms per running request: "
                   "the scheduler thread asleep in LIB's cuStreamSynchronize, GIL released "
                   "(default 0)")
    p.add_argument("--upload-kbps", type=float, default=0,
                   help="read each upload at most this fast, in KB/s, as a slow network would "
                   "(default 0: as fast as it comes)")
    p.add_argument("--access-log", action="store_true", help="log every HTTP request to stderr")
    p.add_argument("--diarize", metavar="MANIFEST", default="",
                   help="serve the diarization model too: a request with model="
                   + DIARIZE_MODEL_ID + " is answered in MOSS-Transcribe-Diarize's markup "
                   "[start][S01]words[end], the recognizer's words and word times with the "
                   "speakers of MANIFEST's reference markup (a JSONL manifest; the upload's "
                   "audio is found by its SHA-256); docs/REFSERVER.md")
    p.add_argument("--instance", default="",
                   help="this server's name among several behind a router (--router): the "
                   "service.instance.id of its spans, on its transcription span and in /health "
                   "(default host-pid)")
    a = p.parse_args(argv)
    for name in ("build_workers", "build_max_pending", "max_running_requests", "chunk_ms"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if not 0 <= a.host_step_ms <= 1000:
        p.error("--host-step-ms must be between 0 and 1000")
    for name in ("step_sleep_ms", "response_delay_ms"):
        if not 0 <= getattr(a, name) <= 10000:
            p.error("--%s must be between 0 and 10000" % name.replace("_", "-"))
    if not 0 <= a.sync_step_ms <= 1000:
        p.error("--sync-step-ms must be between 0 and 1000")
    if a.sync_step_ms > 0 and not a.sync_lib:
        p.error("--sync-step-ms needs --sync-lib")
    if a.sync_lib and a.engine != "pocketsphinx":
        p.error("--sync-lib needs --engine pocketsphinx")
    if a.upload_kbps < 0:
        p.error("--upload-kbps must be at least 0")
    if not 0 <= a.build_delay <= 60:
        p.error("--build-delay must be between 0 and 60 seconds")
    if not 0.01 <= a.decode_interval <= 10:
        p.error("--decode-interval must be between 0.01 and 10 seconds")
    if a.engine == "whisper":
        _whisper().check_args(p, a)
        if a.diarize:
            p.error("--diarize needs --engine pocketsphinx (its word times)")
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--router" in argv:
        # refserver.py --router --workers URL,URL: the router (router.py
        # beside this file) instead of a server.
        import router
        return router.main([a for a in argv if a != "--router"])
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
    print("refserver: listening on http://%s:%d (%s)"
          % (host, port, app.pipeline.loading_note()), flush=True)
    t0 = time.monotonic()
    try:
        app.pipeline.load_decoders()
    except Exception as e:
        print("refserver: cannot load %s: %s" % (app.pipeline.engine_label, e),
              file=sys.stderr, flush=True)
        httpd.shutdown()
        return 1
    app.pipeline.ready.set()
    print("refserver: ready in %.1fs (%s, otlp %s)"
          % (time.monotonic() - t0, app.pipeline.ready_note(), app.exporter.endpoint or "off"),
          flush=True)
    while acceptor.is_alive():
        acceptor.join(0.5)
    app.pipeline.stop()
    app.profiler.stop()
    app.exporter.close()
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
