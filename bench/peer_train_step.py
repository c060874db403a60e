#!/usr/bin/env python3
"""One training step of a causal LM with PyTorch + transformers: the peer of
build/bench/bench_train_step (same flags, same JSON line). Forward with labels (HF's shifted
cross entropy), backward, clip_grad_norm_(1.0), AdamW (torch's default implementation for CPU
tensors), zero_grad; median of --reps timed steps after --warmup, and the peak RSS.

    .venv/bin/python bench/peer_train_step.py --model DIR --batch 4 --seq 256 --reps 3 --threads 2
"""
import argparse
import json
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def input_id(b, s, vocab):
    return (s * 7919 + b * 104729 + 13) % vocab


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--amp", default="f32", choices=["f32", "bf16"])
    p.add_argument("--dropout", type=float, default=-1.0)
    p.add_argument("--checkpoint", action="store_true")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    kwargs = {}
    if args.dropout == 0:
        kwargs = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = AutoModelForCausalLM.from_pretrained(args.model, **kwargs)
    load_s = time.perf_counter() - t0
    model.train()
    if args.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    vocab = model.config.vocab_size
    ids = torch.tensor([[input_id(b, s, vocab) for s in range(args.seq)] for b in range(args.batch)])
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim == 1 else decay).append(param)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(args.warmup):
        step()
    seconds, loss = [], 0.0
    for i in range(args.reps):
        start = time.perf_counter()
        loss = step()
        seconds.append(time.perf_counter() - start)
        print(f"train step {i + 1}/{args.reps}: {seconds[-1] * 1e3:.0f} ms", file=sys.stderr, flush=True)
    seconds.sort()
    median = seconds[len(seconds) // 2]
    print(json.dumps({"impl": "torch", "batch": args.batch, "seq": args.seq, "amp": args.amp,
                      "checkpoint": args.checkpoint, "threads": torch.get_num_threads(), "reps": args.reps,
                      "median_ms": round(median * 1e3, 1), "min_ms": round(seconds[0] * 1e3, 1),
                      "max_ms": round(seconds[-1] * 1e3, 1),
                      "tokens_per_s": round(args.batch * args.seq / median, 1),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "load_s": round(load_s, 2), "last_loss": round(loss, 5)}), flush=True)


if __name__ == "__main__":
    main()
