"""The reference server's whisper engine (refserver.py --engine whisper).

A Whisper (plain PyTorch, whisper_model.py) served in the shape of
SGLang-Omni's ASR pipeline, on refserver's HTTP front end, build pool,
admission queue and request-profile events:

    build pool (asr-build-N)  decode audio, log-mel features on the CPU
    admission queue           up to --max-running-requests admitted, each
                              into a free cache slot (lowest first)
    scheduler (asr-sched)     one thread, continuous batching:
      first forward           a new request's encoder + prompt prefill ->
                              first token, on its own; the running batch waits
      decode step             one decoder forward over every running request
                              (the slot prefix), one token each; a server-wide
                              step counter numbers the steps

Without --model-path the weights are seeded random ones of the configured
size ("synthetic"): the server says so in its log, /health and /v1/models,
decodes a length set by the audio's duration (--tokens-per-second) and
answers the token ids as words (tok<ID> ...), not a transcript.

This module imports only the standard library and rscommon.py (the
Pipeline and helpers it shares with refserver.py, which imports this module,
not the other way round) at import time, so that refserver.py can add its
flags cheaply; torch and numpy are imported when the model loads.  docs/REFSERVER.md ("The whisper engine") is the manual.
"""

import collections
import os
import sys
import threading
import time

import rscommon  # refserver's Pipeline and helpers (rscommon.py beside this file)

MODEL_CHOICES = ("tiny", "large-v3")
DTYPES = ("float32", "bfloat16", "float16")
GRAPH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
SYNTHETIC_NOTE = "synthetic weights: WER is not a measurement"


def add_arguments(p):
    """The whisper engine's flags, added to refserver's parser."""
    g = p.add_argument_group("whisper engine (--engine whisper)")
    g.add_argument("--model", choices=MODEL_CHOICES, default=None,
                   help="configuration (default: large-v3 on cuda, tiny on cpu); "
                   "with --model-path, config.json decides")
    g.add_argument("--model-path", default="",
                   help="Hugging Face Whisper snapshot directory (config.json, model.safetensors "
                   "or pytorch_model.bin, vocab.json); default: seeded random weights")
    g.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda if available, else cpu")
    g.add_argument("--dtype", choices=DTYPES, default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    g.add_argument("--max-new-tokens", type=int, default=256,
                   help="generated tokens at most per request (default 256, as SGLang-Omni)")
    g.add_argument("--tokens-per-second", type=float, default=3.0,
                   help="synthetic weights: tokens decoded per second of audio (default 3.0)")
    g.add_argument("--cuda-graphs", action="store_true",
                   help="capture the decode step as CUDA graphs, one per batch bucket "
                   "(1, 2, 4, ... up to --max-running-requests); cuda only")
    g.add_argument("--prefill-batch", type=int, default=1,
                   help="first forwards coalesced into one (the encoder over their windows as "
                   "one batch, then their prompts), as SGLang-Omni's prefill coalescing; "
                   "default 1: one first forward per admitted request")
    g.add_argument("--max-queued-requests", type=int, default=0,
                   help="backlog of requests beyond --build-max-pending that wait for the build "
                   "pool instead of an HTTP 503; capped at max(pending, this), as SGLang-Omni's "
                   "scheduler does (default 0: a backlog of --build-max-pending)")
    g.add_argument("--gpu-step-ms", type=float, default=0.0,
                   help="a GPU kernel of this many ms (torch.cuda._sleep, calibrated at warm-up) "
                   "queued before each decode step, which the step's token read-back then waits "
                   "for inside CUDA's synchronize: a server whose step waits on a busy GPU; "
                   "cuda only (default 0: none)")
    g.add_argument("--torch-threads", type=int, default=0,
                   help="torch CPU threads (default min(4, cores))")
    g.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights")


def check_args(p, a):
    """Validate and default the whisper flags (p.error exits)."""
    if a.max_new_tokens < 1:
        p.error("--max-new-tokens must be at least 1")
    if not 0 < a.tokens_per_second <= 100:
        p.error("--tokens-per-second must be in (0, 100]")
    if a.prefill_batch < 1:
        p.error("--prefill-batch must be at least 1")
    if a.max_queued_requests < 0:
        p.error("--max-queued-requests must be at least 0")
    if a.torch_threads < 0:
        p.error("--torch-threads must be at least 0")
    if a.cuda_graphs and a.device == "cpu":
        p.error("--cuda-graphs needs --device cuda")
    if not 0 <= a.gpu_step_ms <= 1000:
        p.error("--gpu-step-ms must be between 0 and 1000")
    if a.gpu_step_ms > 0 and a.device == "cpu":
        p.error("--gpu-step-ms needs --device cuda")
    if a.model_path and not os.path.isdir(a.model_path):
        p.error("--model-path %s is not a directory" % a.model_path)


class _Hist:
    """A Prometheus histogram with fixed buckets (guarded by the caller's lock)."""

    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.sum += v
        self.count += 1

    def render(self, name, help_, out):
        out.append("# HELP %s %s" % (name, help_))
        out.append("# TYPE %s histogram" % name)
        for b, c in zip(self.buckets, self.counts):
            out.append('%s_bucket{le="%g"} %d' % (name, b, c))
        out.append('%s_bucket{le="+Inf"} %d' % (name, self.count))
        out.append("%s_sum %.6f" % (name, self.sum))
        out.append("%s_count %d" % (name, self.count))


class _State:
    """A request's decoding state (req.wh)."""

    def __init__(self, mel, target):
        self.mel = mel  # float32 [n_mels, 3000] (torch, CPU) from the build pool
        self.target = target  # tokens to generate at most
        self.slot = None
        self.pos = 0  # where the next input token's K/V goes
        self.tokens = []  # generated, eot excluded
        self.finish = None  # "eot" | "length"
        self.first_step = None
        self.last_step = None
        self.max_batch = 0
        self.detok = None  # incremental UTF-8 decoder (streaming answers)
        self.streamed = False  # some text was streamed
        self.prefill_ms = 0.0


def prepare_threads(threads=0, gpu=False):
    """CPU thread settings, before torch and numpy are first imported; returns
    the torch thread count (0: min(4, cores)).  They are read once, at load:
    OpenBLAS (under Debian's torch and numpy) gets as many threads as torch,
    and OpenMP threads sleep when idle instead of spinning against
    OpenBLAS's (on 2 cores the tiny decode step took 52 ms spinning, 18 ms
    passive).  With the model on a GPU, numpy's OpenBLAS serves only the
    build workers' features: one thread each, since the pool is the
    parallelism (on the H200 its idle threads spun for a third of the
    server's CPU samples)."""
    threads = threads or min(4, os.cpu_count() or 1)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1" if gpu else str(threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return threads


class WhisperPipeline(rscommon.Pipeline):
    """refserver's Pipeline (rscommon.Pipeline) with a Whisper model and
    continuous batching."""

    engine_label = "Whisper"
    backlog_flag = " + its backlog, --max-queued-requests"
    supports_realtime = False

    def __init__(self, args, metrics, profiler):
        super().__init__(args, metrics, profiler)
        self.device = args.device
        self.dtype_name = args.dtype
        self.model_name = args.model
        self.synthetic = not args.model_path
        self.model_id = "whisper-%s" % args.model if args.model else "whisper"
        self.step = 0  # server-wide decode step counter
        self.stats_lock = threading.Lock()
        self.batch_hist = _Hist(BATCH_BUCKETS)
        self.step_hist = _Hist(STEP_BUCKETS)
        self.tokens_total = 0
        self.info = {}
        self.runner = None
        self.featurizer = None
        self.tokenizer = None
        self.weights_note = ""
        self.loaded = threading.Event()  # model built: the scheduler warms it up
        self.warmed = threading.Event()
        self.warm_error = None
        self.gpu_step_cycles = 0  # --gpu-step-ms, calibrated at warm-up

    # -- description (refserver's hooks)

    def model_card(self):
        card = {"engine": "whisper", "device": self.device, "dtype": self.dtype_name,
                "synthetic_weights": self.synthetic}
        if self.synthetic:
            card["note"] = SYNTHETIC_NOTE + "; the text is the decoded token ids (tok<ID> ...)"
        else:
            card["weights"] = self.weights_note
        return card

    def loading_note(self):
        a = self.args
        return "loading whisper %s on %s" % (a.model_path or a.model or "(device default)",
                                             a.device or "cuda if available")

    def ready_note(self):
        return ("model %s, device %s, dtype %s, weights %s%s"
                % (self.model_id, self.device, self.dtype_name,
                   "synthetic" if self.synthetic else "real",
                   ", cuda graphs %s" % ",".join(map(str, sorted(self.runner.graphs)))
                   if self.runner.graphs else ""))

    # -- loading

    def load_decoders(self):
        a = self.args
        gpu = a.device == "cuda" or (a.device is None and os.path.exists("/dev/nvidiactl"))
        threads = prepare_threads(a.torch_threads, gpu)
        import torch
        import whisper_model as wm
        self.torch, self.wm = torch, wm
        torch.set_num_threads(threads)
        if self.device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch %s sees no CUDA device" % torch.__version__)
        if a.cuda_graphs and self.device != "cuda":
            raise RuntimeError("--cuda-graphs needs CUDA")
        if self.dtype_name is None:
            self.dtype_name = "bfloat16" if self.device == "cuda" else "float32"
        dtype = getattr(torch, self.dtype_name)
        t0 = time.monotonic()
        if a.model_path:
            dims = wm.load_dims(a.model_path)
            name = dims.name()
            if a.model and name and a.model != name:
                self._log("--model %s ignored: %s/config.json is %s" % (a.model, a.model_path, name))
            self.model_name = name or os.path.basename(os.path.normpath(a.model_path))
            added = wm.read_json(os.path.join(a.model_path, "added_tokens.json"), {})
            specials = wm.Specials(dims.vocab, added)
            self.tokenizer = wm.Tokenizer.from_dir(a.model_path)
        else:
            self.model_name = a.model or ("large-v3" if self.device == "cuda" else "tiny")
            dims = wm.Dims.named(self.model_name)
            specials = wm.Specials(dims.vocab)
        self.model_id = "whisper-%s" % self.model_name
        model = wm.Whisper(dims, device=self.device, dtype=dtype)
        if a.model_path:
            self.weights_note = wm.load_weights(model, a.model_path)
        else:
            wm.init_synthetic(model, a.seed)
            self._log(SYNTHETIC_NOTE + " (seeded random %s weights, seed %d)"
                      % (self.model_name, a.seed))
        wm.sync(self.device)
        load_s = time.monotonic() - t0
        self.specials = specials
        self.featurizer = wm.Featurizer(dims.n_mels)
        self.max_new = min(a.max_new_tokens, dims.n_tgt - len(specials.prompt()))
        self.runner = wm.Runner(model, specials, a.max_running_requests,
                                suppress_eot=self.synthetic)
        self.decoders = list(range(a.max_running_requests))  # free slots
        self.info = {"load_s": load_s, "params": sum(p.numel() for p in model.parameters()),
                     "cache_mib": self.runner.cache_bytes / 2 ** 20, "threads": threads}
        self._log("whisper: %s %r, %.2f M parameters, loaded in %.2f s (%s); cache %.0f MiB "
                  "for %d slots; torch %s, %d CPU threads, attention %s"
                  % (self.model_name, dims, self.info["params"] / 1e6, load_s,
                     self.weights_note or "synthetic", self.info["cache_mib"],
                     a.max_running_requests, torch.__version__, threads,
                     "sdpa" if self.runner.sdpa else "matmul"))
        # The scheduler thread warms up: CUDA libraries keep per-thread state
        # (cuBLAS handles), which a warm-up on this thread would leave cold.
        self.loaded.set()
        self.warmed.wait()
        if self.warm_error is not None:
            raise RuntimeError("warm-up with %s on %s failed: %s"
                               % (self.dtype_name, self.device, self.warm_error))

    def _warm_up(self):
        """A dummy request (features, encoder, prompt, a few decode steps at
        batch 1, one at the largest batch, and on CUDA without graphs one at
        every batch size, whose first calls load kernels) and the CUDA
        graphs, before /health is ready."""
        t0 = time.monotonic()
        r = self.runner
        mel = self.torch.from_numpy(self.featurizer(self.wm.np.zeros(16000, dtype="float32")))
        tok = r.prefill(0, mel)
        P = len(self.specials.prompt())
        for i in range(3):
            tok = r.decode(1, [tok], [P + i])[0]
        every = self.device == "cuda" and not self.args.cuda_graphs
        for n in range(1 if every else r.slots, r.slots + 1):
            r.decode(n, [0] * n, [0] * n)
        if self.args.cuda_graphs:
            r.capture_graphs(GRAPH_BUCKETS + (r.slots,))
            for b in sorted(r.graphs):
                r.decode(b, [0] * b, [0] * b)
        self.wm.sync(self.device)
        if self.args.gpu_step_ms > 0:
            if self.device != "cuda":
                raise RuntimeError("--gpu-step-ms needs the cuda device, not %s" % self.device)
            self.gpu_step_cycles = self._sleep_cycles(self.args.gpu_step_ms)
            self._log("whisper: a %.1f ms GPU kernel (%d cycles) before each decode step" % (
                self.args.gpu_step_ms, self.gpu_step_cycles))
        self._log("whisper: warmed up in %.2f s%s" % (
            time.monotonic() - t0,
            " (cuda graphs for batch %s)" % ",".join(map(str, sorted(r.graphs))) if r.graphs else ""))

    def _sleep_cycles(self, ms):
        """The torch.cuda._sleep cycles that keep the GPU busy for ms,
        measured with CUDA events over a 20 ms trial."""
        torch = self.torch
        n = 20_000_000
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(n)
        b.record()
        b.synchronize()
        per_ms = n / max(a.elapsed_time(b), 1e-3)
        return max(int(per_ms * ms), 1)

    @staticmethod
    def _log(msg):
        print("refserver: %s" % msg, file=sys.stderr, flush=True)

    # -- build pool: features

    def featurize(self, req):
        """On a build worker: log-mel features of the first 30 s."""
        audio = self.wm.pcm16_to_float(req.pcm)
        mel = self.torch.from_numpy(self.featurizer(audio))
        if self.synthetic:
            seconds = min(req.audio_seconds, self.wm.CHUNK_SECONDS)
            target = max(1, min(self.max_new, int(round(seconds * self.args.tokens_per_second))))
        else:
            target = self.max_new
        req.wh = _State(mel, target)
        req.pcm = b""

    # -- scheduler

    def _scheduler(self):
        rscommon.set_thread_name("asr-sched")
        self.loaded.wait()
        try:
            with self.torch.no_grad():
                self._warm_up()
        except Exception as e:
            self.warm_error = e
        finally:
            self.warmed.set()
        if self.warm_error is not None:
            return
        self.ready.wait()
        with self.torch.no_grad():
            while not self.stopping.is_set():
                with self.adm_cond:
                    while (not self.admission and not self.running
                           and not self.stopping.is_set()):
                        self.adm_cond.wait(0.5)
                    admitted = []
                    while self.admission and self.decoders:
                        req = self.admission.popleft()
                        if req.cancelled:
                            self._complete(req, "cancelled")
                            continue
                        req.wh.slot = min(self.decoders)
                        self.decoders.remove(req.wh.slot)
                        self.running.append(req)
                        req.batch_at_admission = len(self.running)
                        admitted.append(req)
                k = self.args.prefill_batch
                for i in range(0, len(admitted), k):
                    self._first_forward(admitted[i:i + k])
                for req in list(self.running):
                    if req.cancelled:
                        self._finish(req, "cancelled")
                if self.running:
                    self._decode_step(list(self.running))

    def build_limit(self):
        """Requests that may wait for or be in the build pool before a 503:
        the pending ones plus SGLang-Omni's backlog of max(pending,
        max_queued_requests)."""
        pending = self.args.build_max_pending
        return pending + max(pending, self.args.max_queued_requests)

    def _first_forward(self, reqs):
        """One first forward (encoder + prompt) for the admitted requests
        reqs, on this thread: the running batch waits for it."""
        for req in reqs:
            self.mark(req, "scheduler_prefill_start",
                      {"batch_size": req.batch_at_admission, "queue_depth": len(self.admission),
                       "prefill_batch": len(reqs)})
        t0 = time.perf_counter()
        try:
            toks = self.runner.prefill_many([r.wh.slot for r in reqs], [r.wh.mel for r in reqs])
        except Exception as e:
            for req in reqs:
                self.mark(req, "scheduler_prefill_end")
                self._finish(req, "error", "first forward: %s" % e)
            return
        ms = (time.perf_counter() - t0) * 1e3
        for req, tok in zip(reqs, toks):
            st = req.wh
            st.prefill_ms = ms
            st.mel = None
            st.pos = len(self.specials.prompt())
            self.mark(req, "scheduler_prefill_end",
                      {"batch_size": req.batch_at_admission, "prompt_tokens": st.pos,
                       "prefill_batch": len(reqs), "first_forward_ms": round(ms, 3)})
            if self._accept(req, tok):
                self._finish(req, "ok")

    def _accept(self, req, tok):
        """Take one generated token; True when the request is done."""
        st = req.wh
        if tok == self.specials.eot and not self.synthetic:
            st.finish = "eot"
            return True
        st.tokens.append(tok)
        with self.stats_lock:
            self.tokens_total += 1
        if "scheduler_first_emit" not in req.t:
            self.mark(req, "scheduler_first_emit", {"step": req.steps, "token": tok})
        if req.stream:
            delta = self._delta(st, tok)
            if delta:
                req.out.put(("delta", delta))
        if len(st.tokens) >= st.target:
            st.finish = "length"
            return True
        return False

    def _delta(self, st, tok):
        """The text a streamed answer gains with tok (may be empty: half a
        UTF-8 character, or leading space)."""
        if self.synthetic:
            return ("tok%d" if len(st.tokens) == 1 else " tok%d") % tok
        if st.detok is None:
            import codecs
            st.detok = codecs.getincrementaldecoder("utf-8")("replace")
        s = st.detok.decode(self.tokenizer.token_bytes(tok))
        if not st.streamed:  # the final text is stripped; so is the stream's start
            s = s.lstrip()
            st.streamed = bool(s)
        return s

    def _decode_step(self, batch):
        """One decoder forward over the running batch (slot prefix), one token each."""
        r = self.runner
        n = max(req.wh.slot for req in batch) + 1
        tokens, positions = [0] * n, [0] * n
        for req in batch:
            tokens[req.wh.slot] = req.wh.tokens[-1]
            positions[req.wh.slot] = req.wh.pos
        t0 = time.perf_counter()
        try:
            if self.gpu_step_cycles:
                self.torch.cuda._sleep(self.gpu_step_cycles)
            out = r.decode(n, tokens, positions)
        except Exception as e:
            for req in batch:
                self._finish(req, "error", "decode step: %s" % e)
            return
        with self.stats_lock:
            self.step += 1
            step = self.step
        size = len(batch)
        done = []
        for req in batch:
            st = req.wh
            st.pos += 1
            req.steps += 1
            if st.first_step is None:
                st.first_step = step
            st.last_step = step
            st.max_batch = max(st.max_batch, size)
            if self._accept(req, out[st.slot]):
                done.append(req)
        if self.args.host_step_ms > 0:
            rscommon.spin(self.args.host_step_ms * size / 1000.0)
        elapsed = time.perf_counter() - t0
        with self.stats_lock:
            self.batch_hist.observe(size)
            self.step_hist.observe(elapsed)
        for req in done:
            self._finish(req, "ok")

    def _finish(self, req, status, message=None):
        st = getattr(req, "wh", None)
        with self.adm_cond:
            if req in self.running:
                self.running.remove(req)
            if st is not None and st.slot is not None:
                self.decoders.append(st.slot)
                st.slot = None
        if st is not None:
            st.mel = None
            if status == "ok":
                req.text = self._text(st)
        req.pcm = b""
        self._complete(req, status, message)

    def _text(self, st):
        if self.synthetic:
            return " ".join("tok%d" % t for t in st.tokens)
        return self.tokenizer.decode(st.tokens).strip()

    # -- telemetry (refserver's hooks)

    def complete_extra(self, req):
        st = getattr(req, "wh", None)
        if st is None:
            return {}
        return {"first_step": st.first_step, "last_step": st.last_step,
                "max_batch": st.max_batch, "tokens": len(st.tokens),
                "finish_reason": st.finish, "first_forward_ms": round(st.prefill_ms, 3)}

    def span_extra(self, req, name):
        st = getattr(req, "wh", None) if req is not None else None
        if st is None or name != "decode":
            return {}
        extra = {"decode.max_batch": st.max_batch, "decode.tokens": len(st.tokens)}
        if st.first_step is not None:
            extra["decode.first_step"] = st.first_step
            extra["decode.last_step"] = st.last_step
        return extra

    def gauges(self):
        g = super().gauges()
        g.append(("asr_synthetic_weights", "1 when the weights are seeded random ones "
                  "(WER is not a measurement).", 1 if self.synthetic else 0))
        return g

    def extra_metrics(self):
        out = []
        with self.stats_lock:
            self.batch_hist.render("asr_decode_batch_size",
                                   "Running requests in each batched decode step.", out)
            self.step_hist.render("asr_decode_step_duration_seconds",
                                  "Wall time of each batched decode step (host work included).",
                                  out)
            out.append("# HELP asr_decode_steps_total Batched decode steps run.")
            out.append("# TYPE asr_decode_steps_total counter")
            out.append("asr_decode_steps_total %d" % self.step)
            out.append("# HELP asr_generated_tokens_total Tokens generated (eot excluded).")
            out.append("# TYPE asr_generated_tokens_total counter")
            out.append("asr_generated_tokens_total %d" % self.tokens_total)
        return "\n".join(out) + "\n"
