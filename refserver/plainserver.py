#!/usr/bin/python3
"""plainserver: an ASR server that emits nothing, for black-box diagnosis.

It imitates what most users run: a Hugging Face generate() behind a small
web server, with no OpenTelemetry, no profile events, no stage events.  The
transcript is a constant; what is real is the timing, which shows ONE
performance cause at a time so a profiler's verdict can be checked against a
known truth.  Python 3 standard library only; run with /usr/bin/python3.

API (as refserver.py): GET /health, GET /v1/models, POST
/v1/audio/transcriptions (multipart: file=WAV, optional model, language,
response_format), and GET /metrics with --vllm-metrics.

Threads, named in Python and in the OS (/proc/PID/task/*/comm): "http" for
each connection's handler, "generate" for the model worker(s).

Knobs and what each one emulates:
  --service-ms, --per-audio-ms  cost of one generate: service-ms plus
        per-audio-ms x audio seconds (the WAV header's duration).
  --work host    generate is a Python busy loop holding the GIL until its
                 thread has used that much CPU time: a host-bound server.
                 Waits for the CPU (--contend) or the GIL (--mode cap)
                 stretch it, as they would a real one.
  --work native  generate hashes a buffer until its thread has used that
                 much CPU time: native code that lets go of the GIL
                 (hashlib over 64 KB at a time), so threads run in
                 parallel on the host's cores, as torch's ops do.
  --work sleep   generate sleeps: the worker waits off-CPU as on an external
                 device; the limit is no resource of this host.
  --mode serial  one worker, FIFO queue: one request in service at a time.
  --mode cap --cap N       N workers: at most N requests in service.
  --spin         serial and cap: a worker with no request polls its queue
                 without sleeping, a core busy while idle (SGLang's
                 scheduler without --sleep-on-idle, sglang issue #3708).
  --procs P      P processes share the listening socket (forked after it
                 listens), each with the workers above and a GIL of its
                 own: gunicorn's or uvicorn's --workers. A connection
                 stays with the process that accepted it; the traps and
                 /metrics count in each process apart.
  --mode batch --max-batch N  one worker takes up to N queued requests
        (waiting up to --batch-wait-ms for more), runs ONE generate costing
        service-ms + per-audio-ms x the longest audio (+ --per-item-ms x
        batch size), and answers the whole batch at the same moment.
  --upload-kbps K  reads request bodies at most K kB/s (1000 B) with a small
        SO_RCVBUF, so clients' sends stall: a slow upload path.
  --response-delay-ms D  sends status, headers and the first body byte at
        once after generate, then the rest D ms later: a slow response path.
  --contend N  N busy child processes pinned to the server's CPU (CPU 0
        unless --cpu): CPU contention from OTHER processes.
  --cpu K      pins the server (all its threads) to CPU K.
  --backlog B  its listen backlog (5, as Python's http.server): a client
        whose SYN finds the accept queue full is answered a second later,
        after its SYN's retry (connection setup).
  --accept-gap-ms G  accepts a connection at least G ms after the one
        before, so that connections opened at once fill the backlog
        whatever the machine's load (with --backlog: SYNs dropped for sure).
Traps for the run's validity checks (docs/VALIDITY.md); each changes one
thing a capture must notice about itself:
  --fail-all     every transcription POST is answered 404 with a message,
                 as a server whose route is elsewhere (a wrong port).
  --fail-every K every K-th transcription POST is answered 500 with a
                 message (some failing).
  --cache-ms M   a content cache: audio whose bytes were seen before is
                 answered after M ms instead of a generate (an encoder
                 cache keyed by content).
  --drift-requests N --drift-ms D  the first N requests after start-up
                 cost D ms more (a server slow until it is warm).
  --runaway-ms D the first distinct audio the server receives costs D ms
                 more every time it is sent (one runaway sample).
  --jitter-ms J  each generate costs a random 0..J ms more (seeded by
                 --seed): a noisy server, for the sample-size check.
  --cotenant N   N busy processes on the server's CPU (CPU 0 unless --cpu)
                 OUTSIDE its process tree (double fork and setsid, named
                 "cotenant"): another tenant's CPU time on the server's
                 core, for the co-tenant check. Each exits when the
                 server's pid is gone (polled every 200 ms) or after 15 min.
  An open-loop overload needs no flag: --rate above what --mode serial
  serves.
  --vllm-metrics  GET /metrics in Prometheus text format with vLLM v1's
        names, labels and latency buckets (vllm/v1/metrics/loggers.py);
        otherwise /metrics is 404.  As in vLLM, a request "arrives" when its
        upload is read and parsed: queue time = arrival -> its generate
        starts, inference = its generate (prefill the first 20 %, decode the
        other 80 %), e2e = arrival -> generate ends (before the response).
"""

import argparse, atexit, ctypes, ctypes.util, hashlib, io, json, os, queue, random, re  # noqa: E401
import signal, socket, subprocess, sys, threading, time, wave  # noqa: E401
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_ID = "plain-asr"
NATIVE_BUF = bytes(65536)  # --work native: hashlib lets go of the GIL over 2 KB
TEXT = "the quick brown fox"
MAX_UPLOAD = 64 << 20
PYTHON = "/usr/bin/python3"
# vLLM v1's request_latency_buckets (loggers.py), for all five histograms.
BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LABELS = 'model_name="%s",engine="0"' % MODEL_ID

_libc = None


def set_thread_name(name):
    """Name the calling thread in Python and in the OS (prctl PR_SET_NAME)."""
    global _libc
    threading.current_thread().name = name
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Request:
    def __init__(self, audio_s, extra_ms=0.0):
        self.audio_s = audio_s
        self.extra_ms = extra_ms  # the traps' added cost (drift, runaway, jitter)
        self.arrival = time.monotonic()
        self.done = threading.Event()


class Histogram:
    def __init__(self, name, help_):
        self.name, self.help = name, help_
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket, +Inf last
        self.sum = 0.0

    def observe(self, v):
        i = next((i for i, b in enumerate(BUCKETS) if v <= b), len(BUCKETS))
        self.counts[i] += 1
        self.sum += v

    def render(self, out):
        out += ["# HELP %s %s" % (self.name, self.help), "# TYPE %s histogram" % self.name]
        acc = 0
        for b, c in zip(BUCKETS + ("+Inf",), self.counts):
            acc += c
            out.append('%s_bucket{%s,le="%s"} %.1f' % (self.name, LABELS, b, acc))
        out += ["%s_sum{%s} %r" % (self.name, LABELS, self.sum),
                "%s_count{%s} %.1f" % (self.name, LABELS, acc)]


class Engine:
    """The model: a queue and the worker thread(s) that run generate."""

    def __init__(self, args):
        self.args = args
        self.q = queue.Queue()
        self.lock = threading.Lock()  # guards the metrics below
        self.waiting = self.running = self.success = 0
        self.hist = {k: Histogram("vllm:" + k, h) for k, h in (
            ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
            ("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
            ("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
            ("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
            ("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."))}
        workers = args.cap if args.mode == "cap" else 1
        loop = self.batch_loop if args.mode == "batch" else self.serve_loop
        for _ in range(workers):
            threading.Thread(target=loop, name="generate", daemon=True).start()

    def submit(self, req):  # from an http thread: queue it, wait for its answer
        with self.lock:
            self.waiting += 1
        self.q.put(req)
        req.done.wait()

    def generate(self, batch):
        a = self.args
        items = len(batch) if a.mode == "batch" else 0  # --per-item-ms: batch only
        cost = (a.service_ms + a.per_audio_ms * max(r.audio_s for r in batch)
                + a.per_item_ms * items + max(r.extra_ms for r in batch)) / 1000.0
        t0 = time.monotonic()
        with self.lock:
            self.waiting -= len(batch)
            self.running += len(batch)
        if a.work == "sleep":
            time.sleep(cost)
        elif a.work == "native":  # this thread's CPU time in C, without the GIL
            end, h = time.thread_time() + cost, hashlib.sha256()
            while time.thread_time() < end:
                h.update(NATIVE_BUF)
        else:  # host: burn this thread's CPU time in Python, holding the GIL
            end, x = time.thread_time() + cost, 0
            while time.thread_time() < end:
                x += 1
        t1 = time.monotonic()
        with self.lock:
            self.running -= len(batch)
            self.success += len(batch)
            h, run = self.hist, t1 - t0
            for r in batch:
                h["e2e_request_latency_seconds"].observe(t1 - r.arrival)
                h["request_queue_time_seconds"].observe(t0 - r.arrival)
                h["request_inference_time_seconds"].observe(run)
                h["request_prefill_time_seconds"].observe(0.2 * run)
                h["request_decode_time_seconds"].observe(0.8 * run)
        for r in batch:  # answer all of a batch at the same moment
            r.done.set()

    def serve_loop(self):  # serial and cap: one request per generate
        set_thread_name("generate")
        while True:
            if not self.args.spin:
                self.generate([self.q.get()])
                continue
            try:  # a busy event loop: polls the queue, never sleeps
                r = self.q.get_nowait()
            except queue.Empty:
                continue
            self.generate([r])

    def batch_loop(self):
        set_thread_name("generate")
        n, wait = self.args.max_batch, self.args.batch_wait_ms / 1000.0
        while True:
            batch = [self.q.get()]
            deadline = time.monotonic() + wait
            while len(batch) < n:
                try:
                    left = deadline - time.monotonic()
                    batch.append(self.q.get(timeout=left) if left > 0 else self.q.get_nowait())
                except queue.Empty:
                    break
            self.generate(batch)

    def metrics(self):
        out = []
        with self.lock:
            for name, help_, v in (
                    ("num_requests_running", "Number of requests in model execution batches.", self.running),
                    ("num_requests_waiting", "Number of requests waiting to be processed.", self.waiting)):
                out += ["# HELP vllm:%s %s" % (name, help_), "# TYPE vllm:%s gauge" % name,
                        "vllm:%s{%s} %.1f" % (name, LABELS, v)]
            out += ["# HELP vllm:request_success_total Count of successfully processed requests.",
                    "# TYPE vllm:request_success_total counter"]
            for reason in ("stop", "length", "abort"):
                out.append('vllm:request_success_total{%s,finished_reason="%s"} %.1f'
                           % (LABELS, reason, self.success if reason == "stop" else 0))
            for h in self.hist.values():
                h.render(out)
        return "\n".join(out) + "\n"


def parse_multipart(ctype, body):
    """{field name: bytes} of a multipart/form-data body."""
    m = re.search(r'boundary="?([^";]+)"?', ctype or "")
    if not m or not ctype.startswith("multipart/form-data"):
        raise ValueError("want multipart/form-data with a boundary")
    fields = {}
    for part in body.split(b"--" + m.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, sep, data = part.partition(b"\r\n\r\n")
        name = re.search(rb'[;\s]name="([^"]*)"', head)
        if sep and name:
            fields[name.group(1).decode("utf-8", "replace")] = data[:-2] if data.endswith(b"\r\n") else data
    return fields


def upload_length(h, limit):
    """The body length of a transcription POST to handler h, or None after
    answering it (404 for another path, 411 without a length, 413 above
    limit; the body is then left unread and the connection closed)."""
    if h.path.split("?")[0] != "/v1/audio/transcriptions":
        h.close_connection = True
        h.reply(404, {"error": "not found: " + h.path})
        return None
    try:
        n = int(h.headers.get("Content-Length", ""))
    except ValueError:
        h.close_connection = True
        h.reply(411, {"error": "Content-Length required"})
        return None
    if n < 0 or n > limit:
        h.close_connection = True
        h.reply(413, {"error": "body too large"})
        return None
    return n


def audio_seconds(data):
    """Duration from the WAV header; else assume 16 kHz 16-bit mono."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            return w.getnframes() / float(w.getframerate())
    except Exception:  # not a WAV wave reads (wave.Error, EOFError, ...)
        return len(data) / 32000.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "plainserver"
    disable_nagle_algorithm = True  # as uvicorn: small writes go out at once

    def log_message(self, *a):  # quiet, like a production server's access log off
        pass

    def reply(self, code, body, ctype="application/json", delay=0.0):
        if not isinstance(body, bytes):
            body = (json.dumps(body) if ctype == "application/json" else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()  # flushes the status line and headers
        if delay > 0 and body:
            self.wfile.write(body[:1])
            time.sleep(delay)
            body = body[1:]
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        elif self.path == "/metrics" and self.server.args.vllm_metrics:
            self.reply(200, self.server.engine.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.reply(404, {"error": "not found: " + self.path})

    def read_body(self, n):
        kbps = self.server.args.upload_kbps
        if not kbps:
            return self.rfile.read(n)
        chunks, got, t0 = [], 0, time.monotonic()
        while got < n:
            c = self.rfile.read(min(1024, n - got))
            if not c:
                break
            chunks.append(c)
            got += len(c)
            ahead = t0 + got / (kbps * 1000.0) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        return b"".join(chunks)

    def do_POST(self):
        n = upload_length(self, MAX_UPLOAD)
        if n is None:
            return
        body = self.read_body(n)
        a, traps = self.server.args, self.server.traps
        if a.fail_all:  # the body is read first: the client sees the answer, not a reset
            return self.reply(404, {"error": "no route for POST %s on this port "
                                    "(the ASR API listens elsewhere)" % self.path})
        try:
            fields = parse_multipart(self.headers.get("Content-Type"), body)
        except ValueError as e:
            return self.reply(400, {"error": str(e)})
        if "file" not in fields:
            return self.reply(400, {"error": "missing form field 'file'"})
        extra, cached = traps.admit(fields["file"])
        if extra is None:
            return self.reply(500, {"error": "CUDA out of memory while allocating the decoder cache"})
        if cached:
            time.sleep(a.cache_ms / 1000.0)
        else:
            req = Request(audio_seconds(fields["file"]), extra)
            self.server.engine.submit(req)
        delay = self.server.args.response_delay_ms / 1000.0
        fmt = fields.get("response_format", b"json").decode("utf-8", "replace")
        if fmt == "text":
            self.reply(200, TEXT + "\n", "text/plain; charset=utf-8", delay)
        else:
            self.reply(200, {"text": TEXT}, delay=delay)


class Traps:
    """The validity traps' state: requests counted in arrival order, the
    audio seen (by content), the runaway's content."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.count = 0
        self.seen = set()
        self.runaway = None
        self.rng = random.Random(args.seed)

    def admit(self, audio):
        """(extra ms, cached) for one request's audio; extra None: fail it."""
        a, key = self.args, hashlib.sha256(audio).digest()
        with self.lock:
            self.count += 1
            if a.fail_every and self.count % a.fail_every == 0:
                return None, False
            cached = a.cache_ms > 0 and key in self.seen
            self.seen.add(key)
            if self.runaway is None:
                self.runaway = key
            extra = a.drift_ms if self.count <= a.drift_requests else 0.0
            if a.runaway_ms and key == self.runaway:
                extra += a.runaway_ms
            if a.jitter_ms:
                extra += self.rng.uniform(0, a.jitter_ms)
        return extra, cached


class Server(ThreadingHTTPServer):
    daemon_threads = True
    rcvbuf = 0
    accept_gap = 0.0  # seconds
    last_accept = 0.0

    def get_request(self):
        if self.accept_gap:
            time.sleep(max(0.0, self.last_accept + self.accept_gap - time.monotonic()))
        r = super().get_request()
        self.last_accept = time.monotonic()
        return r

    def server_bind(self):
        if self.rcvbuf:  # set before listen(): accepted sockets inherit it, and
            # the TCP window they advertise stays small from the handshake on
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        super().server_bind()

    def process_request(self, request, client_address):
        threading.Thread(target=self.process_request_thread, args=(request, client_address),
                         name="http", daemon=True).start()

    def process_request_thread(self, request, client_address):
        set_thread_name("http")
        super().process_request_thread(request, client_address)


# A contender: names itself, dies with its parent (PR_SET_PDEATHSIG), says
# it is ready, spins.
CONTEND = ("import ctypes,os,signal,sys\n"
           "c=ctypes.CDLL(None);c.prctl(1,signal.SIGKILL);c.prctl(15,b'contend')\n"
           "if os.getppid()!=int(sys.argv[1]):sys.exit()\n"
           "os.write(1,b'r');os.close(1)\n"
           "while True:pass\n")


def start_contenders(n, cpu):
    kids = []

    def kill():
        for p in kids:
            if p.poll() is None:
                p.kill()
                p.wait()
    atexit.register(kill)
    for _ in range(n):
        p = subprocess.Popen([PYTHON, "-c", CONTEND, str(os.getpid())], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        kids.append(p)
        os.sched_setaffinity(p.pid, {cpu})
        p.stdout.read(1)  # running before we say we listen
        p.stdout.close()
    return kids


# A co-tenant: names itself, says it is ready, spins until its
# server (argv[1]) is gone or 15 minutes have passed.
COTENANT = ("import ctypes,os,sys,time\n"
            "ctypes.CDLL(None).prctl(15,b'cotenant')\n"
            "server=int(sys.argv[1]);w=int(sys.argv[2]);os.write(w,b'r');os.close(w)\n"
            "t0=t=time.monotonic()\n"
            "while time.monotonic()-t0<900:\n"
            "    if time.monotonic()-t>0.2:\n"
            "        t=time.monotonic()\n"
            "        try:os.kill(server,0)\n"
            "        except ProcessLookupError:break\n")


def start_cotenants(n, cpu):
    """Starts n spinners on cpu outside this process's tree: each is the
    grandchild of a fork that calls setsid and exits, so it is reparented
    away (to init or the nearest subreaper)."""
    server = os.getpid()
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    os.sched_setaffinity(0, {cpu})
                    os.set_inheritable(w, True)
                    os.execv(PYTHON, [PYTHON, "-c", COTENANT, str(server), str(w)])
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        os.read(r, 1)  # running before we say we listen
        os.close(r)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="An ASR test server that emits nothing "
                                 "(no OTel, no events); see the top of this file.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--service-ms", type=float, default=100.0, help="fixed cost of a generate")
    ap.add_argument("--per-audio-ms", type=float, default=0.0, help="added cost per audio second")
    ap.add_argument("--work", choices=("host", "native", "sleep"), default="host",
                    help="host: busy loop holding the GIL; native: hashing without the GIL; sleep: off-CPU wait")
    ap.add_argument("--mode", choices=("serial", "cap", "batch"), default="serial")
    ap.add_argument("--cap", type=int, default=1, help="workers in --mode cap")
    ap.add_argument("--spin", action="store_true", help="serial and cap: an idle worker polls its queue without sleeping")
    ap.add_argument("--procs", type=int, default=1, help="processes sharing the listening socket")
    ap.add_argument("--max-batch", type=int, default=8, help="batch size limit in --mode batch")
    ap.add_argument("--batch-wait-ms", type=float, default=0.0, help="--mode batch: wait this long for a fuller batch")
    ap.add_argument("--per-item-ms", type=float, default=0.0, help="--mode batch: added cost per batch member")
    ap.add_argument("--upload-kbps", type=float, default=0.0, help="read bodies at most K kB/s (0: off)")
    ap.add_argument("--response-delay-ms", type=float, default=0.0, help="first body byte to last byte")
    ap.add_argument("--contend", type=int, default=0, help="busy child processes on the server's CPU")
    ap.add_argument("--cpu", type=int, default=None, help="pin the server to this CPU")
    ap.add_argument("--vllm-metrics", action="store_true", help="serve vLLM-named Prometheus /metrics")
    ap.add_argument("--fail-all", action="store_true", help="answer every transcription with 404 and a message")
    ap.add_argument("--fail-every", type=int, default=0, help="answer every K-th transcription with 500 (0: off)")
    ap.add_argument("--cache-ms", type=float, default=0.0, help="answer audio seen before after this many ms (0: off)")
    ap.add_argument("--drift-requests", type=int, default=0, help="the first N requests cost --drift-ms more")
    ap.add_argument("--drift-ms", type=float, default=0.0, help="added cost of the first --drift-requests")
    ap.add_argument("--runaway-ms", type=float, default=0.0, help="added cost of the first distinct audio, every time")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="a random 0..J ms more per generate")
    ap.add_argument("--seed", type=int, default=1, help="--jitter-ms's random seed")
    ap.add_argument("--backlog", type=int, default=5, help="the listen backlog (Python's http.server: 5)")
    ap.add_argument("--accept-gap-ms", type=float, default=0.0, help="the least time between two accepts")
    ap.add_argument("--cotenant", type=int, default=0, help="busy processes on the server's CPU outside its tree")
    a = ap.parse_args(argv)
    if not 0 <= a.port <= 65535:
        ap.error("--port must be in 0..65535")
    for k in ("service_ms", "per_audio_ms", "batch_wait_ms", "per_item_ms", "upload_kbps",
              "response_delay_ms", "contend", "fail_every", "cache_ms", "drift_requests", "drift_ms",
              "runaway_ms", "jitter_ms", "cotenant"):
        if not 0 <= getattr(a, k) < 1e9:  # also rejects nan and inf
            ap.error("--%s must be a number >= 0" % k.replace("_", "-"))
    if a.cap < 1 or a.max_batch < 1 or a.procs < 1:
        ap.error("--cap, --max-batch and --procs must be >= 1")
    if a.cap != 1 and a.mode != "cap":
        ap.error("--cap needs --mode cap")
    if a.cpu is None and (a.contend or a.cotenant):
        a.cpu = 0  # contenders need a CPU to share with the server
    if a.cpu is not None and a.cpu not in os.sched_getaffinity(0):
        ap.error("--cpu %d is not an allowed CPU (%s)" % (a.cpu, sorted(os.sched_getaffinity(0))))
    return a


def main(argv):
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # before any thread: all inherit it
    Server.rcvbuf = 8192 if args.upload_kbps else 0
    Server.request_queue_size = args.backlog
    Server.accept_gap = args.accept_gap_ms / 1000.0
    if ":" in args.host:
        Server.address_family = socket.AF_INET6
    server = Server((args.host, args.port), Handler)
    child = False
    for _ in range(args.procs - 1):  # before any thread: a fork keeps only its caller
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: ends with the first
            child = True
            break
    server.args, server.engine, server.traps = args, Engine(args), Traps(args)
    if not child:
        start_contenders(args.contend, args.cpu)
        start_cotenants(args.cotenant, args.cpu)

    def on_term(signum, frame):
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, on_term)
    host, port = server.server_address[:2]
    if not child:
        print("plainserver: listening on http://%s:%d" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:  # atexit then kills the contenders
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
