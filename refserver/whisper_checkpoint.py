#!/usr/bin/python3
"""Write a Whisper checkpoint in the Hugging Face layout and check that the
whisper engine's loader reads it back (the loader test's Python half;
refserver/whisper_test.go runs it, then serves the checkpoint).

    whisper_checkpoint.py OUT_DIR AUDIO.wav [--max-new-tokens N] [--slots S] [--seed K]

OUT_DIR gets what a HF snapshot of whisper-tiny has for the server:
config.json, model.safetensors (float16, as HF ships large-v3; no
proj_out.weight, so the output projection must be tied), vocab.json and
added_tokens.json; OUT_DIR/bin/ the same weights as pytorch_model.bin
(float32, with proj_out.weight present).  The weights are seeded random
ones, rounded to float16 so that both files hold them exactly.

It then checks, exiting 1 on a mismatch:
  - the file's key names against the HF names written out independently
    below (GPU-ENGINE.md section 3): k_proj without bias, and so on;
  - every weight loaded back from either file equals the original bit for bit;
  - the greedy transcript of AUDIO computed with the original model in
    memory equals the one of the models loaded from each file;
  - safetensors float32/bfloat16/int64 round trips through the reader.

and writes OUT_DIR/expected.json {"text", "tokens", "max_new_tokens"}: the
server started with --model-path OUT_DIR must answer that text.  The
vocabulary is made up: each distinct generated token gets a word (some
with non-ASCII letters, to exercise the byte-level decoding), written in
GPT-2's byte alphabet by its own encoder here; the expected text is the
words joined, so the server's decoder is checked against strings, not
against itself.

No real Whisper checkpoint was available offline; this tests the format
path, not a real model's numerics.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rscommon  # noqa: E402
import whisper_engine  # noqa: E402

WORDS = [" café", " naïve", " Zürich", " tea", " 東京", " rain", " week", " ½",
         " señor", " weather", " report", " Ø", " says", " it", " will", " this"]


def hf_keys(dims):
    """The HF WhisperForConditionalGeneration state-dict keys, written from
    the documented mapping rather than from the model's own module names."""
    keys = ["model.encoder.conv1.weight", "model.encoder.conv1.bias",
            "model.encoder.conv2.weight", "model.encoder.conv2.bias",
            "model.encoder.embed_positions.weight",
            "model.encoder.layer_norm.weight", "model.encoder.layer_norm.bias",
            "model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
            "model.decoder.layer_norm.weight", "model.decoder.layer_norm.bias"]

    def attn(prefix):
        out = [prefix + ".k_proj.weight"]  # k_proj has no bias
        for p in ("q_proj", "v_proj", "out_proj"):
            out += [prefix + "." + p + ".weight", prefix + "." + p + ".bias"]
        return out

    def common(prefix):
        out = attn(prefix + ".self_attn")
        for p in ("self_attn_layer_norm", "fc1", "fc2", "final_layer_norm"):
            out += [prefix + "." + p + ".weight", prefix + "." + p + ".bias"]
        return out

    for i in range(dims.enc_layers):
        keys += common("model.encoder.layers.%d" % i)
    for i in range(dims.dec_layers):
        pre = "model.decoder.layers.%d" % i
        keys += common(pre) + attn(pre + ".encoder_attn")
        keys += [pre + ".encoder_attn_layer_norm.weight", pre + ".encoder_attn_layer_norm.bias"]
    return sorted(keys)


def to_bpe_string(s):
    """Text -> GPT-2 byte-alphabet string: each UTF-8 byte as one character
    (printable Latin-1 bytes as themselves, the other 68 shifted to U+0100
    and up, in byte order)."""
    shifted, out = {}, []
    n = 0
    for b in range(256):
        printable = 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        if not printable:
            shifted[b] = chr(0x100 + n)
            n += 1
    for b in s.encode("utf-8"):
        out.append(shifted.get(b, chr(b)))
    return "".join(out)


def greedy(wm, torch, model, specials, mel, slots, max_new):
    """The engine's real-weights decoding of one request, at batch 1."""
    r = wm.Runner(model, specials, slots)
    with torch.no_grad():
        tok = r.prefill(0, mel)
        pos = len(specials.prompt())
        out = []
        while tok != specials.eot:
            out.append(tok)
            if len(out) >= max_new:
                break
            tok = r.decode(1, [tok], [pos])[0]
            pos += 1
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("audio")
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--slots", type=int, default=8, help="the server's --max-running-requests")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    whisper_engine.prepare_threads(0)
    import torch
    import whisper_model as wm
    torch.set_num_threads(whisper_engine.prepare_threads(0))
    problems = []

    dims = wm.Dims.named("tiny")
    specials = wm.Specials(dims.vocab)
    model = wm.Whisper(dims)
    wm.init_synthetic(model, a.seed)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(prm.half().float())
    state = {k: v.clone() for k, v in model.state_dict().items()}

    with open(a.audio, "rb") as f:
        pcm = rscommon.decode_audio(f.read())
    mel = torch.from_numpy(wm.Featurizer(dims.n_mels)(wm.pcm16_to_float(pcm)))
    tokens = greedy(wm, torch, model, specials, mel, a.slots, a.max_new_tokens)
    if not tokens:
        problems.append("the seeded model generated no token")

    # vocabulary: a word per distinct generated token, filler for a few more ids
    words = {}
    for t in tokens:
        if t not in words:
            words[t] = WORDS[len(words) % len(WORDS)] + ("" if len(words) < len(WORDS) else str(len(words)))
    vocab = {to_bpe_string(w): t for t, w in words.items()}
    for i in range(0, 300):
        if i not in words:
            vocab.setdefault(to_bpe_string("w%d" % i), i)
    added = {"<|endoftext|>": specials.eot, "<|startoftranscript|>": specials.sot,
             "<|en|>": specials.lang_en, "<|transcribe|>": specials.transcribe,
             "<|notimestamps|>": specials.notimestamps}
    text = "".join(words[t] for t in tokens).strip()

    os.makedirs(os.path.join(a.out, "bin"), exist_ok=True)
    for d in (a.out, os.path.join(a.out, "bin")):
        for name, obj in (("config.json", dims.to_hf_config()), ("vocab.json", vocab),
                          ("added_tokens.json", added)):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                json.dump(obj, f, ensure_ascii=False)
    wm.write_safetensors(os.path.join(a.out, "model.safetensors"),
                         {k: v.half() for k, v in state.items()}, {"format": "pt"})
    binstate = dict(state)
    binstate["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]  # shares storage
    torch.save(binstate, os.path.join(a.out, "bin", "pytorch_model.bin"))

    # key names as HF spells them
    on_disk = sorted(wm.read_safetensors(os.path.join(a.out, "model.safetensors")))
    want = hf_keys(dims)
    if on_disk != want:
        problems.append("model.safetensors keys differ from HF's: extra %s, missing %s" % (
            sorted(set(on_disk) - set(want))[:5], sorted(set(want) - set(on_disk))[:5]))

    # load back, compare weights and transcripts
    for d in (a.out, os.path.join(a.out, "bin")):
        m2 = wm.Whisper(wm.load_dims(d))
        note = wm.load_weights(m2, d)
        loaded = m2.state_dict()
        for k, v in state.items():
            if loaded[k].dtype != v.dtype or not torch.equal(loaded[k], v):
                problems.append("%s: %s differs after loading" % (d, k))
        if m2.proj_out is not None:
            problems.append("%s: proj_out should be tied (%s)" % (d, note))
        t2 = greedy(wm, torch, m2, wm.Specials(dims.vocab, added), mel, a.slots, a.max_new_tokens)
        if t2 != tokens:
            problems.append("%s: loaded model generated %s, the original %s" % (d, t2, tokens))
        if wm.Tokenizer.from_dir(d).decode(tokens).strip() != text:
            problems.append("%s: tokenizer decodes %r, want %r"
                            % (d, wm.Tokenizer.from_dir(d).decode(tokens), text))

    # the reader on other dtypes
    g = torch.Generator().manual_seed(1)
    small = {"f32": torch.randn(3, 5, generator=g), "bf16": torch.randn(7, generator=g).bfloat16(),
             "i64": torch.arange(6).view(2, 3), "empty": torch.zeros(0, 4)}
    path = os.path.join(a.out, "dtypes.safetensors")
    wm.write_safetensors(path, small)
    back = wm.read_safetensors(path)
    for k, v in small.items():
        if back[k].dtype != v.dtype or tuple(back[k].shape) != tuple(v.shape) or not torch.equal(back[k], v):
            problems.append("safetensors round trip of %s (%s) failed" % (k, v.dtype))
    os.remove(path)

    with open(os.path.join(a.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"text": text, "tokens": tokens, "max_new_tokens": a.max_new_tokens}, f,
                  ensure_ascii=False)
    print(json.dumps({"text": text, "tokens": tokens, "keys": len(on_disk),
                      "problems": problems}, ensure_ascii=False))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
