#!/usr/bin/env python3
"""Cross-check whisper_model.py against Hugging Face transformers.

Optional: the engine never imports transformers or safetensors; this script
needs both, so it runs where they are installed (the H200 image), not in CI.

    whisper_hfcheck.py [--device cpu|cuda] [--dims tiny|large-v3]

  1. features: Featurizer vs transformers' WhisperFeatureExtractor (80 and
     128 mels; short, 30 s and longer audio);
  2. the byte alphabet vs transformers' GPT-2 bytes_to_unicode;
  3. safetensors: the reader on a file of the safetensors package, and the
     package on a file of the writer;
  4. the model: a WhisperForConditionalGeneration with random weights (every
     parameter perturbed, so biases and LayerNorms are not trivial) saved
     with save_pretrained, loaded by load_weights; encoder output, prompt
     logits and one cached decode step's logits compared with HF's forward,
     float32, with SDPA and with the matmul fallback.

Prints one JSON object; exits 1 when a difference is over its tolerance.
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dims", default="tiny")
    a = p.parse_args(argv)
    import numpy as np
    import torch
    import transformers
    import safetensors.torch as st
    import whisper_model as wm

    res, bad = {"transformers": transformers.__version__, "torch": torch.__version__}, []

    def check(name, value, tol):
        res[name] = float(value)
        if not value <= tol:
            bad.append("%s = %g > %g" % (name, value, tol))

    # 1. features
    rng = np.random.default_rng(0)
    for n_mels in (80, 128):
        fe = transformers.WhisperFeatureExtractor(feature_size=n_mels)
        ours = wm.Featurizer(n_mels)
        for secs in (3.7, 30.0, 41.0):
            t = np.arange(int(secs * 16000)) / 16000
            audio = (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 0.5 * t)
                     + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
            ref = fe(audio, sampling_rate=16000, return_tensors="np").input_features[0]
            got = ours(audio)
            check("features_%d_%gs_maxdiff" % (n_mels, secs), np.abs(ref - got).max(), 1e-4)
        hf_filters = np.asarray(fe.mel_filters).T  # HF keeps [freq, mels]
        check("mel_filters_%d_maxdiff" % n_mels, np.abs(hf_filters - ours.filters).max(), 1e-6)

    # 2. byte alphabet
    ref_table = None
    for mod in ("transformers.models.gpt2.tokenization_gpt2", "transformers.convert_slow_tokenizer",
                "transformers.tokenization_utils_base"):
        try:
            ref_table = __import__(mod, fromlist=["bytes_to_unicode"]).bytes_to_unicode()
            break
        except (ImportError, AttributeError):
            continue
    if ref_table is not None:
        res["byte_alphabet_equal"] = ref_table == wm.byte_to_unicode()
        if not res["byte_alphabet_equal"]:
            bad.append("byte alphabet differs")
    else:
        res["byte_alphabet_equal"] = "not checked: no bytes_to_unicode in transformers"
    try:  # the tokenizers package: the same 256 characters, order aside
        from tokenizers.pre_tokenizers import ByteLevel
        res["byte_alphabet_set_equal"] = set(ByteLevel.alphabet()) == set(wm.byte_to_unicode().values())
        if not res["byte_alphabet_set_equal"]:
            bad.append("byte alphabet characters differ from tokenizers'")
    except ImportError as e:
        res["byte_alphabet_set_equal"] = "not checked: %s" % e

    tmp = tempfile.mkdtemp()
    # 3. safetensors interop
    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g).half(),
               "c": torch.randn(2, 2, generator=g).bfloat16(), "d": torch.arange(7)}
    st.save_file(tensors, os.path.join(tmp, "lib.safetensors"))
    mine = wm.read_safetensors(os.path.join(tmp, "lib.safetensors"))
    wm.write_safetensors(os.path.join(tmp, "mine.safetensors"), tensors)
    lib = st.load_file(os.path.join(tmp, "mine.safetensors"))
    ok = all(torch.equal(mine[k], v) and torch.equal(lib[k], v) and mine[k].dtype == v.dtype
             for k, v in tensors.items())
    res["safetensors_interop"] = ok
    if not ok:
        bad.append("safetensors interop")

    # 4. the model against HF
    d = wm.Dims.named(a.dims)
    cfg = transformers.WhisperConfig(
        vocab_size=d.vocab, num_mel_bins=d.n_mels, d_model=d.d_model,
        encoder_layers=d.enc_layers, decoder_layers=d.dec_layers,
        encoder_attention_heads=d.heads, decoder_attention_heads=d.heads,
        encoder_ffn_dim=d.ffn, decoder_ffn_dim=d.ffn,
        max_source_positions=d.n_src, max_target_positions=d.n_tgt)
    torch.manual_seed(0)
    hf = transformers.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for prm in hf.parameters():
            prm.add_(0.02 * torch.randn_like(prm))
    hf_dir = os.path.join(tmp, "hf")
    hf.save_pretrained(hf_dir)
    res["hf_files"] = sorted(os.listdir(hf_dir))
    keys = sorted(wm.read_safetensors(os.path.join(hf_dir, "model.safetensors")))
    res["hf_has_proj_out"] = "proj_out.weight" in keys
    res["hf_has_k_bias"] = any(k.endswith("k_proj.bias") for k in keys)
    hf = hf.to(a.device)
    model = wm.Whisper(wm.load_dims(hf_dir), device=a.device)
    res["load_note"] = wm.load_weights(model, hf_dir)
    sp = wm.Specials(d.vocab)
    audio = (0.2 * np.sin(2 * np.pi * 300 * np.arange(5 * 16000) / 16000)).astype(np.float32)
    mel = torch.from_numpy(wm.Featurizer(d.n_mels)(audio))
    feats = mel[None].to(a.device)
    prompt = sp.prompt()
    with torch.no_grad():
        ref_enc = hf.model.encoder(feats).last_hidden_state[0]
        for sdpa in (True, False):
            if sdpa and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
                continue
            tag = "sdpa" if sdpa else "matmul"
            r = wm.Runner(model, sp, 2, sdpa=sdpa)
            enc = r.encode(mel)[0]
            check("encoder_%s_maxdiff" % tag, (enc - ref_enc).abs().max().item(), 2e-3)
            lg = r.prefill_logits(1, mel)[0]
            ids = torch.tensor([prompt], device=a.device)
            ref = hf(input_features=feats, decoder_input_ids=ids).logits[0, -1]
            check("prompt_logits_%s_maxdiff" % tag, (lg - ref).abs().max().item(), 2e-3)
            nxt = int(ref.argmax())
            step = r.decode_logits(2, [0, nxt], [0, len(prompt)])[1]
            ids2 = torch.tensor([prompt + [nxt]], device=a.device)
            ref2 = hf(input_features=feats, decoder_input_ids=ids2).logits[0, -1]
            check("decode_logits_%s_maxdiff" % tag, (step - ref2).abs().max().item(), 2e-3)
            res["logit_scale_%s" % tag] = float(ref2.abs().max())
    res["problems"] = bad
    print(json.dumps(res))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
