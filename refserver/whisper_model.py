"""Whisper in plain PyTorch for the reference server's whisper engine.

Written for two environments with one code path: Debian 12's python3-torch
1.13 on a CPU (no F.scaled_dot_product_attention: attention falls back to
matmul + softmax) and torch 2.x with CUDA.  numpy, torch and the standard
library only; no transformers, no safetensors package.

What is here:
  - CONFIGS: the dimensions of whisper tiny and large-v3;
  - Whisper: the parameters, laid out under Hugging Face's key names so a
    HF checkpoint's state dict loads as is;
  - synthetic (seeded random) weights and a loader for HF snapshots
    (model.safetensors parsed by hand, or pytorch_model.bin);
  - the byte-level BPE detokenizer (vocab.json + added_tokens.json);
  - log-mel features in numpy;
  - Runner: encoder, prompt prefill and batched decode steps over a
    slot-based static KV cache, with optional CUDA graphs for decode.

docs/REFSERVER.md ("The whisper engine") describes how the server uses it.
"""

import json
import math
import mmap
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
CHUNK_SECONDS = 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS  # 480000
N_FRAMES = N_SAMPLES // HOP  # 3000 mel frames -> 1500 encoder positions
HEAD_DIM = 64

# name -> dims (GPU-ENGINE.md section 1)
CONFIGS = {
    "tiny": dict(d_model=384, heads=6, enc_layers=4, dec_layers=4, ffn=1536,
                 n_mels=80, vocab=51865, n_src=1500, n_tgt=448),
    "large-v3": dict(d_model=1280, heads=20, enc_layers=32, dec_layers=32, ffn=5120,
                     n_mels=128, vocab=51866, n_src=1500, n_tgt=448),
}


class Dims:
    """Model dimensions; from CONFIGS or a HF config.json."""

    def __init__(self, d_model, heads, enc_layers, dec_layers, ffn, n_mels, vocab,
                 n_src=1500, n_tgt=448):
        self.d_model, self.heads, self.ffn = d_model, heads, ffn
        self.enc_layers, self.dec_layers = enc_layers, dec_layers
        self.n_mels, self.vocab, self.n_src, self.n_tgt = n_mels, vocab, n_src, n_tgt
        if d_model % heads or d_model // heads != HEAD_DIM:
            raise ValueError("d_model %d / heads %d is not a head size of %d"
                             % (d_model, heads, HEAD_DIM))

    @classmethod
    def named(cls, name):
        return cls(**CONFIGS[name])

    @classmethod
    def from_hf_config(cls, cfg):
        def pick(*keys):
            vals = {cfg[k] for k in keys if k in cfg}
            if len(vals) != 1:
                raise ValueError("config.json: want one value for %s, got %s"
                                 % ("/".join(keys), sorted(vals) or "none"))
            return vals.pop()
        return cls(d_model=pick("d_model"),
                   heads=pick("encoder_attention_heads", "decoder_attention_heads"),
                   enc_layers=pick("encoder_layers"), dec_layers=pick("decoder_layers"),
                   ffn=pick("encoder_ffn_dim", "decoder_ffn_dim"),
                   n_mels=pick("num_mel_bins"), vocab=pick("vocab_size"),
                   n_src=cfg.get("max_source_positions", 1500),
                   n_tgt=cfg.get("max_target_positions", 448))

    def to_hf_config(self):
        return {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
                "d_model": self.d_model, "encoder_attention_heads": self.heads,
                "decoder_attention_heads": self.heads, "encoder_layers": self.enc_layers,
                "decoder_layers": self.dec_layers, "encoder_ffn_dim": self.ffn,
                "decoder_ffn_dim": self.ffn, "num_mel_bins": self.n_mels,
                "vocab_size": self.vocab, "max_source_positions": self.n_src,
                "max_target_positions": self.n_tgt, "activation_function": "gelu",
                "tie_word_embeddings": True}

    def name(self):
        """The CONFIGS name these dims match, or None."""
        for name, c in CONFIGS.items():
            if all(getattr(self, k) == v for k, v in c.items()):
                return name
        return None

    def __repr__(self):
        return ("Dims(d_model=%d, heads=%d, layers=%d/%d, ffn=%d, mels=%d, vocab=%d)"
                % (self.d_model, self.heads, self.enc_layers, self.dec_layers, self.ffn,
                   self.n_mels, self.vocab))


class Specials:
    """Special token ids (GPU-ENGINE.md section 1; oa tokenizer.py).

    Multilingual vocabularies (51865, and 51866 from v3 on, which adds one
    language) put eot at 50257; the task and notimestamps ids move up by one
    in v3.  An added_tokens.json, when given, overrides the table."""

    def __init__(self, vocab, added=None):
        multilingual = vocab >= 51865
        eot = 50257 if multilingual else 50256
        shift = vocab - 51865 if multilingual else 0  # languages added after 99
        self.eot = eot
        self.sot = eot + 1
        self.lang_en = eot + 2 if multilingual else None
        self.transcribe = (50359 + shift) if multilingual else 50358
        self.notimestamps = (50363 + shift) if multilingual else 50362
        if added:
            self.eot = added.get("<|endoftext|>", self.eot)
            self.sot = added.get("<|startoftranscript|>", self.sot)
            self.lang_en = added.get("<|en|>", self.lang_en if multilingual else None)
            self.transcribe = added.get("<|transcribe|>", self.transcribe)
            self.notimestamps = added.get("<|notimestamps|>", self.notimestamps)
        self.blank = 220  # "Ġ", suppressed at the first step with eot

    def prompt(self):
        p = [self.sot]
        if self.lang_en is not None:
            p.append(self.lang_en)
        return p + [self.transcribe, self.notimestamps]


# ---------------------------------------------------------------- parameters
# Module and attribute names follow Hugging Face's WhisperForConditionalGeneration
# so that state_dict() keys are the checkpoint's keys.


class _Attention(nn.Module):
    def __init__(self, d, **kw):
        super().__init__()
        self.q_proj = nn.Linear(d, d, **kw)
        self.k_proj = nn.Linear(d, d, bias=False, **kw)  # no bias in Whisper
        self.v_proj = nn.Linear(d, d, **kw)
        self.out_proj = nn.Linear(d, d, **kw)


class _Layer(nn.Module):
    def __init__(self, dims, cross, **kw):
        super().__init__()
        d = dims.d_model
        self.self_attn = _Attention(d, **kw)
        self.self_attn_layer_norm = nn.LayerNorm(d, **kw)
        if cross:
            self.encoder_attn = _Attention(d, **kw)
            self.encoder_attn_layer_norm = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, dims.ffn, **kw)
        self.fc2 = nn.Linear(dims.ffn, d, **kw)
        self.final_layer_norm = nn.LayerNorm(d, **kw)


class _Encoder(nn.Module):
    def __init__(self, dims, **kw):
        super().__init__()
        d = dims.d_model
        self.conv1 = nn.Conv1d(dims.n_mels, d, 3, padding=1, **kw)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1, **kw)
        self.embed_positions = nn.Embedding(dims.n_src, d, **kw)
        self.layers = nn.ModuleList(_Layer(dims, False, **kw) for _ in range(dims.enc_layers))
        self.layer_norm = nn.LayerNorm(d, **kw)


class _Decoder(nn.Module):
    def __init__(self, dims, **kw):
        super().__init__()
        d = dims.d_model
        self.embed_tokens = nn.Embedding(dims.vocab, d, **kw)
        self.embed_positions = nn.Embedding(dims.n_tgt, d, **kw)
        self.layers = nn.ModuleList(_Layer(dims, True, **kw) for _ in range(dims.dec_layers))
        self.layer_norm = nn.LayerNorm(d, **kw)


class _Seq2Seq(nn.Module):
    def __init__(self, dims, **kw):
        super().__init__()
        self.encoder = _Encoder(dims, **kw)
        self.decoder = _Decoder(dims, **kw)


class Whisper(nn.Module):
    """Whisper's parameters under HF key names (model.encoder..., model.decoder...).

    The output projection is tied to model.decoder.embed_tokens unless a
    checkpoint brings a different proj_out.weight (then kept in proj_out)."""

    def __init__(self, dims, device="cpu", dtype=torch.float32):
        super().__init__()
        self.dims = dims
        # Built on the meta device (no memory, no default init), then given
        # uninitialized storage on the target: init or loading fills it.
        self.model = _Seq2Seq(dims, device="meta", dtype=dtype)
        self.to_empty(device=device)
        self.proj_out = None
        for p in self.parameters():
            p.requires_grad_(False)

    def output_weight(self):
        return self.proj_out if self.proj_out is not None else self.model.decoder.embed_tokens.weight


def sinusoids(length, channels, max_timescale=10000.0):
    """Encoder position table: [sin | cos] over a geometric range of periods."""
    half = channels // 2
    step = math.log(max_timescale) / (half - 1)
    freqs = torch.exp(-step * torch.arange(half, dtype=torch.float64))
    angle = torch.arange(length, dtype=torch.float64)[:, None] * freqs[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=1).float()


@torch.no_grad()
def init_synthetic(model, seed):
    """Seeded random weights of the right shapes, filled on the model's device.

    Linear, conv and embedding weights ~ N(0, 0.02) (GPT-2's scale), biases 0,
    LayerNorms identity, encoder positions the true sinusoids: pre-LN blocks
    then keep activations O(1) in any dtype."""
    dev = next(model.parameters()).device
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    dims = model.dims
    for name, p in model.named_parameters():
        if name.endswith("layer_norm.weight"):
            p.fill_(1.0)
        elif name.endswith(".bias") or name.endswith("layer_norm.bias"):
            p.zero_()
        elif name == "model.encoder.embed_positions.weight":
            p.copy_(sinusoids(dims.n_src, dims.d_model))
        elif name == "model.decoder.embed_positions.weight":
            p.normal_(0.0, 0.01, generator=g)
        else:
            p.normal_(0.0, 0.02, generator=g)
    model.proj_out = None


# ---------------------------------------------------------------- checkpoints

# safetensors dtype names -> torch dtypes (the float ones a Whisper checkpoint uses, and ints)
ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
             "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
             "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    """Parse a .safetensors file by hand: 8-byte little-endian header length,
    a JSON header {name: {dtype, shape, data_offsets: [begin, end]}} (offsets
    from the end of the header), then the raw little-endian tensor bytes.

    Returns {name: tensor} of CPU tensors viewing a private (copy-on-write)
    memory map of the file, so nothing is read until it is used."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("%s: shorter than a safetensors header" % path)
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8 or n > 100 << 20:
            raise ValueError("%s: header length %d does not fit the file (%d bytes)"
                             % (path, n, size))
        header = json.loads(f.read(n).decode("utf-8"))
        base = 8 + n
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size > base else None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = ST_DTYPES.get(info.get("dtype"))
        if dt is None:
            raise ValueError("%s: tensor %s has unsupported dtype %r" % (path, name, info.get("dtype")))
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.tensor([], dtype=dt).element_size()
        if end - begin != numel * itemsize or base + end > size or begin < 0:
            raise ValueError("%s: tensor %s: offsets [%d, %d) do not hold %s of %s"
                             % (path, name, begin, end, shape, info["dtype"]))
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dt)
            continue
        out[name] = torch.frombuffer(mm, dtype=dt, count=numel, offset=base + begin).view(shape)
    return out


def write_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} as .safetensors (the inverse of read_safetensors;
    used by the loader test to make a checkpoint in the HF format)."""
    names = {v: k for k, v in ST_DTYPES.items()}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: ship the bits
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def _checkpoint_tensors(model_dir):
    """The tensors of a HF snapshot: model.safetensors (or its sharded index),
    else pytorch_model.bin."""
    st = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    binf = os.path.join(model_dir, "pytorch_model.bin")
    if os.path.exists(st):
        return read_safetensors(st), "model.safetensors"
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for s in shards:
            out.update(read_safetensors(os.path.join(model_dir, s)))
        return out, "%d safetensors shards" % len(shards)
    if os.path.exists(binf):
        try:
            sd = torch.load(binf, map_location="cpu", weights_only=True)
        except TypeError:  # a torch without weights_only
            sd = torch.load(binf, map_location="cpu")
        return sd, "pytorch_model.bin"
    raise FileNotFoundError("%s has no model.safetensors, model.safetensors.index.json "
                            "or pytorch_model.bin" % model_dir)


def read_json(path, default=None):
    if not os.path.exists(path):
        if default is not None:
            return default
        raise FileNotFoundError("%s is missing" % path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_dims(model_dir):
    return Dims.from_hf_config(read_json(os.path.join(model_dir, "config.json")))


@torch.no_grad()
def load_weights(model, model_dir):
    """Copy a HF snapshot's weights into model (converted to its dtype and
    device).  Returns a short description.  Missing keys are an error;
    k_proj biases (some conversions add zero ones) are dropped, which is
    exact: a key bias adds q.b to every score of a row, and softmax ignores
    that; other unknown keys are counted and ignored."""
    tensors, source = _checkpoint_tensors(model_dir)
    params = dict(model.named_parameters())
    seen, ignored = set(), []
    proj_out = None
    for key, t in tensors.items():
        k = key
        if k.startswith(("encoder.", "decoder.")):  # a bare WhisperModel's keys
            k = "model." + k
        if k == "proj_out.weight":
            proj_out = t
            continue
        p = params.get(k)
        if p is None:
            ignored.append(key)
            continue
        if tuple(t.shape) != tuple(p.shape):
            raise ValueError("%s: %s has shape %s, the model wants %s"
                             % (model_dir, key, list(t.shape), list(p.shape)))
        p.copy_(t.to(device=p.device, dtype=p.dtype))
        seen.add(k)
    pos = "model.encoder.embed_positions.weight"
    if pos not in seen:  # openai-style checkpoints compute it
        params[pos].copy_(sinusoids(model.dims.n_src, model.dims.d_model))
        seen.add(pos)
    missing = sorted(set(params) - seen)
    if missing:
        raise ValueError("%s: %d weights missing from %s, e.g. %s"
                         % (model_dir, len(missing), source, ", ".join(missing[:4])))
    emb = params["model.decoder.embed_tokens.weight"]
    model.proj_out = None  # tied
    if proj_out is not None:
        w = proj_out.to(device=emb.device, dtype=emb.dtype)
        if tuple(w.shape) != tuple(emb.shape):
            raise ValueError("%s: proj_out.weight has shape %s, want %s"
                             % (model_dir, list(w.shape), list(emb.shape)))
        if not torch.equal(w, emb):
            model.proj_out = w
    tied = model.proj_out is None
    note = "%s, %d tensors, proj_out %s" % (source, len(seen), "tied" if tied else "separate")
    if ignored:
        note += ", %d ignored (%s)" % (len(ignored), ", ".join(sorted(ignored)[:3]))
    return note


# ---------------------------------------------------------------- tokenizer


def byte_to_unicode():
    """GPT-2's byte-level BPE alphabet: each byte value 0..255 as one printable
    character.  Bytes that are printable Latin-1 (except space and soft
    hyphen) stand for themselves; the others, in order, take code points
    from 256 up."""
    keep = [b for b in range(256)
            if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Tokenizer:
    """Decode-only byte-level BPE: token id -> token string (vocab.json,
    added_tokens.json) -> bytes through the byte alphabet -> UTF-8.
    Special (added) tokens are skipped in text."""

    def __init__(self, vocab, added=None):
        u2b = {u: b for b, u in byte_to_unicode().items()}
        self.special = set((added or {}).values())
        self.bytes = {}
        self.bad = 0  # tokens whose string is outside the byte alphabet
        for tok, i in vocab.items():
            try:
                self.bytes[int(i)] = bytes(u2b[c] for c in tok)
            except KeyError:
                self.bad += 1
        for tok, i in (added or {}).items():
            self.special.add(int(i))

    @classmethod
    def from_dir(cls, model_dir):
        vocab = read_json(os.path.join(model_dir, "vocab.json"))
        added = read_json(os.path.join(model_dir, "added_tokens.json"), {})
        return cls(vocab, added)

    def token_bytes(self, i):
        """The bytes of one token; b"" for specials and unknown ids."""
        if i in self.special:
            return b""
        return self.bytes.get(i, b"")

    def decode(self, ids):
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", "replace")


# ---------------------------------------------------------------- features


def mel_filters(n_mels, sr=SAMPLE_RATE, n_fft=N_FFT, fmin=0.0, fmax=8000.0):
    """Slaney-scale, Slaney-normalized triangular mel filterbank [n_mels, 1 + n_fft/2].

    The Slaney mel scale is linear below 1 kHz (3 mels per 200 Hz) and
    logarithmic above (27 mels per factor 6.4).  Filter i rises from band
    edge i to i+1 and falls to i+2; each is scaled by 2/(width in Hz) so
    all have the same area."""
    f_break, mel_break = 1000.0, 15.0
    lin = 200.0 / 3
    logstep = math.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f < f_break, f / lin, mel_break + np.log(np.maximum(f, 1e-10) / f_break) / logstep)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m < mel_break, m * lin, f_break * np.exp(logstep * (m - mel_break)))

    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    bins = np.linspace(0.0, sr / 2.0, 1 + n_fft // 2)
    width = np.diff(edges)
    rel = edges[:, None] - bins[None, :]
    w = np.zeros((n_mels, bins.size))
    for i in range(n_mels):
        rise = -rel[i] / width[i]
        fall = rel[i + 2] / width[i + 1]
        w[i] = np.maximum(0.0, np.minimum(rise, fall))
    w *= (2.0 / (edges[2:n_mels + 2] - edges[:n_mels]))[:, None]
    return w


class Featurizer:
    """Log-mel spectrogram of one 30 s window, as Whisper's front end wants it
    (GPU-ENGINE.md section 2).  Thread-safe: the tables are read-only."""

    def __init__(self, n_mels):
        self.n_mels = n_mels
        self.filters = mel_filters(n_mels)
        n = np.arange(N_FFT)
        self.window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # periodic Hann

    def __call__(self, audio):
        """audio: float samples at 16 kHz in [-1, 1]; returns float32 [n_mels, 3000]."""
        x = np.zeros(N_SAMPLES, dtype=np.float64)
        n = min(len(audio), N_SAMPLES)
        x[:n] = audio[:n]
        pad = N_FFT // 2
        xp = np.pad(x, (pad, pad), mode="reflect")  # center=True
        frames = np.lib.stride_tricks.sliding_window_view(xp, N_FFT)[::HOP]  # 3001 frames
        spec = np.fft.rfft(frames * self.window, axis=-1)[:-1]  # drop the last frame
        power = spec.real ** 2 + spec.imag ** 2  # [3000, 201]
        mel = self.filters @ power.T  # [n_mels, 3000]
        logm = np.log10(np.maximum(mel, 1e-10))
        logm = np.maximum(logm, logm.max() - 8.0)
        return ((logm + 4.0) / 4.0).astype(np.float32)


def pcm16_to_float(pcm):
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


# ---------------------------------------------------------------- execution


class Runner:
    """Runs a Whisper over a slot-based static cache.

    Cache (zeroed at start, one slot per running request):
      self-attention K/V  [layers, slots, heads, n_tgt (448), 64]
      cross-attention K/V [layers, slots, heads, n_src (1500), 64]
    prefill(slot, mel) runs the encoder, writes the slot's cross K/V, runs
    the prompt through the decoder (self K/V at positions 0..P-1) and
    returns the first token.  decode(n, tokens, positions) runs one decoder
    step over slots 0..n-1 (the slot prefix; a free slot in it computes a
    throwaway row), each slot at its own position with its own keys masked
    to 0..position, and returns the greedy next token of each.  With CUDA
    graphs, decode() replays the graph of the smallest bucket >= n."""

    def __init__(self, model, specials, slots, suppress_eot=False, sdpa=None):
        self.model = model
        self.dims = d = model.dims
        self.sp = specials
        self.slots = slots
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.sdpa = (hasattr(F, "scaled_dot_product_attention") if sdpa is None else sdpa)
        kw = dict(device=self.device, dtype=self.dtype)
        L, H = d.dec_layers, d.heads
        self.sk = torch.zeros(L, slots, H, d.n_tgt, HEAD_DIM, **kw)
        self.sv = torch.zeros_like(self.sk)
        self.ck = torch.zeros(L, slots, H, d.n_src, HEAD_DIM, **kw)
        self.cv = torch.zeros_like(self.ck)
        self.tok_buf = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.pos_buf = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.out_buf = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.rows = torch.arange(slots, device=self.device)
        self.tgt_ar = torch.arange(d.n_tgt, device=self.device)
        # Greedy decoding masks: never the special tokens after eot (sot,
        # languages, tasks, timestamps: the prompt asked for none); eot too
        # when the length is decided elsewhere (synthetic weights); at the
        # first step also blank and eot (oa's begin_suppress).
        bias = torch.zeros(d.vocab, **kw)
        bias[specials.eot + 1:] = float("-inf")
        if suppress_eot:
            bias[specials.eot] = float("-inf")
        self.bias = bias
        first = bias.clone()
        first[specials.blank] = float("-inf")
        first[specials.eot] = float("-inf")
        self.first_bias = first
        self.prompt = torch.tensor(specials.prompt(), dtype=torch.long, device=self.device)
        self.graphs = {}
        self.cache_bytes = sum(t.numel() * t.element_size() for t in (self.sk, self.sv, self.ck, self.cv))

    # -- building blocks

    def _attend(self, q, k, v, mask=None, causal=False):
        """q [..., Lq, 64], k/v [..., Lk, 64]; mask bool, True = may attend."""
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        s = torch.matmul(q, k.transpose(-1, -2)) * (HEAD_DIM ** -0.5)
        if causal:
            lq, lk = q.shape[-2], k.shape[-2]
            mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v)

    @staticmethod
    def _heads(x, n, H):
        """[n, T, d] -> [n, H, T, 64]"""
        return x.view(n, -1, H, HEAD_DIM).transpose(1, 2)

    @staticmethod
    def _mlp(layer, x):
        h = layer.final_layer_norm(x)
        return x + layer.fc2(F.gelu(layer.fc1(h)))

    # -- encoder and first forward

    @torch.no_grad()
    def encode(self, mel):
        """mel [n_mels, 3000] or [N, n_mels, 3000] (any float) -> [N, 1500, d]"""
        enc = self.model.model.encoder
        H = self.dims.heads
        x = mel.to(device=self.device, dtype=self.dtype)
        if x.dim() == 2:
            x = x[None]
        n = x.shape[0]
        x = F.gelu(enc.conv1(x))
        x = F.gelu(enc.conv2(x))  # [N, d, 1500]
        x = x.transpose(1, 2) + enc.embed_positions.weight[None, :x.shape[2]]
        for layer in enc.layers:
            a = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = self._heads(a.q_proj(h), n, H)
            k = self._heads(a.k_proj(h), n, H)
            v = self._heads(a.v_proj(h), n, H)
            o = self._attend(q, k, v).transpose(1, 2).reshape(x.shape)
            x = x + a.out_proj(o)
            x = self._mlp(layer, x)
        return enc.layer_norm(x)

    @torch.no_grad()
    def prefill(self, slot, mel):
        """Encoder + prompt for one slot; returns the first generated token id."""
        return self.prefill_many([slot], [mel])[0]

    @torch.no_grad()
    def prefill_many(self, slots, mels):
        """One first forward for several requests at once (prefill
        coalescing): the encoder over their windows as one batch, then the
        prompt for each slot; returns their first token ids."""
        logits = self.prefill_logits(slots, mels) + self.first_bias
        return logits.argmax(dim=-1).tolist()

    @torch.no_grad()
    def prefill_logits(self, slots, mels):
        """prefill_many()'s logits [N, vocab] at the last prompt token,
        unmasked.  slots: an int or a list; mels: one mel or a list."""
        if isinstance(slots, int):
            slots, mels = [slots], [mels]
        mel = torch.stack([torch.as_tensor(m) for m in mels])
        enc_out = self.encode(mel)  # [N, 1500, d]
        n = len(slots)
        idx = torch.tensor(slots, dtype=torch.long, device=self.device)
        dec = self.model.model.decoder
        H, d = self.dims.heads, self.dims.d_model
        for l, layer in enumerate(dec.layers):
            a = layer.encoder_attn
            self.ck[l].index_copy_(0, idx, self._heads(a.k_proj(enc_out), n, H))
            self.cv[l].index_copy_(0, idx, self._heads(a.v_proj(enc_out), n, H))
        P = self.prompt.numel()
        x = (dec.embed_tokens.weight[self.prompt] + dec.embed_positions.weight[:P])[None].expand(n, P, d)
        for l, layer in enumerate(dec.layers):
            a = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = self._heads(a.q_proj(h), n, H)
            k = self._heads(a.k_proj(h), n, H)
            v = self._heads(a.v_proj(h), n, H)
            self.sk[l, :, :, :P].index_copy_(0, idx, k)
            self.sv[l, :, :, :P].index_copy_(0, idx, v)
            o = self._attend(q, k, v, causal=True).transpose(1, 2).reshape(n, P, d)
            x = x + a.out_proj(o)
            c = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = self._heads(c.q_proj(h), n, H)
            o = self._attend(q, self.ck[l].index_select(0, idx), self.cv[l].index_select(0, idx))
            x = x + c.out_proj(o.transpose(1, 2).reshape(n, P, d))
            x = self._mlp(layer, x)
        return F.linear(dec.layer_norm(x[:, -1]), self.model.output_weight())

    # -- batched decode

    def _decode_rows(self, n):
        """One decoder step over slots 0..n-1 from tok_buf/pos_buf[:n];
        writes each row's K/V at its position; returns next tokens [n]."""
        return (self._decode_logits(n) + self.bias).argmax(dim=-1)

    def _decode_logits(self, n):
        dec = self.model.model.decoder
        H, d = self.dims.heads, self.dims.d_model
        tok, pos = self.tok_buf[:n], self.pos_buf[:n]
        rows = self.rows[:n]
        x = dec.embed_tokens.weight[tok] + dec.embed_positions.weight[pos]  # [n, d]
        mask = (self.tgt_ar[None, :] <= pos[:, None])[:, None, None, :]  # [n, 1, 1, 448]
        for l, layer in enumerate(dec.layers):
            a = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = a.q_proj(h).view(n, H, 1, HEAD_DIM)
            self.sk[l][rows, :, pos] = a.k_proj(h).view(n, H, HEAD_DIM)
            self.sv[l][rows, :, pos] = a.v_proj(h).view(n, H, HEAD_DIM)
            o = self._attend(q, self.sk[l, :n], self.sv[l, :n], mask)
            x = x + a.out_proj(o.reshape(n, d))
            c = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = c.q_proj(h).view(n, H, 1, HEAD_DIM)
            o = self._attend(q, self.ck[l, :n], self.cv[l, :n])
            x = x + c.out_proj(o.reshape(n, d))
            x = self._mlp(layer, x)
        return F.linear(dec.layer_norm(x), self.model.output_weight())

    def bucket(self, n):
        if not self.graphs:
            return n
        for b in sorted(self.graphs):
            if b >= n:
                return b
        raise ValueError("no graph bucket for %d rows" % n)

    @torch.no_grad()
    def decode(self, n, tokens, positions):
        """tokens, positions: lists of n ints (a free slot: 0, 0)."""
        b = self.bucket(n)
        pad = b - n
        self.tok_buf[:b].copy_(torch.tensor(list(tokens) + [0] * pad, dtype=torch.long))
        self.pos_buf[:b].copy_(torch.tensor(list(positions) + [0] * pad, dtype=torch.long))
        g = self.graphs.get(b)
        if g is not None:
            g.replay()
            out = self.out_buf[:n]
        else:
            out = self._decode_rows(b)[:n]
        return out.tolist()

    @torch.no_grad()
    def decode_logits(self, n, tokens, positions):
        """decode()'s logits [n, vocab], unmasked, eager (for checks)."""
        self.tok_buf[:n].copy_(torch.tensor(list(tokens), dtype=torch.long))
        self.pos_buf[:n].copy_(torch.tensor(list(positions), dtype=torch.long))
        return self._decode_logits(n)

    @torch.no_grad()
    def capture_graphs(self, buckets):
        """Capture one CUDA graph of the decode step per bucket (largest first,
        sharing one memory pool).  Captured steps write slots' caches at
        position 0: call before serving."""
        buckets = sorted({b for b in buckets if 1 <= b <= self.slots}, reverse=True)
        self.tok_buf.zero_()
        self.pos_buf.zero_()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in buckets:
                for _ in range(2):
                    self.out_buf[:b].copy_(self._decode_rows(b))
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = None
        for b in buckets:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self.out_buf[:b].copy_(self._decode_rows(b))
            pool = g.pool()
            self.graphs[b] = g
        torch.cuda.synchronize()
        return buckets


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeat=1):
    """Mean wall seconds of fn() over repeat runs (synchronized on CUDA)."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeat
