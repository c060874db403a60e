#!/usr/bin/env python3
"""Builds the Llama-family parity fixtures under tests/data/models/: tiny llama, mistral and qwen2
models with random weights and grouped-query attention (8 query heads over 2 KV heads), saved by
transformers, plus the outputs transformers computes for them (forward pass, generation). The shared
helpers, sizes and reference formats are those of tools/make_fixtures.py.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
    .venv/bin/python tools/make_llama_fixtures.py            # --only llama3,qwen2 for some folders

Folders (tests/data/models/README.md lists them too):
  llama3         rope_parameters of type llama3, tied head, config.json as transformers 5 writes it
  llama_linear   linear rope scaling, untied head, attention_bias, head_dim 16 (heads x head_dim != hidden),
                 config.json in the Hub's older form (rope_scaling + rope_theta)
  llama_dynamic  dynamic NTK rope scaling over max_position_embeddings 16, which the 24-token reference
                 input exceeds
  mistral        MistralForCausalLM, untied, sliding_window larger than every sequence, sharded safetensors
  qwen2          Qwen2ForCausalLM, q/k/v biases, tied head, rope_theta 1e6
  qwen2_bf16     the qwen2 weights in bfloat16 on disk (forward only)
"""
import argparse
import copy
import os
import shutil

import torch
from safetensors import safe_open

import make_fixtures as mf
from make_fixtures import log
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)
import transformers

HIDDEN, HEADS, KV_HEADS, LAYERS, FFN, POSITIONS = 64, 8, 2, 2, 96, 64
EOS = PAD = mf.GPT2_END
SEEDS = {"llama3": 1111, "llama_linear": 1202, "llama_dynamic": 1303, "mistral": 1404, "qwen2": 1505}

LLAMA_HIDDEN = ("hidden_states.0 = embed_tokens(input_ids); hidden_states.1 = output of layer 0; "
                "hidden_states.2 = norm(output of layer 1) = last_hidden_state (the last entry is after the final "
                "RMSNorm)")


def common(**kw):
    base = dict(vocab_size=mf.BPE_MODEL_VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS,
                rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=EOS, pad_token_id=None)
    base.update(kw)
    return base


def build(name):
    seed = SEEDS[name]
    if name == "llama3":
        cls, cfg = LlamaForCausalLM, LlamaConfig(**common(
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16}))
    elif name == "llama_linear":
        cls, cfg = LlamaForCausalLM, LlamaConfig(**common(
            tie_word_embeddings=False, attention_bias=True, head_dim=16,
            rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 2.0}))
    elif name == "llama_dynamic":
        cls, cfg = LlamaForCausalLM, LlamaConfig(**common(
            tie_word_embeddings=False, max_position_embeddings=16,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.0}))
    elif name == "mistral":
        cls, cfg = MistralForCausalLM, MistralConfig(**common(
            tie_word_embeddings=False, sliding_window=4096, rope_theta=10000.0))
    elif name == "qwen2":
        cls, cfg = Qwen2ForCausalLM, Qwen2Config(**common(
            tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False))
    else:
        raise ValueError(name)
    torch.manual_seed(seed)
    model = cls(cfg)
    return cls, mf.reinit(model, seed, std=0.25, overrides={"embed_tokens": 0.6, "lm_head": 0.6})


def hub_style_rope_config(folder):
    """config.json as Llama checkpoints on the Hub have it (transformers 4.x): rope_theta and rope_scaling
    beside each other instead of transformers 5's rope_parameters."""
    def fix(cfg):
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    mf.edit_json(os.path.join(folder, "config.json"), fix)


def forward_reference(cls, folder, inputs, built=None, **load):
    m = mf.reload(cls, folder, **load)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        base = m.model(**inputs)
        if built is not None:
            mf.check_same_outputs(os.path.basename(folder), out.logits, built(**inputs).logits)
    # the last hidden state is after the final norm, as the README says
    mf.check_same_outputs(os.path.basename(folder) + " last hidden", out.hidden_states[-1], base.last_hidden_state,
                          tol=0.0)
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    tensors["last_hidden_state"] = base.last_hidden_state
    mf.add_hidden(tensors, "hidden_states", out.hidden_states)
    mf.logit_stats(os.path.basename(folder), out.logits, inputs["attention_mask"])
    return m, out, tensors


INPUTS_INFO = {
    "input_ids": "int64 [2, 24]; row 1: last 5 positions are padding (id 2, the eos, used as pad)",
    "attention_mask": "int64 [2, 24]; 0 on padding (right padding)",
}


def make(name):
    seed = SEEDS[name]
    folder = os.path.join(mf.OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    cls, model = build(name)
    mf.save_model(model, folder, with_bin=False, **({"max_shard_size": "100KB"} if name == "mistral" else {}))
    if name == "llama_linear":
        hub_style_rope_config(folder)
    if name == "mistral":
        shards = sorted(f for f in os.listdir(folder) if f.startswith("model-"))
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json")) and len(shards) >= 2, shards

    gen = torch.Generator().manual_seed(seed + 1)
    inputs = mf.gpt2_inputs(gen)
    m, out, tensors = forward_reference(cls, folder, inputs, built=model)
    prompts = [mf.ordinary_ids(gen, n, "bpe", mf.BPE_VOCAB) for n in mf.PROMPT_LENS]
    cases, problems = mf.generation_cases(m, prompts, True, EOS, PAD)
    info = mf.base_info(cls.__name__, seed, {
        "generated_by": "tools/make_llama_fixtures.py",
        "inputs": INPUTS_INFO,
        "forward": "model(input_ids, attention_mask, output_hidden_states=True); no position_ids are passed, "
                   "so positions are 0..23 in both rows; last_hidden_state from model.model(...)",
        "hidden_states": LLAMA_HIDDEN,
        "pad_token_id_used": PAD,
        "generation": mf.generation_block(cases, True, PAD),
    })
    mf.write_reference(folder, tensors, info)

    if name == "qwen2":  # the same weights in bfloat16
        bf = os.path.join(mf.OUT, "qwen2_bf16")
        shutil.rmtree(bf, ignore_errors=True)
        mf.save_model(copy.deepcopy(model).to(torch.bfloat16), bf, with_bin=False)
        with safe_open(os.path.join(bf, "model.safetensors"), "pt") as f:
            assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in f.keys())
        mb = mf.reload(cls, bf, dtype=torch.float32)
        manual = copy.deepcopy(model)
        with torch.no_grad():
            for p in manual.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
            mf.check_same_outputs("qwen2_bf16", manual(**inputs).logits, mb(**inputs).logits, tol=0.0)
        _, outb, tb = forward_reference(cls, bf, inputs, dtype=torch.float32)
        log(f"  qwen2_bf16: max |logits(bf16) - logits(f32)| = {mf.max_diff(outb.logits, out.logits):.4f}")
        mf.write_reference(bf, tb, mf.base_info(cls.__name__, seed, {
            "generated_by": "tools/make_llama_fixtures.py",
            "inputs": INPUTS_INFO,
            "forward": "the bfloat16 model.safetensors loaded into a float32 model (every weight widened exactly), "
                       "then model(input_ids, attention_mask, output_hidden_states=True)",
            "hidden_states": LLAMA_HIDDEN,
        }))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma separated folder names")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    only = [s for s in args.only.split(",") if s]
    problems = []
    for name in SEEDS:
        if only and name not in only:
            continue
        log(f"== {name}")
        problems += [f"{name}: {p}" for p in make(name)]
    mf.check_no_local_paths()
    if problems:
        log("PROBLEMS:")
        for p in problems:
            log("  " + p)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
