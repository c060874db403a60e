#!/usr/bin/env python3
"""Writes the step-for-step training references under tests/data/training/: tiny Hugging Face models
(dropout 0) trained with torch from fixed weights and fixed batches, the way LiBai trains them:
AdamW (or SGD) with LiBai's parameter groups (no weight decay on norm weights and biases), a
warmup schedule, global-norm clipping, gradient accumulation, and PyTorch's GradScaler.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
    .venv/bin/python tools/make_training_fixtures.py      # --only gpt2_adamw,vit_adamw

Each run's folder holds config.json + model.safetensors (the initial weights, a folder that
`load_model` reads), batches.safetensors (micro-batch k of step s under "s{s}.m{k}.<input name>"),
final.safetensors (the weights after the last step, Hugging Face names) and reference.json (the
settings, and per step: the mean of the micro-batch losses, the gradient norm before clipping, the
lr used, whether the step was skipped and the loss scale after the step). Everything is seeded.

The schedule is LiBai's WarmupCosineLR, written here from its documented formula (oneflow's
WarmupLR over CosineDecayLR): for iteration i (0-based, the lr that step i uses)
    cosine(i) = base * ((1 - alpha) * 0.5 * (1 + cos(pi * min(i, max_iter) / max_iter)) + alpha)
    i >= W: cosine(i)      (W = warmup_iter; the decay is not restarted after the warmup)
    i <  W: base * (f + (cosine(W) / base - f) * i / W)      (f = warmup_factor, linear warmup)
"""
import argparse
import json
import math
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import transformers  # noqa: E402
from transformers import (BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          SwinConfig, SwinForImageClassification, Swinv2Config, Swinv2ForImageClassification,
                          T5Config, T5ForConditionalGeneration,
                          ViTConfig, ViTForImageClassification)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "training")

STEPS, ACCUMULATION, MICRO = 30, 4, 2
SEQ, DEC_LEN = 8, 6
BASE = dict(lr=2e-3, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-8, clip_grad_max_norm=1.0,
            clip_grad_norm_type=2.0, weight_decay_norm=0.0, weight_decay_bias=0.0,
            scheduler="WarmupCosineLR", warmup_ratio=0.1, warmup_factor=0.001, alpha=0.01,
            warmup_method="linear")


def log(*args):
    print(*args, flush=True)


# ----------------------------------------------------------------------------------------------
# models (dropout 0 everywhere: the comparison is of numerics, not of random masks)

def gpt2():
    config = GPT2Config(vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=48,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def bert_pretraining():
    config = BertConfig(vocab_size=89, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=16, type_vocab_size=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    return BertForPreTraining(config)


def t5():
    config = T5Config(vocab_size=83, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2,
                      num_decoder_layers=2, feed_forward_proj="relu", dropout_rate=0.0,
                      relative_attention_num_buckets=8, relative_attention_max_distance=20,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(config)


def vit():
    config = ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=48, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, num_labels=3)
    return ViTForImageClassification(config)


def swin():
    """Two stages (8 x 8 patches with shifted windows of 4, then 4 x 4), a patch merging; no
    stochastic depth (drop_path_rate 0: its per-sample draws are not ours to match)."""
    config = SwinConfig(image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 2],
                        num_heads=[2, 4], window_size=4, mlp_ratio=2.0, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=3)
    return SwinForImageClassification(config)


def swinv2():
    """SwinV2 with the same stages as swin(): cosine attention, continuous position bias."""
    config = Swinv2Config(image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 2],
                          num_heads=[2, 4], window_size=4, mlp_ratio=2.0, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=3)
    return Swinv2ForImageClassification(config)


# ----------------------------------------------------------------------------------------------
# batches: micro-batch k of step s, as the model's forward takes them (labels included)

def ids(gen, shape, low, high):
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64)


def gpt2_batch(gen):
    input_ids = ids(gen, (MICRO, SEQ), 1, 97)
    labels = input_ids.clone()
    labels[1, -2:] = -100  # ignored targets
    return {"input_ids": input_ids, "labels": labels}


def bert_batch(gen):
    input_ids = ids(gen, (MICRO, SEQ), 5, 89)
    attention_mask = torch.ones(MICRO, SEQ, dtype=torch.int64)
    attention_mask[1, -2:] = 0
    input_ids[1, -2:] = 0
    token_type_ids = torch.zeros(MICRO, SEQ, dtype=torch.int64)
    token_type_ids[:, SEQ // 2:] = 1
    labels = torch.full((MICRO, SEQ), -100, dtype=torch.int64)
    chosen = torch.rand((MICRO, SEQ), generator=gen) < 0.3
    chosen[:, 0] = True
    chosen[1, -2:] = False
    labels[chosen] = input_ids[chosen]
    input_ids[chosen] = 4  # [MASK]
    next_sentence_label = ids(gen, (MICRO,), 0, 2)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
            "labels": labels, "next_sentence_label": next_sentence_label}


def t5_batch(gen):
    input_ids = ids(gen, (MICRO, SEQ), 2, 83)
    attention_mask = torch.ones(MICRO, SEQ, dtype=torch.int64)
    attention_mask[1, -3:] = 0
    input_ids[1, -3:] = 0
    labels = ids(gen, (MICRO, DEC_LEN), 2, 83)
    labels[0, -1] = 1
    labels[1, -2:] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def swin_batch(gen):
    return {"pixel_values": torch.randn((MICRO, 3, 16, 16), generator=gen),
            "labels": ids(gen, (MICRO,), 0, 3)}


def vit_batch(gen):
    return {"pixel_values": torch.randn((MICRO, 3, 8, 8), generator=gen),
            "labels": ids(gen, (MICRO,), 0, 3)}


# ----------------------------------------------------------------------------------------------
# LiBai's pieces, written from their documented semantics

def is_norm_module(module):
    name = type(module).__name__
    return isinstance(module, torch.nn.LayerNorm) or "LayerNorm" in name or "RMSNorm" in name


def param_groups(model, s):
    """LiBai's get_default_optimizer_params: norm parameters -> weight_decay_norm, biases ->
    weight_decay_bias, the rest -> weight_decay; tied parameters once."""
    seen, groups = set(), {}
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if is_norm_module(module):
                wd = s["weight_decay_norm"]
            elif pname == "bias":
                wd = s["weight_decay_bias"]
            else:
                wd = s["weight_decay"]
            groups.setdefault(wd, []).append(p)
    return [{"params": ps, "weight_decay": wd} for wd, ps in groups.items()]


def warmup_cosine_lr(base, i, s):
    max_iter = STEPS
    warmup_iter = int(s["warmup_ratio"] * max_iter)

    def cosine(j):
        return base * ((1 - s["alpha"]) * 0.5 * (1 + math.cos(math.pi * min(j, max_iter) / max_iter)) + s["alpha"])

    if i >= warmup_iter:
        return cosine(i)
    if s["warmup_method"] == "constant":
        return base * s["warmup_factor"]
    # Linear: from warmup_factor to the decay's own value at the warmup's end (OneFlow's WarmupLR).
    end = cosine(warmup_iter) / base
    return base * (s["warmup_factor"] + (end - s["warmup_factor"]) * i / warmup_iter)


# ----------------------------------------------------------------------------------------------

CRAFTED_OVERFLOWS = {"vit_scaler": [4, 5, 13, 21]}

RUNS = {
    # name: (model builder, batch builder, seed, settings over BASE)
    "gpt2_adamw": (gpt2, gpt2_batch, 11, {}),
    "bert_pretraining_adamw": (bert_pretraining, bert_batch, 12, {}),
    "t5_adamw": (t5, t5_batch, 13, {}),
    "vit_adamw": (vit, vit_batch, 14, {}),
    "swin_adamw": (swin, swin_batch, 17, {}),
    # eps 1e-6: the position-bias MLP's first layer gets gradients that are rounding noise on
    # many of its 512 units (ReLU at the edge, 16 sigmoid saturated); with eps 1e-8 AdamW turns
    # that noise into full-size steps that differ between any two implementations.
    # SGD for SwinV2: its cosine scores (scaled by 10 at init) and position-bias MLP put rounding
    # noise of 1e-8 into the first step's gradients that AdamW's normalised steps grow to 3e-5
    # in the gradient norm by step 30 (measured); SGD's steps stay proportional to the gradients.
    "swinv2_sgd": (swinv2, swin_batch, 18, {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                                            "dampening": 0.0, "nesterov": True}),
    "gpt2_sgd": (gpt2, gpt2_batch, 15, {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "dampening": 0.0,
                                        "nesterov": True}),
    # GradScaler (growing every 3 clean steps) over crafted overflows: an inf pixel in one
    # micro-batch of the steps in CRAFTED_OVERFLOWS makes every gradient of that step non-finite.
    "vit_scaler": (vit, vit_batch, 16, {"loss_scale": {"init_scale": 65536.0, "growth_factor": 2.0,
                                                       "backoff_factor": 0.5, "growth_interval": 3}}),
}


def run(name, build, make_batch, seed, overrides):
    s = {**BASE, "optimizer": "adamw", **overrides}
    torch.manual_seed(seed)
    model = build()
    model.train()
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    model.save_pretrained(folder)

    gen = torch.Generator().manual_seed(seed + 1000)
    batches = [[make_batch(gen) for _ in range(ACCUMULATION)] for _ in range(STEPS)]
    for step in CRAFTED_OVERFLOWS.get(name, []):
        batches[step][2]["pixel_values"][1, 0, 3, 3] = float("inf")
    flat = {}
    for step, micro_batches in enumerate(batches):
        for k, batch in enumerate(micro_batches):
            for key, value in batch.items():
                flat[f"s{step}.m{k}.{key}"] = value.contiguous()
    save_file(flat, os.path.join(folder, "batches.safetensors"))

    groups = param_groups(model, s)
    if s["optimizer"] == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=s["lr"], betas=tuple(s["betas"]), eps=s["eps"],
                                      weight_decay=s["weight_decay"], foreach=False)
    else:
        optimizer = torch.optim.SGD(groups, lr=s["lr"], momentum=s["momentum"], dampening=s["dampening"],
                                    nesterov=s["nesterov"], weight_decay=s["weight_decay"], foreach=False)
    scaler = None
    if "loss_scale" in s:
        ls = s["loss_scale"]
        scaler = torch.amp.GradScaler("cpu", init_scale=ls["init_scale"], growth_factor=ls["growth_factor"],
                                      backoff_factor=ls["backoff_factor"], growth_interval=ls["growth_interval"])
    params = [p for g in groups for p in g["params"]]
    steps = []
    for step, micro_batches in enumerate(batches):
        lr = warmup_cosine_lr(s["lr"], step, s)
        for g in optimizer.param_groups:
            g["lr"] = lr
        losses = []
        for batch in micro_batches:
            loss = model(**batch).loss
            losses.append(loss.item())
            scaled = loss / ACCUMULATION
            (scaler.scale(scaled) if scaler else scaled).backward()
        if scaler:
            scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(params, s["clip_grad_max_norm"], norm_type=s["clip_grad_norm_type"])
        skipped = False
        if scaler:
            before = scaler.get_scale()
            found_inf = sum(v.item() for v in scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values())
            skipped = found_inf > 0
            scaler.step(optimizer)
            scaler.update()
            log(f"  {name} step {step}: scale {before:.3g} -> {scaler.get_scale():.3g}{' skipped' if skipped else ''}")
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mean_loss = sum(losses) / len(losses)
        steps.append({"loss": mean_loss if math.isfinite(mean_loss) else None, "micro_losses": [x if math.isfinite(x) else None for x in losses], "grad_norm": float(norm) if math.isfinite(norm) else None,
                      "lr": lr, "skipped": skipped, "loss_scale": scaler.get_scale() if scaler else 1.0})

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copy(os.path.join(tmp, "model.safetensors"), os.path.join(folder, "final.safetensors"))
    reference = {"settings": dict(s, steps=STEPS, num_accumulation_steps=ACCUMULATION, micro_batch_size=MICRO),
                 "steps": steps,
                 "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    log(f"{name}: loss {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}, "
        f"{sum(st['skipped'] for st in steps)} skipped")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    only = set(filter(None, args.only.split(",")))
    for name, (build, make_batch, seed, overrides) in RUNS.items():
        if not only or name in only:
            run(name, build, make_batch, seed, overrides)


if __name__ == "__main__":
    main()
