#!/usr/bin/env python3
"""hfwhisper_server: Whisper served the way many teams first serve it.

A small standard-library ThreadingHTTPServer around Hugging Face
Transformers' WhisperForConditionalGeneration.generate(), on the GPU, with
no OpenTelemetry, no profile events and no /metrics: a black box for
asrprof, with one piece of ground truth it can be checked against (the
kernel-busy share of a torch.profiler window, below).

The model is whisper-large-v3's shape built from code (WhisperConfig, no
download, no checkpoint), with seeded random weights, float16 on CUDA;
--tiny gives small dimensions for quick tests, also on the CPU.  Every
generate decodes exactly --decode-tokens tokens (min_new_tokens =
max_new_tokens, greedy, no token suppression), so its cost does not depend
on what the random weights say.  The answer is the generated token ids
joined with spaces, not a transcript.

Audio: the uploaded WAV (16-bit PCM, any rate and channel count) is decoded
with the stdlib wave module in the HTTP thread, mixed to mono and resampled
to 16 kHz by linear interpolation (numpy); the worker pads or cuts it to
30 s and computes a log-mel spectrogram with torch on the model's device
(STFT n_fft 400, hop 160, a slaney-style mel filterbank): [n_mels, 3000].

Threads, named in Python and in the OS (/proc/PID/task/*/comm): "http" for
each connection's handler, "generate" for the one model worker, which
builds the model, warms it up and then serves:
  --mode serial            one request per generate, first come first served.
  --mode batch --max-batch N  the worker takes whatever is queued when it is
        free, up to N requests, stacks their features, runs ONE generate for
        them all and answers them all at the same moment.
  --mode threads --workers N  N "generate" threads share the model, each
        running one request's generate at a time: the naive threaded
        server, whose Python decode loops take turns under the GIL.

API: GET /health (503 until the model is built and warmed up, then 200),
GET /v1/models, POST /v1/audio/transcriptions (multipart: file=WAV,
optional model, language, response_format json|text).

Kernel-busy ground truth: --profile-window START_S:DUR_S --profile-out FILE.
START_S seconds after "ready" the worker opens a torch.profiler session
(CPU and CUDA activities; CUDA only with --profile-cuda-only) between two
requests, and closes it DUR_S seconds later, between two requests again (it
wakes up for both even when idle).
Then it takes the union of the device's kernel, memcpy and memset intervals
in that session and writes FILE:
  {"window_s": wall seconds from open to close, "kernel_union_s": the union,
   "busy_share": union / window, "kernels": kernel count, "generates": the
   generates that ran in the window, ...}
and prints "hfwhisper: profile busy_share=...".  --profile-trace FILE also
exports the session's Chrome trace and checks the union against it.

Usage (on a machine with torch, CUDA and transformers):
  python3 refserver/hfwhisper_server.py --port 18200 [--mode batch --max-batch 8]
  python3 refserver/hfwhisper_server.py --device cpu --tiny --port 18200
"""

import argparse, copy, ctypes, ctypes.util, io, json, math, os, queue, re  # noqa: E401
import signal, socket, sys, tempfile, threading, time, traceback, wave  # noqa: E401
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# the HTTP side shared with the CPU server beside this file
from plainserver import parse_multipart, set_thread_name, upload_length

np = None  # numpy, imported once the flags are checked

MAX_UPLOAD = 64 << 20
SR = 16000            # Whisper's sample rate
N_FFT = 400           # 25 ms window
HOP = 160             # 10 ms hop
N_SAMPLES = 30 * SR   # one 30 s segment
N_FRAMES = N_SAMPLES // HOP  # 3000 mel frames

# whisper-large-v3's dimensions and special tokens (config.json of
# openai/whisper-large-v3), and small ones for --tiny.
LARGE_V3 = dict(vocab_size=51866, num_mel_bins=128, d_model=1280,
                encoder_layers=32, decoder_layers=32,
                encoder_attention_heads=20, decoder_attention_heads=20,
                encoder_ffn_dim=5120, decoder_ffn_dim=5120,
                max_source_positions=1500, max_target_positions=448)
TINY = dict(LARGE_V3, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
            encoder_attention_heads=6, decoder_attention_heads=6,
            encoder_ffn_dim=1536, decoder_ffn_dim=1536)
TOKENS = dict(pad_token_id=50256, bos_token_id=50257, eos_token_id=50257,
              decoder_start_token_id=50258)



def log(msg):
    print("hfwhisper: " + msg, flush=True)


# ---------------------------------------------------------------- audio

def hz_to_mel(f):
    """Slaney's mel scale (librosa's htk=False): linear below 1 kHz, log above."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    lin = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, lin)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(n_mels, sr=SR, n_fft=N_FFT, fmin=0.0, fmax=None):
    """[n_mels, n_fft//2+1] float32 triangular filters, slaney-normalized."""
    fmax = sr / 2.0 if fmax is None else fmax
    fftfreqs = np.linspace(0.0, sr / 2.0, n_fft // 2 + 1)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def decode_wav(data):
    """float32 mono samples at 16 kHz, at most 30 s, of a 16-bit PCM WAV."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            ch, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except (wave.Error, EOFError, ValueError) as e:
        raise ValueError("not a PCM WAV file: %s" % (str(e) or type(e).__name__))
    if width != 2:
        raise ValueError("want 16-bit PCM WAV, got %d-bit" % (8 * width))
    if rate <= 0 or ch <= 0:
        raise ValueError("bad WAV header (rate %d, channels %d)" % (rate, ch))
    x = np.frombuffer(raw[:len(raw) // (2 * ch) * 2 * ch], dtype="<i2").astype(np.float32) / 32768.0
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    if rate != SR and len(x):
        keep = min(len(x), int(math.ceil(N_SAMPLES * rate / float(SR))) + 2)  # only what 30 s needs
        x = x[:keep]
        n_out = int(round(len(x) * SR / float(rate)))
        x = np.interp(np.arange(n_out) * (rate / float(SR)), np.arange(len(x)), x).astype(np.float32)
    return x[:N_SAMPLES]


# ---------------------------------------------------------------- kernel-busy window

def merge_union(intervals):
    """Total length of the union of (start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _kind(name):
    n = (name or "").lower()
    if n.startswith("memcpy"):
        return "memcpy"
    if n.startswith("memset"):
        return "memset"
    return "kernel"


def device_intervals_kineto(prof):
    """(intervals in s, {kind: count}) from the raw Kineto events of a stopped
    torch.profiler.profile: every device-side (CUDA) event but GPU user
    annotations (which span gaps between kernels)."""
    events = prof.profiler.kineto_results.events()
    out, counts = [], {"kernel": 0, "memcpy": 0, "memset": 0}
    for e in events:
        if "CUDA" not in str(e.device_type()):
            continue
        if hasattr(e, "is_user_annotation") and e.is_user_annotation():
            continue
        if hasattr(e, "start_ns"):
            s, d = e.start_ns() * 1e-9, e.duration_ns() * 1e-9
        else:
            s, d = e.start_us() * 1e-6, e.duration_us() * 1e-6
        if d <= 0:
            continue
        out.append((s, s + d))
        counts[_kind(e.name())] += 1
    return out, counts


def device_intervals_trace(path):
    """The same from an exported Chrome trace: events of cat kernel,
    gpu_memcpy and gpu_memset (ts and dur in µs)."""
    with open(path) as f:
        tr = json.load(f)
    evs = tr.get("traceEvents", []) if isinstance(tr, dict) else tr
    cats = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    out, counts = [], {"kernel": 0, "memcpy": 0, "memset": 0}
    for e in evs:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        k = cats.get(str(e.get("cat", "")).lower())
        if k is None:
            continue
        s, d = float(e.get("ts", 0)) * 1e-6, float(e.get("dur", 0)) * 1e-6
        if d <= 0:
            continue
        out.append((s, s + d))
        counts[k] += 1
    return out, counts


def device_intervals_events(prof):
    """The same from prof.events() (FunctionEvents of device_type CUDA)."""
    out, counts = [], {"kernel": 0, "memcpy": 0, "memset": 0}
    for e in prof.events():
        if "CUDA" not in str(getattr(e, "device_type", "")):
            continue
        s, t = e.time_range.start * 1e-6, e.time_range.end * 1e-6
        if t <= s:
            continue
        out.append((s, t))
        counts[_kind(e.name)] += 1
    return out, counts


class ProfileWindow:
    """One torch.profiler session over the worker's generates, opened START_S
    after ready and closed DUR_S later, both between requests.  Stopping the
    profiler stalls the worker for seconds (Kineto collects its events); the
    union is computed later, once the worker has been idle IDLE_S (or at
    shutdown), so as not to stall it a second time under load."""

    IDLE_S = 1.0

    def __init__(self, args, engine):
        self.start_s, self.dur_s = args.profile_window
        self.out, self.trace = args.profile_out, args.profile_trace
        self.engine = engine
        self.state = "armed"  # armed, open, stopped (union pending), done
        self.lock = threading.Lock()  # the worker and, at shutdown, the main thread
        self.start_at = None
        self.prof = self.res = None
        self.generates = self.requests = 0
        self.generate_s = 0.0

    def arm(self, ready_t):
        self.start_at = ready_t + self.start_s

    def wait_s(self):
        """How long the worker may block on its queue: until the next open or
        close, IDLE_S while the union is pending, None when done."""
        now = time.monotonic()
        if self.state == "armed":
            return max(0.0, self.start_at - now)
        if self.state == "open":
            return max(0.0, self.t_open + self.dur_s - now)
        if self.state == "stopped":
            return self.IDLE_S
        return None

    @property
    def is_open(self):
        return self.state == "open"

    def tick(self, idle):
        """From the worker between requests; idle: its queue stayed empty for
        the whole wait_s()."""
        now = time.monotonic()
        try:
            if self.state == "armed" and now >= self.start_at:
                self.open()
            elif self.state == "open" and now >= self.t_open + self.dur_s:
                self.close()
            elif self.state == "stopped" and idle:
                self.finish()
        except Exception as e:  # the profiler must never stop the server
            self.fail(e)

    def fail(self, e):
        traceback.print_exc()
        self.state, self.prof = "done", None
        self.write(dict(self.res or {}, error="%s: %s" % (type(e).__name__, e)))
        log("profile failed: %s" % e)

    def open(self):
        torch = self.engine.torch
        from torch.profiler import profile
        self.prof = profile(activities=self.engine.profile_activities())
        if self.engine.device == "cuda":
            torch.cuda.synchronize()
        self.prof.start()
        self.t_open, self.t_open_unix_ns = time.monotonic(), time.time_ns()
        self.before_generates, self.before_generate_s = self.engine.generates, self.engine.generate_s
        self.state = "open"
        log("profile window open (%.2f s after ready)" % (self.t_open - self.engine.ready_t))

    def close(self):
        torch = self.engine.torch
        if self.engine.device == "cuda":
            torch.cuda.synchronize()  # nothing of the window still queued
        t_close, t_close_unix_ns = time.monotonic(), time.time_ns()
        with self.lock:
            self.prof.stop()
            self.state = "stopped"
        window = t_close - self.t_open
        self.res = {"window_s": window, "generates": self.generates, "requests": self.requests,
                    "generate_s": self.generate_s,
                    # the profiler's own cost shows as slower generates inside the window
                    "generate_mean_s": self.generate_s / self.generates if self.generates else None,
                    "generate_mean_before_s": (self.before_generate_s / self.before_generates
                                               if self.before_generates else None),
                    "start_s": self.t_open - self.engine.ready_t,
                    "t_open_unix_ns": self.t_open_unix_ns, "t_close_unix_ns": t_close_unix_ns,
                    "stop_s": time.monotonic() - t_close}
        log("profile window closed: %.2f s, %d generates; stopping took %.1f s; the union follows "
            "once the worker is idle" % (window, self.generates, self.res["stop_s"]))

    def finish(self):
        """The union of the stopped session's device intervals, into FILE."""
        with self.lock:
            if self.state != "stopped":
                return
            self.state = "analyzing"
            try:
                self._finish()
            except Exception as e:
                self.fail(e)
            self.state, self.prof = "done", None

    def finish_at_exit(self):
        if self.state == "stopped":
            log("computing the profile window's union before exiting")
        self.finish()  # waits for the worker's, if it is at it

    def _finish(self):
        t0 = time.monotonic()
        res, window = self.res, self.res["window_s"]
        ivs = counts = None
        for method, fn in (("kineto_events", lambda: device_intervals_kineto(self.prof)),
                           ("events", lambda: device_intervals_events(self.prof))):
            try:
                got = fn()
            except Exception as e:  # an API this torch lacks: the next way
                res.setdefault("method_errors", []).append("%s: %s: %s" % (method, type(e).__name__, e))
                continue
            if got[0] or self.engine.device != "cuda" or not self.generates:
                ivs, counts = got
                res["method"] = method
                break
            res.setdefault("method_errors", []).append("%s: no device events" % method)
        if self.trace or ivs is None:
            path = self.trace or os.path.join(tempfile.gettempdir(), "hfwhisper-trace-%d.json" % os.getpid())
            self.prof.export_chrome_trace(path)
            t_ivs, t_counts = device_intervals_trace(path)
            res["trace_kernel_union_s"] = merge_union(t_ivs)
            res["trace_kernels"] = t_counts["kernel"]
            if ivs is None:
                ivs, counts, res["method"] = t_ivs, t_counts, "chrome_trace"
            if not self.trace:
                os.unlink(path)
        union = merge_union(ivs)
        res.update({"kernel_union_s": union, "busy_share": union / window if window > 0 else None,
                    "kernels": counts["kernel"], "memcpys": counts["memcpy"], "memsets": counts["memset"],
                    "device_span_s": (max(e for _, e in ivs) - min(s for s, _ in ivs)) if ivs else 0.0,
                    "analysis_s": time.monotonic() - t0,
                    "analysis_after_close_s": t0 - (self.t_open + window)})
        self.write(res)
        log("profile busy_share=%s window_s=%.3f kernel_union_s=%.3f kernels=%d generates=%d (%s)"
            % ("%.4f" % res["busy_share"] if res["busy_share"] is not None else "none",
               window, union, counts["kernel"], self.generates, res["method"]))

    def write(self, res):
        a = self.engine.args
        res = dict(res, mode=a.mode, max_batch=a.max_batch if a.mode == "batch" else 1, workers=a.workers if a.mode == "threads" else 1,
                   decode_tokens=a.decode_tokens, model=self.engine.model_id, device=self.engine.device)
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.out)


# ---------------------------------------------------------------- the model

class Request:
    def __init__(self, audio):
        self.audio = audio  # float32 mono 16 kHz, <= 30 s
        self.text = self.error = None
        self.done = threading.Event()


class Engine:
    """The queue and the one worker thread that builds, warms up and runs
    the model."""

    def __init__(self, args):
        self.args = args
        self.q = queue.Queue()
        self.ready = threading.Event()
        self.ready_t = None
        self.torch = self.model = None
        self.model_id = "whisper-large-v3-random" if not args.tiny else "whisper-tiny-random"
        self.generates = self.served = 0  # generates run and requests answered, for /health
        self.generate_s = 0.0  # their wall time
        self.count_lock = threading.Lock()  # the counts, from every worker
        self.pw = ProfileWindow(args, self) if args.profile_window else None

    def start(self):
        threading.Thread(target=self.run, name="generate", daemon=True).start()

    def submit(self, req):  # from an http thread: queue it, wait for its answer
        self.q.put(req)
        req.done.wait()

    # -- building

    def load(self):
        a = self.args
        import torch
        import transformers
        from transformers import LogitsProcessor, LogitsProcessorList, WhisperConfig
        from transformers import WhisperForConditionalGeneration

        self.torch = torch
        try:
            transformers.logging.set_verbosity_error()  # no per-generate length notices
        except AttributeError:
            pass
        if a.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch %s sees no CUDA device" % torch.__version__)
        self.device = a.device
        dtype = getattr(torch, a.dtype)
        self.dtype = dtype
        torch.manual_seed(a.seed)
        dims = dict(TINY if a.tiny else LARGE_V3)
        cfg = WhisperConfig(**dims, **TOKENS, suppress_tokens=None, begin_suppress_tokens=None,
                            use_cache=True)
        t0 = time.monotonic()
        model = self.build(WhisperForConditionalGeneration, cfg, dtype)
        model.eval()
        self.model = model
        n_params = sum(p.numel() for p in model.parameters())
        # One generation config for every generate: greedy, exactly
        # --decode-tokens new tokens (EOS is masked until then), nothing
        # suppressed, nothing forced.  The prompt is Whisper generate()'s own
        # init tokens: decoder_start_token_id alone, since this generation
        # config has no language, task or timestamp tokens (Whisper's
        # generate() builds that prompt itself and deprecates passing
        # decoder_input_ids; forced_decoder_ids is cleared here, in the
        # config, rather than passed as a keyword).  The warm-up checks the
        # step count.
        gc = copy.deepcopy(model.generation_config)
        for k, v in (("max_new_tokens", a.decode_tokens), ("min_new_tokens", a.decode_tokens),
                     ("do_sample", False), ("num_beams", 1), ("suppress_tokens", None),
                     ("begin_suppress_tokens", None), ("forced_decoder_ids", None),
                     ("return_timestamps", False), ("decoder_start_token_id", cfg.decoder_start_token_id),
                     ("eos_token_id", cfg.eos_token_id), ("pad_token_id", cfg.pad_token_id),
                     ("use_cache", True)):
            setattr(gc, k, v)
        self.gc = gc

        class StepCounter(LogitsProcessor):
            """Counts the decode steps of one generate (one call per step)."""

            def __init__(self):
                self.steps = 0

            def __call__(self, input_ids, scores):
                self.steps += 1
                return scores

        self.StepCounter, self.LogitsProcessorList = StepCounter, LogitsProcessorList
        self.filters = torch.from_numpy(mel_filters(cfg.num_mel_bins)).to(self.device)
        self.window = torch.hann_window(N_FFT, device=self.device)
        log("built %s (%.0fM parameters, %s on %s) in %.1f s; torch %s, transformers %s"
            % (self.model_id, n_params / 1e6, a.dtype, self.device, time.monotonic() - t0,
               torch.__version__, transformers.__version__))

    def build(self, cls, cfg, dtype):
        """The model with random weights, built on the device in dtype when
        torch can (torch.device as a context manager, torch >= 2.0), else on
        the CPU in float32 and moved."""
        torch = self.torch
        prev = torch.get_default_dtype()
        try:
            torch.set_default_dtype(dtype)
            with torch.device(self.device):
                model = cls(cfg)
        except (AttributeError, TypeError) as e:  # no torch.device context here
            log("building on the CPU first (%s)" % e)
            torch.set_default_dtype(prev)
            model = cls(cfg)
        finally:
            torch.set_default_dtype(prev)
        return model.to(device=self.device, dtype=dtype)

    # -- serving

    def features(self, audios):
        """[B, n_mels, 3000] log-mel features on the device, in the model's dtype."""
        torch = self.torch
        buf = np.zeros((len(audios), N_SAMPLES), dtype=np.float32)
        for i, x in enumerate(audios):
            buf[i, :len(x)] = x[:N_SAMPLES]
        x = torch.from_numpy(buf).to(self.device)
        spec = torch.stft(x, N_FFT, HOP, window=self.window, return_complex=True)
        power = spec[..., :-1].abs() ** 2                        # [B, 201, 3000]
        mel = torch.matmul(self.filters, power)                  # [B, n_mels, 3000]
        logm = torch.clamp(mel, min=1e-10).log10()
        top = logm.amax(dim=(1, 2), keepdim=True)
        logm = torch.maximum(logm, top - 8.0)
        return ((logm + 4.0) / 4.0).to(self.dtype)

    def tokens(self, audios):
        """The decode length of one generate: --decode-tokens, or with
        --tokens-per-audio-s that many per second of its longest audio (a
        transcript grows with its audio; a batch decodes its longest
        member's), at least 8."""
        a = self.args
        if a.tokens_per_audio_s <= 0:
            return a.decode_tokens
        longest = max(len(x) for x in audios) / SR
        return max(8, min(440, int(round(a.tokens_per_audio_s * longest))))

    def generate(self, audios):
        """(token id rows, decode steps) of one generate over audios."""
        torch, a = self.torch, self.args
        counter = self.StepCounter()
        n = self.tokens(audios)
        with torch.inference_mode():
            feats = self.features(audios)
            out = self.model.generate(
                feats, generation_config=self.gc, max_new_tokens=n,
                min_new_tokens=n, do_sample=False,
                logits_processor=self.LogitsProcessorList([counter]))
        seqs = out
        if not torch.is_tensor(seqs):  # a dict or ModelOutput
            seqs = seqs["sequences"]
        return seqs.tolist(), counter.steps

    def warmup(self):
        silence = [np.zeros(SR, dtype=np.float32)]
        sizes = [1] + ([self.args.max_batch] if self.args.mode == "batch" and self.args.max_batch > 1 else [])
        for n in sizes:
            t0 = time.monotonic()
            rows, steps = self.generate(silence * n)
            log("warmup generate: batch %d, %d decode steps, %d tokens out, %.2f s"
                % (n, steps, len(rows[0]), time.monotonic() - t0))
            if steps != self.tokens(silence * n):
                log("WARNING: %d decode steps, not --decode-tokens %d" % (steps, self.args.decode_tokens))
        if self.pw is not None:  # CUPTI's first start is slow: pay it now
            from torch.profiler import profile
            t0 = time.monotonic()
            with profile(activities=self.profile_activities()):
                y = self.torch.ones(64, 64, device=self.device) @ self.torch.ones(64, 64, device=self.device)
                float(y.sum())
            log("profiler warm-up %.2f s" % (time.monotonic() - t0))

    def profile_activities(self):
        from torch.profiler import ProfilerActivity
        acts = [] if self.args.profile_cuda_only and self.device == "cuda" else [ProfilerActivity.CPU]
        return acts + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])

    def serve(self, batch):
        t0 = time.monotonic()
        try:
            rows, _ = self.generate([r.audio for r in batch])
            for r, row in zip(batch, rows):
                r.text = " ".join(str(t) for t in row)
        except Exception as e:
            traceback.print_exc()
            for r in batch:
                r.error = "%s: %s" % (type(e).__name__, e)
        took = time.monotonic() - t0
        with self.count_lock:
            self.generates += 1
            self.served += len(batch)
            self.generate_s += took
            if self.pw is not None and self.pw.is_open:
                self.pw.generates += 1
                self.pw.requests += len(batch)
                self.pw.generate_s += took
        for r in batch:  # answer all of a batch at the same moment
            r.done.set()

    def run(self):
        set_thread_name("generate")
        try:
            self.load()
            self.warmup()
        except BaseException as e:
            traceback.print_exc()
            log("error: model load or warm-up failed: %s: %s" % (type(e).__name__, e))
            os._exit(1)
        self.ready_t = time.monotonic()
        if self.pw is not None:
            self.pw.arm(self.ready_t)
        self.ready.set()
        log("ready")
        if self.args.mode == "threads":
            for _ in range(self.args.workers - 1):
                threading.Thread(target=self.loop, args=(1, None), name="generate", daemon=True).start()
        self.loop(self.args.max_batch if self.args.mode == "batch" else 1, self.pw)

    def loop(self, n, pw):
        """Serve from the queue, up to n requests a generate; pw, the
        profile window, opens and closes between this thread's requests
        (in --mode threads the others' generates run on meanwhile)."""
        set_thread_name("generate")
        while True:
            wait = pw.wait_s() if pw is not None else None
            try:
                first = self.q.get(timeout=max(wait, 0.001)) if wait is not None else self.q.get()
            except queue.Empty:
                first = None
            if pw is not None:
                pw.tick(first is None)  # opens or closes the window between requests
            if first is None:
                continue
            batch = [first]
            while len(batch) < n:  # whatever else is waiting now, no more
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            self.serve(batch)


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hfwhisper"
    disable_nagle_algorithm = True

    def log_message(self, *a):  # no access log
        pass

    def reply(self, code, body, ctype="application/json"):
        if not isinstance(body, bytes):
            body = (json.dumps(body) if ctype == "application/json" else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        engine = self.server.engine
        if self.path == "/health":
            if engine.ready.is_set():
                self.reply(200, {"status": "ok", "model": engine.model_id, "mode": engine.args.mode,
                                 "generates": engine.generates, "requests": engine.served,
                                 "generate_s": round(engine.generate_s, 6)})
            else:
                self.reply(503, {"status": "loading"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": engine.model_id, "object": "model"}]})
        else:
            self.reply(404, {"error": "not found: " + self.path})

    def do_POST(self):
        n = upload_length(self, MAX_UPLOAD)
        if n is None:
            return
        body = self.rfile.read(n)
        engine = self.server.engine
        if not engine.ready.is_set():
            return self.reply(503, {"error": "model loading"})
        try:
            fields = parse_multipart(self.headers.get("Content-Type"), body)
            if "file" not in fields:
                raise ValueError("missing form field 'file'")
            audio = decode_wav(fields["file"])
        except ValueError as e:
            return self.reply(400, {"error": str(e)})
        req = Request(audio)
        engine.submit(req)
        if req.error is not None:
            return self.reply(500, {"error": req.error})
        fmt = fields.get("response_format", b"json").decode("utf-8", "replace")
        if fmt == "text":
            self.reply(200, req.text + "\n", "text/plain; charset=utf-8")
        else:
            self.reply(200, {"text": req.text})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def process_request(self, request, client_address):
        threading.Thread(target=self.process_request_thread, args=(request, client_address),
                         name="http", daemon=True).start()

    def process_request_thread(self, request, client_address):
        set_thread_name("http")
        super().process_request_thread(request, client_address)


# ---------------------------------------------------------------- main

def parse_window(s):
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*:\s*([0-9.eE+-]+)\s*", s or "")
    if not m:
        raise argparse.ArgumentTypeError("want START_S:DUR_S, e.g. 8:6")
    try:
        start, dur = float(m.group(1)), float(m.group(2))
    except ValueError:
        raise argparse.ArgumentTypeError("want START_S:DUR_S, e.g. 8:6")
    if not (0 <= start < 1e6 and 0 < dur < 1e6):  # also rejects nan and inf
        raise argparse.ArgumentTypeError("START_S must be >= 0 and DUR_S > 0")
    return start, dur


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Whisper (Transformers generate(), random weights) behind a "
                                 "stdlib HTTP server that emits nothing; see the top of this file.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--mode", choices=("serial", "batch", "threads"), default="serial")
    ap.add_argument("--max-batch", type=int, default=8, help="--mode batch: requests per generate at most")
    ap.add_argument("--workers", type=int, default=4, help="--mode threads: generate threads")
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens every generate decodes (exactly)")
    ap.add_argument("--tokens-per-audio-s", type=float, default=0,
                    help="decode this many tokens per second of a generate's longest audio instead (at least 8, "
                    "at most 440; 0: --decode-tokens for every generate)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("auto", "float16", "bfloat16", "float32"), default="auto",
                    help="auto: float16 on cuda, float32 on cpu")
    ap.add_argument("--tiny", action="store_true", help="small dimensions (d_model 384, 4+4 layers, 80 mels)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    ap.add_argument("--profile-window", type=parse_window, default=None, metavar="START_S:DUR_S",
                    help="profile the worker from START_S after ready for DUR_S seconds")
    ap.add_argument("--profile-out", default=None, metavar="FILE", help="the window's JSON result")
    ap.add_argument("--profile-trace", default=None, metavar="FILE",
                    help="also export the window's Chrome trace to FILE and check the union against it")
    ap.add_argument("--profile-cuda-only", action="store_true",
                    help="profile CUDA activity only, not CPU ops: less overhead on the host")
    a = ap.parse_args(argv)
    if not 0 <= a.port <= 65535:
        ap.error("--port must be in 0..65535")
    if a.max_batch < 1 or a.max_batch > 1024:
        ap.error("--max-batch must be in 1..1024")
    if not 1 <= a.workers <= 64:
        ap.error("--workers must be in 1..64")
    if not 1 <= a.decode_tokens <= 440:
        ap.error("--decode-tokens must be in 1..440 (448 decoder positions, the prompt included)")
    if a.dtype == "auto":
        a.dtype = "float16" if a.device == "cuda" else "float32"
    if a.dtype == "float16" and a.device == "cpu":
        ap.error("--dtype float16 needs --device cuda")
    if (a.profile_window is None) != (a.profile_out is None):
        ap.error("--profile-window and --profile-out go together")
    if (a.profile_trace or a.profile_cuda_only) and a.profile_window is None:
        ap.error("--profile-trace and --profile-cuda-only need --profile-window")
    for f in (a.profile_out, a.profile_trace):
        if f and not os.path.isdir(os.path.dirname(os.path.abspath(f))):
            ap.error("no directory for %s" % f)
    return a


def main(argv):
    global np
    args = parse_args(argv)
    import numpy
    np = numpy
    if ":" in args.host:
        Server.address_family = socket.AF_INET6
    try:
        server = Server((args.host, args.port), Handler)
    except OSError as e:
        log("error: cannot listen on %s:%d: %s" % (args.host, args.port, e))
        sys.exit(1)
    server.engine = Engine(args)

    def on_term(signum, frame):
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, on_term)
    host, port = server.server_address[:2]
    log("listening on http://%s:%d" % (host, port))
    server.engine.start()  # builds and warms up the model, then says "ready"
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if server.engine.pw is not None:  # a window closed but not yet counted
            server.engine.pw.finish_at_exit()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # not through interpreter teardown under a busy torch thread


if __name__ == "__main__":
    main(sys.argv[1:])
