#!/usr/bin/env python3
"""Writes tests/data/autocast/linear.safetensors: one nn.Linear run under torch.autocast on the
CPU, for the autocast test of models::Linear (tests/models/autocast_test.cc).

    .venv/bin/python tools/make_autocast_fixtures.py

For each 16-bit dtype (bf16, f16) the f32 input, weight and bias go through F.linear inside
torch.autocast("cpu", dtype=...); the 16-bit output is converted to f32 (what adding it to an f32
residual does) and backpropagated with a fixed f32 upstream gradient. Stored, all f32: the
inputs (x, weight, bias, grad_out) and per dtype the output and the gradients of x, weight and
bias. Seeded: a rerun with the same torch version writes the same file.
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "autocast", "linear.safetensors")

BATCH, SEQ, IN, OUT_FEATURES = 2, 5, 64, 40


def main():
    torch.manual_seed(11)
    x = torch.randn(BATCH, SEQ, IN)
    layer = torch.nn.Linear(IN, OUT_FEATURES)
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    grad_out = torch.randn(BATCH, SEQ, OUT_FEATURES)
    tensors = {"x": x, "weight": weight, "bias": bias, "grad_out": grad_out}
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        xi = x.clone().requires_grad_()
        wi = weight.clone().requires_grad_()
        bi = bias.clone().requires_grad_()
        with torch.autocast("cpu", dtype=dtype):
            y = F.linear(xi, wi, bi)
        assert y.dtype == dtype, y.dtype
        y32 = y.float()
        y32.backward(grad_out)
        for key, grad in (("x", xi.grad), ("weight", wi.grad), ("bias", bi.grad)):
            assert grad.dtype == torch.float32, (key, grad.dtype)
            tensors[f"{name}.grad_{key}"] = grad
        tensors[f"{name}.y"] = y32.detach()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, OUT,
              metadata={"torch": torch.__version__})
    print(f"wrote {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
