#!/usr/bin/env python3
"""Builds the optimizer and lr-schedule fixtures of tests/train/ with PyTorch.

    .venv/bin/python tools/make_optimizer_fixtures.py

tests/data/training/optimizer/<case>.safetensors: torch.optim.AdamW / SGD (single-tensor path)
run for a few steps on two small f32 parameters. Tensors: "initial.<p>", "grad.<step>.<p>" (absent
where the parameter has no gradient on that step) and "param.<step>.<p>" (after that step);
__metadata__ holds the hyper-parameters and the lr of each step ("lrs", comma separated).

tests/data/training/lr_schedules.json: LiBai's Warmup* schedules built as torch LambdaLR
schedulers whose factors are written here from LiBai's and OneFlow's documented formulas
(libai/scheduler/lr_scheduler.py over oneflow's WarmupLR, LinearLR, ConstantLR, CosineDecayLR,
CosineAnnealingLR, StepLR, MultiStepLR, ExponentialLR, PolynomialLR), stepped like a training loop:
the lr of each iteration for two base lrs. Where a schedule has no warmup, torch's own scheduler
class (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR) is run beside it as a check.

Everything is seeded; a rerun with the same torch version rewrites the same files.
"""
import bisect
import json
import math
import os

import torch
from safetensors.torch import save_file

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "training")
SHAPES = [(4, 6), (9,)]
STEPS = 5
LRS = [1e-2, 8e-3, 5e-3, 5e-3, 2e-3]  # a changing lr, as a scheduler sets it

OPTIMIZER_CASES = {
    "adamw": dict(kind="adamw", betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "adamw_betas": dict(kind="adamw", betas=(0.3, 0.95), eps=1e-6, weight_decay=0.1),
    # Parameter 1 has no gradient on step 2: torch skips it and its step count falls behind.
    "adamw_skip": dict(kind="adamw", betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, skip=(2, 1)),
    "sgd": dict(kind="sgd", momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    "sgd_weight_decay": dict(kind="sgd", momentum=0.0, dampening=0.0, weight_decay=0.1, nesterov=False),
    "sgd_momentum": dict(kind="sgd", momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False),
    "sgd_dampening": dict(kind="sgd", momentum=0.9, dampening=0.3, weight_decay=0.05, nesterov=False),
    "sgd_nesterov": dict(kind="sgd", momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=True),
}


def optimizer_case(name, case, seed):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    tensors = {f"initial.{i}": p.detach().clone() for i, p in enumerate(params)}
    if case["kind"] == "adamw":
        opt = torch.optim.AdamW(params, lr=LRS[0], betas=case["betas"], eps=case["eps"],
                                weight_decay=case["weight_decay"], foreach=False)
        meta = dict(beta1=case["betas"][0], beta2=case["betas"][1], eps=case["eps"])
    else:
        opt = torch.optim.SGD(params, lr=LRS[0], momentum=case["momentum"], dampening=case["dampening"],
                              weight_decay=case["weight_decay"], nesterov=case["nesterov"], foreach=False)
        meta = dict(momentum=case["momentum"], dampening=case["dampening"], nesterov=int(case["nesterov"]))
    meta.update(kind=case["kind"], weight_decay=case["weight_decay"], steps=STEPS)
    for step in range(STEPS):
        opt.param_groups[0]["lr"] = LRS[step]
        for i, p in enumerate(params):
            if case.get("skip") == (step, i):
                p.grad = None
                continue
            g = torch.randn(p.shape, generator=gen) * (0.5 + step)
            p.grad = g
            tensors[f"grad.{step}.{i}"] = g.clone()
        opt.step()
        for i, p in enumerate(params):
            tensors[f"param.{step}.{i}"] = p.detach().clone()
    metadata = {k: repr(float(v)) if isinstance(v, float) else str(v) for k, v in meta.items()}
    metadata["lrs"] = ",".join(repr(lr) for lr in LRS)
    metadata["torch"] = torch.__version__
    os.makedirs(os.path.join(OUT, "optimizer"), exist_ok=True)
    save_file(tensors, os.path.join(OUT, "optimizer", f"{name}.safetensors"), metadata=metadata)


# ---- LiBai's schedules, from the documented formulas (lr of iteration i for base lr b) ----

def decay_lr(c, b, i):
    kind = c["kind"]
    if kind == "WarmupCosineLR":
        if i < c["max_iter"]:
            return b * ((1 - c["alpha"]) * 0.5 * (1 + math.cos(math.pi * i / c["max_iter"])) + c["alpha"])
        return b * c["alpha"]
    if kind == "WarmupCosineAnnealingLR":
        return c["eta_min"] + (b - c["eta_min"]) * 0.5 * (1 + math.cos(math.pi * i / c["max_iter"]))
    if kind == "WarmupStepLR":
        return b * c["gamma"] ** (i // c["step_size"])
    if kind == "WarmupMultiStepLR":
        return b * c["gamma"] ** bisect.bisect_right(c["milestones"], i)
    if kind == "WarmupExponentialLR":
        return b * c["gamma"] ** i
    if kind == "WarmupPolynomialLR":
        period, t = c["max_iter"], i
        if c["cycle"]:
            t = max(t, 1)
            period = period * math.ceil(t / period)
        else:
            t = min(t, period)
        return (b - c["end_learning_rate"]) * (1 - t / period) ** c["power"] + c["end_learning_rate"]
    raise ValueError(kind)


def libai_factor(c, b):
    """The LambdaLR factor of LiBai's schedule c for base lr b (OneFlow's WarmupLR, warmup_prefix
    False: the decay counts from 0 and a linear warmup ends at the decay's value there)."""
    w, f = c["warmup_iter"], c["warmup_factor"]

    def factor(i):
        if i >= w:
            return decay_lr(c, b, i) / b
        if c["warmup_method"] == "constant":
            return f
        end = decay_lr(c, b, w) / b
        return f + (end - f) * (i / w)
    return factor


def torch_native(c, opt):
    """torch's own class for a schedule without warmup, where one exists."""
    sched = torch.optim.lr_scheduler
    if c["warmup_iter"] != 0:
        return None
    if c["kind"] == "WarmupStepLR":
        return sched.StepLR(opt, step_size=c["step_size"], gamma=c["gamma"])
    if c["kind"] == "WarmupMultiStepLR":
        return sched.MultiStepLR(opt, milestones=c["milestones"], gamma=c["gamma"])
    if c["kind"] == "WarmupExponentialLR":
        return sched.ExponentialLR(opt, gamma=c["gamma"])
    if c["kind"] == "WarmupCosineAnnealingLR":
        return sched.CosineAnnealingLR(opt, T_max=c["max_iter"], eta_min=c["eta_min"])
    return None


def run_schedule(c, base_lrs, iters, native=False):
    opt = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": b} for b in base_lrs],
                          lr=base_lrs[0])
    if native:
        scheduler = torch_native(c, opt)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, [libai_factor(c, b) for b in base_lrs])
    lrs = [[] for _ in opt.param_groups]
    for _ in range(iters):
        for g, out in zip(opt.param_groups, lrs):
            out.append(g["lr"])
        opt.step()
        scheduler.step()
    return lrs


SCHEDULE_DEFAULTS = dict(max_iter=20, warmup_iter=5, warmup_factor=0.001, warmup_method="linear", alpha=0.0,
                         eta_min=0.0, step_size=1, gamma=0.1, milestones=[], power=1.0,
                         end_learning_rate=1e-4, cycle=False)
SCHEDULE_CASES = [
    dict(kind="WarmupCosineLR", alpha=0.1),
    dict(kind="WarmupCosineLR", warmup_method="constant", warmup_factor=0.1),
    dict(kind="WarmupCosineLR", warmup_iter=0, alpha=0.05),
    dict(kind="WarmupCosineAnnealingLR", eta_min=1e-5),
    dict(kind="WarmupCosineAnnealingLR", warmup_iter=0, eta_min=1e-5),
    dict(kind="WarmupStepLR", step_size=4, gamma=0.5),
    dict(kind="WarmupStepLR", warmup_iter=0, step_size=3, gamma=0.7),
    dict(kind="WarmupMultiStepLR", warmup_method="constant", warmup_factor=0.2, milestones=[3, 8, 15], gamma=0.3),
    dict(kind="WarmupMultiStepLR", milestones=[8, 15], gamma=0.1),
    dict(kind="WarmupMultiStepLR", warmup_iter=0, milestones=[2, 9], gamma=0.5),
    dict(kind="WarmupExponentialLR", gamma=0.9),
    dict(kind="WarmupExponentialLR", warmup_iter=0, gamma=0.8),
    dict(kind="WarmupPolynomialLR", power=2.0, end_learning_rate=1e-4),
    dict(kind="WarmupPolynomialLR", warmup_iter=3, power=1.0, end_learning_rate=1e-5, cycle=True),
]
BASE_LRS = [0.1, 3e-3]
ITERS = 30  # beyond max_iter: the floors, the cosine's second half-period, the cycle


def schedules():
    cases = []
    for overrides in SCHEDULE_CASES:
        c = dict(SCHEDULE_DEFAULTS, **overrides)
        lrs = run_schedule(c, BASE_LRS, ITERS)
        if torch_native(c, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)) is not None:
            for b, ours in zip(BASE_LRS, lrs):
                native = run_schedule(c, [b], ITERS, native=True)[0]
                assert all(abs(x - y) <= 1e-12 * abs(y) + 1e-18 for x, y in zip(ours, native)), c
        cases.append(dict(options=c, base_lrs=BASE_LRS, lrs=lrs))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "lr_schedules.json"), "w") as f:
        json.dump(dict(torch=torch.__version__, iters=ITERS, cases=cases), f, indent=1)
        f.write("\n")


def main():
    torch.manual_seed(0)
    for seed, (name, case) in enumerate(OPTIMIZER_CASES.items()):
        optimizer_case(name, case, 100 + seed)
    schedules()


if __name__ == "__main__":
    main()
