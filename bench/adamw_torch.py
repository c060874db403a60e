#!/usr/bin/env python3
"""torch.optim.AdamW on CPU (fused=True and foreach=True) at the sizes and thread counts of
bench_adamw, in GB/s at 28 bytes per element (reads p, g, m, v; writes p, m, v), for a side by
side row with build/bench/bench_adamw:

    .venv/bin/python bench/adamw_torch.py [--iters 10]
"""
import argparse
import time

import torch


def rate(n, threads, mode, iters):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.rand(n, generator=gen) * 2 - 1)
    p.grad = torch.rand(n, generator=gen) * 2 - 1
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, **{mode: True})
    opt.step()  # creates the state (not timed)
    start = time.perf_counter()
    for _ in range(iters):
        opt.step()
    mean = (time.perf_counter() - start) / iters  # a mean per step, as Google Benchmark reports
    return 28.0 * n / mean * 1e-9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    print(f"torch {torch.__version__}")
    print("| case | torch fused GB/s | torch foreach GB/s |\n|---|---:|---:|")
    for n in (10_000_000, 50_000_000):
        for threads in (1, 2):
            fused = rate(n, threads, "fused", args.iters)
            foreach = rate(n, threads, "foreach", args.iters)
            print(f"| {n // 1_000_000}M_t{threads} | {fused:.1f} | {foreach:.1f} |", flush=True)


if __name__ == "__main__":
    main()
