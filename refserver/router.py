#!/usr/bin/python3
"""asrprof's router: one address in front of N reference-server workers.

The layout of the seed runbook's CI (DP 2: each model as two workers behind
a router), small: every transcription request goes to one worker, chosen
round robin or by fewest requests in flight (--policy), and is relayed back
as it comes (SSE streams included); a realtime session (a WebSocket upgrade)
goes to one worker the same way and its frames are relayed both ways.  In the spirit of SGLang-Omni's router:

    client ──HTTP──► router (router-http) ──HTTP──► worker 0 (refserver.py)
                     one "route" span              └──► worker 1 ...

Telemetry (docs/REFSERVER.md, "The router"):
  - a span of its own per request, `route` (SERVER, service.name
    asrprof-router), child of the client's traceparent; the worker gets a
    traceparent whose parent is that span, so the worker's spans are in the
    client's trace.  Attributes: request.id, router.worker (the worker's
    name: its /health "instance", else w<i>), router.worker.url,
    router.policy, router.worker.in_flight (its requests in flight when this
    one was sent, this one excluded), http.response.status_code;
  - the response carries X-Worker (the same name) and X-Worker-Url;
  - the X-Request-Id the client sent (or a new one) goes to the worker, so
    the worker's request-profile events name it;
  - GET /diagnostics: per-worker dispatch counts, requests in flight,
    completed and failed, busy seconds (time with a request in flight);
  - /health (200 when every worker answers 200), /v1/models (the first
    worker's), /start_request_profile and /stop_request_profile (sent to
    every worker), /metrics (the router's own counters).

Standard library only, plus rscommon.py beside it (the reference server's
OTLP span code, shared with refserver.py).

    /usr/bin/python3 refserver/router.py --port 8000 \\
        --workers http://127.0.0.1:8001,http://127.0.0.1:8002 --policy least-loaded
"""

import argparse
import http.client
import http.server
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rscommon  # noqa: E402  (the span exporter and helpers refserver.py uses too)

SERVICE_NAME = "asrprof-router"
POLICIES = ("round-robin", "least-loaded")
# Request headers passed on to the worker (traceparent is the router's own).
PASS_HEADERS = ("Content-Type", "Accept", "Expect")
# Response headers passed back to the client.
BACK_HEADERS = ("Content-Type", "Cache-Control", "Retry-After")


class Worker:
    def __init__(self, index, url):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname or not u.port:
            raise ValueError("worker URL must be http://HOST:PORT, got %r" % url)
        self.index = index
        self.url = "http://%s:%d" % (u.hostname, u.port)
        self.host, self.port = u.hostname, u.port
        self.name = "w%d" % index  # until its /health names it
        self.dispatched = 0
        self.in_flight = 0
        self.completed = 0
        self.failed = 0
        self.busy_ns = 0
        self.busy_since = 0

    def snapshot(self, now):
        busy = self.busy_ns + (now - self.busy_since if self.in_flight else 0)
        return {"index": self.index, "name": self.name, "url": self.url,
                "dispatched": self.dispatched, "in_flight": self.in_flight,
                "completed": self.completed, "failed": self.failed,
                "busy_s": round(busy / 1e9, 6)}


class Router:
    """The workers and the dispatch policy; every counter under one lock."""

    def __init__(self, urls, policy):
        if not urls:
            raise ValueError("--workers names no worker")
        if policy not in POLICIES:
            raise ValueError("--policy must be one of %s" % ", ".join(POLICIES))
        self.workers = [Worker(i, u) for i, u in enumerate(urls)]
        self.policy = policy
        self.lock = threading.Lock()
        self.next = 0
        self.started = time.time()

    def acquire(self):
        """Pick a worker and count the request in flight on it; returns
        (worker, its in-flight count before this request)."""
        with self.lock:
            n = len(self.workers)
            if self.policy == "round-robin":
                w = self.workers[self.next % n]
                self.next += 1
            else:
                # fewest in flight; ties go round robin from the last pick
                order = [self.workers[(self.next + k) % n] for k in range(n)]
                w = min(order, key=lambda x: x.in_flight)
                self.next = w.index + 1
            before = w.in_flight
            if w.in_flight == 0:
                w.busy_since = rscommon.now_ns()
            w.in_flight += 1
            w.dispatched += 1
            return w, before

    def release(self, w, ok):
        with self.lock:
            w.in_flight -= 1
            if w.in_flight == 0:
                w.busy_ns += rscommon.now_ns() - w.busy_since
            if ok:
                w.completed += 1
            else:
                w.failed += 1

    def diagnostics(self):
        now = rscommon.now_ns()
        with self.lock:
            ws = [w.snapshot(now) for w in self.workers]
        return {"policy": self.policy, "uptime_s": round(time.time() - self.started, 3),
                "total_dispatched": sum(w["dispatched"] for w in ws), "workers": ws}

    def metrics(self):
        d = self.diagnostics()
        out = ["# HELP asr_router_dispatched_total Requests sent to each worker.",
               "# TYPE asr_router_dispatched_total counter"]
        for w in d["workers"]:
            out.append('asr_router_dispatched_total{worker="%s"} %d' % (w["name"], w["dispatched"]))
        out += ["# HELP asr_router_in_flight Requests in flight on each worker.",
                "# TYPE asr_router_in_flight gauge"]
        for w in d["workers"]:
            out.append('asr_router_in_flight{worker="%s"} %d' % (w["name"], w["in_flight"]))
        out += ["# HELP asr_router_busy_seconds_total Time each worker had a request in flight.",
                "# TYPE asr_router_busy_seconds_total counter"]
        for w in d["workers"]:
            out.append('asr_router_busy_seconds_total{worker="%s"} %.6f' % (w["name"], w["busy_s"]))
        return "\n".join(out) + "\n"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "asrprof-router/1"
    disable_nagle_algorithm = True  # as refserver.Handler: no delayed-ACK wait per response
    router = None
    exporter = None
    timeout_s = 600.0
    access_log = False

    def handle(self):
        rscommon.set_thread_name("router-http")
        super().handle()

    def log_message(self, fmt, *args):
        if self.access_log:
            sys.stderr.write("%s - %s\n" % (self.address_string(), fmt % args))

    def _request_id(self):
        rid = (self.headers.get("X-Request-Id") or "").strip()
        if rid and len(rid) <= 256 and rid.isprintable():
            return rid
        return "transcription-%s" % uuid.uuid4()

    def _send(self, status, body, ctype, extra=None):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status, obj, extra=None):
        self._send(status, json.dumps(obj), "application/json", extra)

    def _error(self, status, message, err_type, extra=None):
        self._json(status, {"error": {"message": message, "type": err_type, "code": status}}, extra)

    def _body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            parts = []
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _call(self, w, method, path, body=None, headers=None, timeout=None):
        """One request to worker w; returns (status, headers, body bytes)."""
        c = http.client.HTTPConnection(w.host, w.port, timeout=timeout or self.timeout_s)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheaders(), r.read()
        finally:
            c.close()

    # -- routes

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        rt = self.router
        if "websocket" in (self.headers.get("Upgrade") or "").lower():
            return self._relay_websocket()
        if path == "/health":
            ws, ok = [], True
            for w in rt.workers:
                try:
                    st, _, body = self._call(w, "GET", "/health", timeout=5)
                    info = json.loads(body or b"{}")
                except (OSError, http.client.HTTPException, ValueError) as e:
                    st, info = 0, {"error": str(e)}
                if st == 200 and isinstance(info, dict) and info.get("instance"):
                    with rt.lock:
                        w.name = str(info["instance"])
                ok = ok and st == 200
                ws.append({"name": w.name, "url": w.url, "status": st})
            self._json(200 if ok else 503, {"status": "ok" if ok else "loading",
                                            "policy": rt.policy, "workers": ws})
        elif path == "/v1/models":
            for w in rt.workers:
                try:
                    st, hdrs, body = self._call(w, "GET", "/v1/models", timeout=5)
                except (OSError, http.client.HTTPException):
                    continue
                return self._send(st, body, dict(hdrs).get("Content-Type", "application/json"))
            self._error(502, "no worker answered /v1/models", "bad_gateway")
        elif path == "/diagnostics":
            self._json(200, rt.diagnostics())
        elif path == "/metrics":
            self._send(200, rt.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._error(404, "no route for GET %s" % path, "not_found")

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/v1/audio/transcriptions":
            return self._route()
        body = self._body()
        if path in ("/start_request_profile", "/stop_request_profile"):
            # every worker writes its own events_<stage>_<pid>.jsonl
            out, ok = [], True
            for w in self.router.workers:
                try:
                    st, _, b = self._call(w, "POST", path, body,
                                          {"Content-Type": "application/json"}, timeout=10)
                    ans = json.loads(b or b"{}")
                except (OSError, http.client.HTTPException, ValueError) as e:
                    st, ans = 502, {"error": str(e)}
                ok = ok and st == 200
                out.append({"name": w.name, "url": w.url, "status": st, "answer": ans})
            return self._json(200 if ok else 502, {"status": "ok" if ok else "failed",
                                                   "workers": out})
        self._error(404, "no route for POST %s" % path, "not_found")

    def _route(self):
        rt = self.router
        arrival = rscommon.now_ns()
        rid = self._request_id()
        ctx = rscommon.parse_traceparent(self.headers.get("traceparent"))
        trace_id, parent = ctx if ctx else (rscommon.new_trace_id(), None)
        span_id = rscommon.new_span_id()
        w, before = rt.acquire()
        status, ok = 502, False
        try:
            body = self._body()
            hdrs = {k: self.headers[k] for k in PASS_HEADERS if self.headers.get(k)}
            hdrs.pop("Expect", None)
            hdrs.update({"Content-Length": str(len(body)), "X-Request-Id": rid,
                         "traceparent": "00-%s-%s-01" % (trace_id, span_id)})
            back = {"X-Request-Id": rid, "X-Worker": w.name, "X-Worker-Url": w.url}
            c = http.client.HTTPConnection(w.host, w.port, timeout=self.timeout_s)
            try:
                try:
                    c.request("POST", self.path, body=body, headers=hdrs)
                    r = c.getresponse()
                except (OSError, http.client.HTTPException) as e:
                    self._error(502, "worker %s (%s) failed: %s" % (w.name, w.url, e),
                                "bad_gateway", back)
                    return
                status = r.status
                rid = r.getheader("X-Request-Id") or rid
                back["X-Request-Id"] = rid
                for k in BACK_HEADERS:
                    if r.getheader(k):
                        back[k] = r.getheader(k)
                if r.getheader("Content-Length") is not None:
                    data = r.read()
                    self._send(status, data, back.pop("Content-Type", "application/json"), back)
                else:
                    # a stream (SSE): relay each piece as it comes, chunked
                    self.send_response(status)
                    for k, v in back.items():
                        self.send_header(k, v)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        piece = r.read1(65536)
                        if not piece:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                ok = 200 <= status < 300
            finally:
                c.close()
        except OSError:
            status = 499  # the client went away
            self.close_connection = True
        finally:
            rt.release(w, ok)
            self._record(trace_id, span_id, parent, arrival, rid, w, before, status)

    def _relay_websocket(self):
        """A realtime session (WebSocket, refserver.py's / and /ws): the
        upgrade goes to one worker (the same policy as a file request), its
        answer comes back as it is, and after a 101 the frames are relayed
        byte for byte both ways until either side closes.  The session is
        one request in flight on the worker for its whole length, and gets
        a route span like a file request."""
        rt = self.router
        arrival = rscommon.now_ns()
        rid = self._request_id()
        ctx = rscommon.parse_traceparent(self.headers.get("traceparent"))
        trace_id, parent = ctx if ctx else (rscommon.new_trace_id(), None)
        span_id = rscommon.new_span_id()
        w, before = rt.acquire()
        status, ok = 502, False
        up = None
        self.close_connection = True
        try:
            try:
                up = socket.create_connection((w.host, w.port), timeout=self.timeout_s)
                up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as e:
                self._error(502, "worker %s (%s) failed: %s" % (w.name, w.url, e), "bad_gateway",
                            {"X-Request-Id": rid, "X-Worker": w.name, "X-Worker-Url": w.url})
                return
            lines = ["GET %s HTTP/1.1" % self.path]
            for k, v in self.headers.items():
                if k.lower() not in ("traceparent", "x-request-id", "host"):
                    lines.append("%s: %s" % (k, v))
            lines += ["Host: %s:%d" % (w.host, w.port), "X-Request-Id: %s" % rid,
                      "traceparent: 00-%s-%s-01" % (trace_id, span_id)]
            up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            upr = up.makefile("rb")
            head = upr.readline(65537)
            parts = head.split(None, 2)
            if len(parts) < 2 or not parts[1].isdigit():
                self._error(502, "worker %s (%s) answered the upgrade with %r" % (w.name, w.url, head[:80]),
                            "bad_gateway", {"X-Request-Id": rid, "X-Worker": w.name})
                return
            status = int(parts[1])
            hdrs = []
            while True:
                line = upr.readline(65537)
                if line in (b"\r\n", b"\n", b""):
                    break
                hdrs.append(line)
            # the worker's answer, with the router's names added
            self.wfile.write(head + b"".join(hdrs) + b"X-Worker: %s\r\nX-Worker-Url: %s\r\n\r\n"
                             % (w.name.encode(), w.url.encode()))
            self.wfile.flush()
            if status != 101:
                # an error answer: its body, as long as it says
                n = 0
                for line in hdrs:
                    k, _, v = line.decode("latin-1").partition(":")
                    if k.strip().lower() == "content-length":
                        n = int(v.strip() or 0)
                if n:
                    self.wfile.write(upr.read(n))
                    self.wfile.flush()
                return
            up.settimeout(None)
            ok = True
            self._pump(self.rfile, self.wfile, upr, up)
        except OSError:
            status = 499 if ok else status
        finally:
            if up is not None:
                up.close()
            rt.release(w, ok)
            self._record(trace_id, span_id, parent, arrival, rid, w, before, status,
                         route="/ws (WebSocket)")

    def _pump(self, crd, cwr, upr, up):
        """Relay bytes client → worker on a thread and worker → client here,
        until one side ends; then end the other."""
        csock = self.connection
        csock.settimeout(None)

        def up_stream():
            try:
                while True:
                    b = crd.read1(65536)
                    if not b:
                        break
                    up.sendall(b)
            except OSError:
                pass
            try:
                up.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        th = threading.Thread(target=up_stream, name="router-ws", daemon=True)
        th.start()
        try:
            while True:
                b = upr.read1(65536)
                if not b:
                    break
                cwr.write(b)
                cwr.flush()
        except OSError:
            pass
        try:
            csock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        th.join(5)

    def _record(self, trace_id, span_id, parent, arrival, rid, w, before, status,
                route="/v1/audio/transcriptions"):
        if not self.exporter.enabled:
            return
        span = {"trace_id": trace_id, "span_id": span_id, "parent": parent, "name": "route",
                "kind": 2, "start": arrival, "end": rscommon.now_ns(), "attrs": {
                    "request.id": rid, "router.worker": w.name, "router.worker.url": w.url,
                    "router.policy": self.router.policy, "router.worker.in_flight": before,
                    "http.route": route, "http.response.status_code": status}}
        if status not in (200, 101):
            span["status"] = {"code": 2, "message": "HTTP %d" % status}
        self.exporter.record(span)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="router.py", description="asrprof's router: one address in front of N reference-server "
        "workers (round robin or least loaded), with a span of its own per request and "
        "/diagnostics (per-worker dispatch counts)")
    p.add_argument("--workers", required=True,
                   help="comma-separated worker URLs, e.g. http://127.0.0.1:8001,http://127.0.0.1:8002")
    p.add_argument("--policy", choices=POLICIES, default="round-robin",
                   help="round-robin (default): each worker in turn; least-loaded: the worker with "
                   "the fewest requests in flight")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for a worker's answer (default 600)")
    p.add_argument("--access-log", action="store_true", help="log every HTTP request to stderr")
    a = p.parse_args(argv)
    a.worker_urls = [u.strip() for u in a.workers.split(",") if u.strip()]
    if not a.worker_urls:
        p.error("--workers names no worker")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rscommon.set_thread_name("router-main")
    try:
        router = Router(args.worker_urls, args.policy)
        exporter = rscommon.SpanExporter(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
                                         rscommon.Metrics(), service_name=SERVICE_NAME,
                                         thread_name="router-otlp")
    except ValueError as e:
        print("router: %s" % e, file=sys.stderr)
        return 2
    Handler.router, Handler.exporter = router, exporter
    Handler.timeout_s, Handler.access_log = args.timeout, args.access_log
    httpd = Server((args.host, args.port), Handler)
    host, port = httpd.server_address[:2]
    stop = threading.Event()

    def on_signal(signum, frame):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("router: listening on http://%s:%d (router, %s, workers %s, otlp %s)"
          % (host, port, args.policy, ",".join(w.url for w in router.workers),
             exporter.endpoint or "off"), flush=True)
    httpd.serve_forever(poll_interval=0.2)
    exporter.close()
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
