"""llama.cpp (through the PyPI package llama-cpp-python, built from source here) on a GGUF file:
greedy decode of exactly --new-tokens tokens after model_bench's 8-token prompt (prefill
included), timed as bench/peer_models.py times; one JSON line like model_bench's.

    python bench/peer_llama_cpp.py --model FILE.gguf --mode decode --new-tokens 64 --reps 3 --threads 2
"""
import argparse
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_models  # noqa: E402  (time_reps, print_result, the prompt)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--mode", default="decode", choices=["decode"])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="gguf")
    a = p.parse_args()
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads,
                          n_ctx=256, n_batch=64, logits_all=True, verbose=False)
    load_s = time.perf_counter() - t0
    load_peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    vocab = llm.n_vocab()
    prompt = [t % vocab for t in peer_models.PROMPT]
    out = []

    def step():
        llm.reset()
        llm.eval(prompt)
        tokens = []
        for _ in range(a.new_tokens):
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            tokens.append(token)
            llm.eval([token])
        out[:] = tokens

    seconds = peer_models.time_reps(a, "decode", a.new_tokens, "tok", step)
    extra = {"first_tokens": out[:8], "tokens": out, "llama_cpp_python": llama_cpp.__version__,
             "load_peak_rss_mb": load_peak_rss_mb,
             "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}
    peer_models.print_result(a, {"batch": 1, "prompt": len(prompt), "new_tokens": a.new_tokens}, seconds,
                             a.new_tokens, "tokens_per_s", load_s, extra, impl="llama.cpp")


if __name__ == "__main__":
    main()
