#!/usr/bin/env python3
"""Writes the PyTorch reference of examples/custom_model (docs/BRING_YOUR_OWN_MODEL.md): a byte-level
text classifier that no library ships, written here in plain PyTorch, with random weights saved under
its own checkpoint names, and what it computes.

    python3 -m venv .venv && .venv/bin/pip install torch safetensors
    .venv/bin/python tools/make_custom_model_fixture.py

examples/custom_model/data/ then holds:
  byte_encoder/config.json, model.safetensors   the model folder (its own config keys and names)
  reference.safetensors   input_ids / attention_mask of the texts, the logits, every hidden state
                          ("hidden_states.{i}", "last_hidden_state"); the training batches
                          ("s{s}.m{k}.input_ids", ".attention_mask", ".labels") and the weights after
                          training ("final.<checkpoint name>")
  reference.json          the texts, each text's label probabilities, the training settings and per
                          step the mean micro-batch loss and the gradient norm before clipping

The model: ids are the text's UTF-8 bytes + 1 (0 pads); h = tokens(ids) + positions[:n]; blocks of
pre-LN attention (fused q/k/v stored part-major, [q | k | v] rows) and a GELU feed-forward whose
matrices are stored as kernels [in, out]; a final LayerNorm, the mean over the real tokens, and a
linear classifier. Training: AdamW with LiBai's parameter groups (no weight decay on norm weights
and biases), constant lr, global-norm clipping, gradient accumulation (mean of micro-batch losses).
Adam's eps is 1e-5, not 1e-8: the key bias has no gradient in exact arithmetic (softmax ignores a
constant added to a row of scores), so its computed gradient is rounding noise, which eps 1e-8 would
turn into full-size updates that differ between any two implementations.
"""
import json
import math
import os

import torch
from safetensors.torch import save_file

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "examples", "custom_model", "data")

CONFIG = {"model_type": "byte_encoder", "architectures": ["ByteEncoderClassifier"], "vocab": 257,
          "width": 32, "heads": 4, "blocks": 4, "ffn_width": 64, "max_len": 32, "ln_eps": 1e-5,
          "classes": ["negative", "neutral", "positive"]}
TEXTS = ["what a fine day", "the service was slow and cold",
         "it rained, then it stopped", "a bright, warm and kind welcome", "ok"]
TRAIN = dict(steps=4, accumulation=2, micro_batch=4, length=12, lr=2e-3, weight_decay=0.01,
             betas=[0.9, 0.999], eps=1e-5, clip_grad_max_norm=0.5)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        w, f = c["width"], c["ffn_width"]
        self.heads = c["heads"]
        self.ln_1 = torch.nn.LayerNorm(w, eps=c["ln_eps"])
        self.c_qkv = torch.nn.Linear(w, 3 * w)
        self.proj_kernel = torch.nn.Parameter(torch.randn(w, w) * 0.2)
        self.proj_bias = torch.nn.Parameter(torch.randn(w) * 0.1)
        self.ln_2 = torch.nn.LayerNorm(w, eps=c["ln_eps"])
        self.fc_in_kernel = torch.nn.Parameter(torch.randn(w, f) * 0.2)
        self.fc_in_bias = torch.nn.Parameter(torch.randn(f) * 0.1)
        self.fc_out_kernel = torch.nn.Parameter(torch.randn(f, w) * 0.2)
        self.fc_out_bias = torch.nn.Parameter(torch.randn(w) * 0.1)

    def forward(self, x, keep):
        b, n, w = x.shape
        d = w // self.heads
        q, k, v = self.c_qkv(self.ln_1(x)).split(w, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, d).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, w)
        x = x + ctx @ self.proj_kernel + self.proj_bias
        h = torch.nn.functional.gelu(self.ln_2(x) @ self.fc_in_kernel + self.fc_in_bias)
        return x + h @ self.fc_out_kernel + self.fc_out_bias


class ByteEncoder(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tokens = torch.nn.Embedding(c["vocab"], c["width"])
        self.positions = torch.nn.Parameter(torch.randn(c["max_len"], c["width"]) * 0.1)
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c["blocks"]))
        self.final_ln = torch.nn.LayerNorm(c["width"], eps=c["ln_eps"])
        self.classifier = torch.nn.Linear(c["width"], len(c["classes"]))
        with torch.no_grad():  # norms away from 1 / 0, so that a mix-up of weight and bias shows
            for m in self.modules():
                if isinstance(m, torch.nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.1)

    def forward(self, ids, mask):
        keep = mask.bool()
        h = self.tokens(ids) + self.positions[: ids.shape[1]]
        states = [h]
        for block in self.blocks:
            h = block(h, keep)
            states.append(h)
        h = self.final_ln(h)
        weights = mask.to(h.dtype)[:, :, None]
        pooled = (h * weights).sum(1) / weights.sum(1)
        return self.classifier(pooled), h, states

    def checkpoint(self):
        """The weights under the checkpoint's own names."""
        out = {"embed.tokens.weight": self.tokens.weight, "embed.positions": self.positions,
               "final_ln.weight": self.final_ln.weight, "final_ln.bias": self.final_ln.bias,
               "classifier.weight": self.classifier.weight, "classifier.bias": self.classifier.bias}
        for i, b in enumerate(self.blocks):
            p = f"encoder.{i}."
            out.update({p + "ln_1.weight": b.ln_1.weight, p + "ln_1.bias": b.ln_1.bias,
                        p + "attn.c_qkv.weight": b.c_qkv.weight, p + "attn.c_qkv.bias": b.c_qkv.bias,
                        p + "attn.proj.kernel": b.proj_kernel, p + "attn.proj.bias": b.proj_bias,
                        p + "ln_2.weight": b.ln_2.weight, p + "ln_2.bias": b.ln_2.bias,
                        p + "ffn.fc_in.kernel": b.fc_in_kernel, p + "ffn.fc_in.bias": b.fc_in_bias,
                        p + "ffn.fc_out.kernel": b.fc_out_kernel, p + "ffn.fc_out.bias": b.fc_out_bias})
        return {k: v.detach().clone().contiguous() for k, v in out.items()}


def encode(texts, max_len):
    """The example pipeline's preprocess: bytes + 1, cut at max_len, right-padded with 0."""
    rows = [[b + 1 for b in t.encode("utf-8")][:max_len] for t in texts]
    n = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), n, dtype=torch.int64)
    mask = torch.zeros(len(rows), n, dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            norm = isinstance(module, torch.nn.LayerNorm)
            (no_decay if norm or name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    torch.manual_seed(20)
    os.makedirs(os.path.join(OUT, "byte_encoder"), exist_ok=True)
    model = ByteEncoder(CONFIG)
    with open(os.path.join(OUT, "byte_encoder", "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    save_file(model.checkpoint(), os.path.join(OUT, "byte_encoder", "model.safetensors"))

    tensors = {}
    ids, mask = encode(TEXTS, CONFIG["max_len"])
    with torch.no_grad():
        logits, last, states = model(ids, mask)
    tensors.update({"input_ids": ids, "attention_mask": mask, "logits": logits, "last_hidden_state": last})
    for i, s in enumerate(states):
        tensors[f"hidden_states.{i}"] = s
    probs = logits.softmax(-1)
    answers = [{"text": t, "scores": {c: float(probs[i, j]) for j, c in enumerate(CONFIG["classes"])}}
               for i, t in enumerate(TEXTS)]

    gen = torch.Generator().manual_seed(5)
    t = TRAIN
    optimizer = torch.optim.AdamW(param_groups(model, t["weight_decay"]), lr=t["lr"], betas=t["betas"],
                                  eps=t["eps"], foreach=False)
    figures = []
    for s in range(t["steps"]):
        optimizer.zero_grad()
        total = 0.0
        for k in range(t["accumulation"]):
            b, n = t["micro_batch"], t["length"]
            ids = torch.randint(1, CONFIG["vocab"], (b, n), generator=gen)
            mask = torch.ones(b, n, dtype=torch.int64)
            for row in range(b):  # row r keeps n - 2 r tokens (at least 1)
                mask[row, max(1, n - 2 * row):] = 0
            ids = ids * mask
            labels = torch.randint(0, len(CONFIG["classes"]), (b,), generator=gen)
            p = f"s{s}.m{k}."
            tensors.update({p + "input_ids": ids, p + "attention_mask": mask, p + "labels": labels})
            loss = torch.nn.functional.cross_entropy(model(ids, mask)[0], labels)
            (loss / t["accumulation"]).backward()
            total += loss.item() / t["accumulation"]
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t["clip_grad_max_norm"])
        optimizer.step()
        figures.append({"loss": total, "grad_norm": float(norm)})
        print(f"step {s}: loss {total:.6f} grad norm {float(norm):.6f}", flush=True)
    for name, value in model.checkpoint().items():
        tensors["final." + name] = value
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(OUT, "reference.safetensors"))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"texts": TEXTS, "answers": answers, "training": TRAIN, "steps": figures}, f, indent=2)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
