#!/usr/bin/env python3
"""Builds the GGUF fixtures under tests/data/gguf/ with the `gguf` package (llama.cpp's own
writer) and the outputs transformers computes for the same weights.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors tokenizers gguf
    .venv/bin/python tools/make_gguf_fixtures.py

Files (tests/data/gguf/README.md says more):
  gpt2_f32.gguf, gpt2_f16.gguf  the tests/data/models/gpt2 weights, with its tokenizer
  qwen2_f32.gguf                the tests/data/models/qwen2 weights (q/k/v biases, tied head)
  llama_mixed.gguf              a llama of width 256 whose tensors use every type the reader
                                dequantises (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K),
                                q and k interleaved as llama.cpp's converter writes them, with the
                                SentencePiece tokenizer of tests/data/tokenizers/llama2
  llama_q4_0.gguf               the same llama, every matrix in Q4_0
  tok_*.gguf                    tokenizer-only files (no tensors) of tests/data/tokenizers/*
  reference.safetensors         per model file: <file>.input_ids and <file>.logits, computed by
                                transformers from the weights the file holds (gguf's own
                                dequantisation), so every type is compared at f32 precision
  reference.json                greedy tokens per model file; per tokenizer file, the texts and
                                the ids the tokenizer.json gives

Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks come from gguf's quantizer; the package has none for the
K types, so quantize_k below writes valid Q4_K, Q5_K and Q6_K blocks (simple min/max scales:
llama.cpp's search for better scales does not matter for a parity test), which gguf's own
dequantize then reads back for the reference.
"""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import (GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          Qwen2ForCausalLM)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "gguf")
MODELS = os.path.join(REPO, "tests", "data", "models")
TOKENIZERS = os.path.join(REPO, "tests", "data", "tokenizers")

TEXTS = ["Hello world", "The quick brown fox jumps over the lazy dog.", "  leading spaces and\ttabs\n",
         "numbers 12345 and 3.14159", "don't stop, it's fine", "naïve café déjà vu", "emoji 🙂 ok",
         "a", "", "line one\nline two\n\nline four"]


def rope_theta(cfg):
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def f16_round(a):
    return a.astype(np.float16).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# K-quant blocks (layouts: Note [GGUF blocks] in runtime/checkpoint/gguf_quants.cc)

def pack_scale_min(sc, mn):
    """12 bytes holding eight 6-bit scales and minimums, as get_scale_min reads them."""
    q = np.zeros(12, np.uint8)
    for j in range(4):
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
        q[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6)
        q[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4)
    return q


def k_block_q45(x, bits):
    levels = (1 << bits) - 1
    sub = x.reshape(8, 32)
    mn = np.maximum(0.0, -sub.min(axis=1))
    scale = (sub.max(axis=1) + mn) / levels
    d = f16_round(np.array(scale.max() / 63 if scale.max() > 0 else 1.0))
    dmin = f16_round(np.array(mn.max() / 63 if mn.max() > 0 else 1.0))
    sc = np.clip(np.round(scale / d), 0, 63).astype(np.int64)
    m = np.clip(np.round(mn / dmin), 0, 63).astype(np.int64)
    u = np.zeros((8, 32), np.int64)
    for j in range(8):
        step = float(d) * sc[j]
        u[j] = 0 if step == 0 else np.clip(np.round((sub[j] + float(dmin) * m[j]) / step), 0, levels)
    head = np.concatenate([np.array([d], np.float16).view(np.uint8), np.array([dmin], np.float16).view(np.uint8),
                           pack_scale_min(sc, m)])
    qs = np.zeros(128, np.uint8)
    qh = np.zeros(32, np.uint8)
    for c in range(4):
        lo, hi = u[2 * c], u[2 * c + 1]
        qs[32 * c:32 * c + 32] = (lo & 0xF) | ((hi & 0xF) << 4)
        qh |= (((lo >> 4) & 1) << (2 * c)).astype(np.uint8) | (((hi >> 4) & 1) << (2 * c + 1)).astype(np.uint8)
    return np.concatenate([head, qh, qs]) if bits == 5 else np.concatenate([head, qs])


def k_block_q6(x):
    sub = x.reshape(16, 16)
    scale = np.abs(sub).max(axis=1) / 32
    d = f16_round(np.array(scale.max() / 127 if scale.max() > 0 else 1.0))
    sc = np.clip(np.round(scale / d), -128, 127).astype(np.int64)
    u = np.zeros(256, np.int64)
    for j in range(16):
        step = float(d) * sc[j]
        u[16 * j:16 * j + 16] = 32 if step == 0 else np.clip(np.round(sub[j] / step), -32, 31) + 32
    ql = np.zeros(128, np.uint8)
    qh = np.zeros(64, np.uint8)
    for h in range(2):
        n = 128 * h
        for l in range(32):
            a, b, c, e = u[n + l], u[n + l + 32], u[n + l + 64], u[n + l + 96]
            ql[64 * h + l] = (a & 0xF) | ((c & 0xF) << 4)
            ql[64 * h + l + 32] = (b & 0xF) | ((e & 0xF) << 4)
            qh[32 * h + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), np.array([d], np.float16).view(np.uint8)])


def quantize(w, qtype):
    """(bytes for the file, the values they hold per gguf's dequantize)."""
    w = np.ascontiguousarray(w, np.float32)
    if qtype == T.F32:
        return w, w
    if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        rows = w.reshape(-1, 256)
        blocks = [k_block_q6(r) if qtype == T.Q6_K else k_block_q45(r, 4 if qtype == T.Q4_K else 5) for r in rows]
        data = np.stack(blocks).reshape(*w.shape[:-1], -1)
    else:
        data = quants.quantize(w, qtype)
    return data, quants.dequantize(data, qtype).astype(np.float32).reshape(w.shape)


def permute(w, heads):
    """llama.cpp's converter: each head's rotary halves interleaved (rows 2i + j <- j d/2 + i)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------
# Tokenizer metadata

def tokenizer_tables(folder, vocab_size=None):
    tj = json.load(open(os.path.join(folder, "tokenizer.json")))
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    size = max(tok.get_vocab_size(with_added_tokens=True), vocab_size or 0)
    inv = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
    tokens = [inv.get(i, f"[PAD{i}]") for i in range(size)]
    types = [1 if i in inv else 5 for i in range(size)]
    for a in tj["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
    return tj, tok, tokens, types


def add_bpe_tokenizer(w, folder, pre, vocab_size=None, bos=None, eos=None, add_bos=False):
    tj, _, tokens, types = tokenizer_tables(folder, vocab_size)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    w.add_add_bos_token(add_bos)


def add_spm_tokenizer(w, folder, vocab_size=None):
    tj, tok, tokens, types = tokenizer_tables(folder, vocab_size)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]
    rank = {}
    for r, (a, b) in enumerate(merges):
        rank.setdefault(a + b, r)
    scores = []
    for i, t in enumerate(tokens):
        if t.startswith("<0x") and len(t) == 6 and types[i] == 1:
            types[i] = 6
        if t == tj["model"].get("unk_token"):
            types[i] = 2
        scores.append(-float(rank[t]) if t in rank else -1e6 - i)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(tok.token_to_id("<s>"))
    w.add_eos_token_id(tok.token_to_id("</s>"))
    w.add_unk_token_id(tok.token_to_id("<unk>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


# ---------------------------------------------------------------------------------------------
# Model files

def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gpt2_file(name, dtype, refs, info):
    model = GPT2LMHeadModel.from_pretrained(os.path.join(MODELS, "gpt2")).eval()
    cfg = model.config
    w = gguf.GGUFWriter(os.path.join(OUT, name), "gpt2")
    w.add_context_length(cfg.n_positions)
    w.add_embedding_length(cfg.n_embd)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.n_inner)
    w.add_head_count(cfg.n_head)
    w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    add_bpe_tokenizer(w, os.path.join(MODELS, "gpt2"), "gpt-2", cfg.vocab_size, bos=2, eos=2)
    sd = model.state_dict()
    held = {}
    names = {"transformer.wte.weight": "token_embd.weight", "transformer.wpe.weight": "position_embd.weight",
             "transformer.ln_f.weight": "output_norm.weight", "transformer.ln_f.bias": "output_norm.bias"}
    parts = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    for i in range(cfg.n_layer):
        for hf, g in parts.items():
            for kind in ("weight", "bias"):
                names[f"transformer.h.{i}.{hf}.{kind}"] = f"blk.{i}.{g}.{kind}"
    for hf, g in names.items():
        t = sd[hf].numpy()
        conv1d = g.endswith(".weight") and any(p in g for p in ("attn_qkv", "attn_output", "ffn_up", "ffn_down"))
        if conv1d:
            t = t.T.copy()
        matrix = t.ndim == 2
        if matrix and dtype == "f16":
            data = t.astype(np.float16)
            value = data.astype(np.float32)
        else:
            data, value = t.astype(np.float32), t.astype(np.float32)
        w.add_tensor(g, data)
        held[hf] = torch.from_numpy(value.T.copy() if conv1d else value)
    write(w)
    model.load_state_dict(held, strict=False)
    reference(model, name, cfg.vocab_size, refs, info, first=5, last=500)


def llama_model(seed):
    cfg = LlamaConfig(vocab_size=645, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed" in n or "lm_head" in n:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / np.sqrt(p.shape[-1]) * 1.5)
    return model


MIXED = {  # every dequantised type once
    "token_embd.weight": T.Q6_K, "output.weight": T.Q8_0,
    "blk.0.attn_q.weight": T.Q4_K, "blk.0.attn_k.weight": T.Q5_K, "blk.0.attn_v.weight": T.Q6_K,
    "blk.0.attn_output.weight": T.Q8_0, "blk.0.ffn_gate.weight": T.Q4_0, "blk.0.ffn_up.weight": T.Q4_1,
    "blk.0.ffn_down.weight": T.Q5_0,
    "blk.1.attn_q.weight": T.Q5_1, "blk.1.attn_k.weight": T.BF16, "blk.1.attn_v.weight": T.F16,
    "blk.1.attn_output.weight": T.F32, "blk.1.ffn_gate.weight": T.Q6_K, "blk.1.ffn_up.weight": T.Q4_K,
    "blk.1.ffn_down.weight": T.Q8_0,
}


def add_llama_hparams(w, cfg):
    """The llama / qwen2 metadata of a transformers config."""
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(rope_theta(cfg))


LAYER_PARTS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


def llama_file(name, types, refs, info):
    model = llama_model(4242)
    cfg = model.config
    w = gguf.GGUFWriter(os.path.join(OUT, name), "llama")
    add_llama_hparams(w, cfg)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    add_spm_tokenizer(w, os.path.join(TOKENIZERS, "llama2"), cfg.vocab_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    parts = LAYER_PARTS
    for i in range(cfg.num_hidden_layers):
        for hf, g in parts.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{g}.weight"
    sd = model.state_dict()
    held = {}
    for hf, g in names.items():
        t = sd[hf].numpy()
        qtype = T.F32 if t.ndim == 1 else types(g)
        data, value = quantize(t, qtype)
        if g.endswith("attn_q.weight") or g.endswith("attn_k.weight"):
            heads = cfg.num_attention_heads if "attn_q" in g else cfg.num_key_value_heads
            data = permute(data, heads)  # rows move whole: quantizing commutes with it
        w.add_tensor(g, data, raw_dtype=None if qtype in (T.F32,) or data.dtype == np.float16 else qtype)
        held[hf] = torch.from_numpy(value)
    write(w)
    model.load_state_dict(held, strict=False)
    reference(model, name, cfg.vocab_size, refs, info, first=3, last=600)


def qwen2_file(name, refs, info):
    model = Qwen2ForCausalLM.from_pretrained(os.path.join(MODELS, "qwen2")).eval()
    cfg = model.config
    w = gguf.GGUFWriter(os.path.join(OUT, name), "qwen2")
    add_llama_hparams(w, cfg)
    add_bpe_tokenizer(w, os.path.join(TOKENIZERS, "bpe"), "gpt-2", cfg.vocab_size, eos=2)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    parts = LAYER_PARTS
    sd = model.state_dict()
    for i in range(cfg.num_hidden_layers):
        for hf, g in parts.items():
            for kind in ("weight", "bias"):
                if f"model.layers.{i}.{hf}.{kind}" in sd:
                    names[f"model.layers.{i}.{hf}.{kind}"] = f"blk.{i}.{g}.{kind}"
    for hf, g in names.items():
        w.add_tensor(g, sd[hf].numpy().astype(np.float32))  # Qwen2's q and k are not permuted
    write(w)
    reference(model, name, cfg.vocab_size, refs, info, first=5, last=500)


def reference(model, name, vocab, refs, info, first, last):
    gen = torch.Generator().manual_seed(len(name))
    ids = torch.randint(first, last, (2, 12), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        out = model.generate(ids[:1, :6], max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    refs[name + ".input_ids"] = ids.contiguous()
    refs[name + ".logits"] = logits.float().contiguous()
    info["models"][name] = {"greedy_prompt": ids[0, :6].tolist(), "greedy": out[0, 6:].tolist(),
                            "logits_std": round(float(logits.std()), 3)}
    print(f"{name}: logits std {float(logits.std()):.3f}, greedy {out[0, 6:].tolist()}")


def tokenizer_file(name, folder, kind, pre=None, bos=None, add_bos=False, info=None):
    w = gguf.GGUFWriter(os.path.join(OUT, name), "llama")
    if kind == "spm":
        add_spm_tokenizer(w, folder)
    else:
        _, tok, _, _ = tokenizer_tables(folder)
        add_bpe_tokenizer(w, folder, pre, bos=tok.token_to_id(bos) if bos else None, add_bos=add_bos)
    write(w)
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with_special = kind == "spm" or add_bos
    info["tokenizers"][name] = {"add_special_tokens": with_special,
                                "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=with_special).ids}
                                          for t in TEXTS]}


def main():
    os.makedirs(OUT, exist_ok=True)
    refs, info = {}, {"generated_by": "tools/make_gguf_fixtures.py", "gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else "",
                      "torch_version": torch.__version__, "models": {}, "tokenizers": {}}
    gpt2_file("gpt2_f32.gguf", "f32", refs, info)
    gpt2_file("gpt2_f16.gguf", "f16", refs, info)
    qwen2_file("qwen2_f32.gguf", refs, info)
    llama_file("llama_mixed.gguf", lambda g: MIXED[g], refs, info)
    llama_file("llama_q4_0.gguf", lambda g: T.Q4_0, refs, info)
    tokenizer_file("tok_llama2.gguf", os.path.join(TOKENIZERS, "llama2"), "spm", info=info)
    tokenizer_file("tok_llama3.gguf", os.path.join(TOKENIZERS, "llama3"), "bpe", pre="llama-bpe",
                   bos="<|begin_of_text|>", add_bos=True, info=info)
    tokenizer_file("tok_qwen2.gguf", os.path.join(TOKENIZERS, "qwen2"), "bpe", pre="qwen2", info=info)
    tokenizer_file("tok_gpt2.gguf", os.path.join(TOKENIZERS, "bpe"), "bpe", pre="gpt-2", info=info)
    save_file(refs, os.path.join(OUT, "reference.safetensors"))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(info, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
