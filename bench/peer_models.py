"""The PyTorch + transformers side of bench/run_model_bench.sh.

Same flags, same work and the same JSON line per measurement as build/bench/model_bench
(bench/model_bench.cc): float32 (or bfloat16 with --dtype bf16), eval(), torch.inference_mode(), torch.set_num_threads.

  .venv/bin/python bench/peer_models.py --model DIR --mode forward --batch 8 --seq 128 --reps 5
  .venv/bin/python bench/peer_models.py --model DIR --mode decode --new-tokens 128 --reps 3
  .venv/bin/python bench/peer_models.py --model DIR --mode encode --texts FILE --reps 3
  .venv/bin/python bench/peer_models.py --mode sgemm   # torch.matmul GFLOP/s, read GB/s

forward: AutoModelForCausalLM(input_ids [batch, seq]) -> all logits.
decode:  model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False) from the same
         8-token prompt as model_bench (prefill included).
encode:  sentence_transformers.SentenceTransformer(folder).encode(texts, batch_size).

With --impl onnxruntime (forward and encode), the same work runs in ONNX Runtime's CPU
provider on a graph that tools/export_ort_peers.py exported from the same folder (--onnx FILE):
intra_op_num_threads = --threads, sequential execution, ORT_ENABLE_ALL. encode then tokenizes
with the folder's fast tokenizer, sorts the texts by length as sentence-transformers does,
mean-pools over the attention mask and normalises, in numpy.
"""

import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:  # peer_llama_cpp.py needs only the timing helpers
    torch = None

# "The quick brown fox jumps over the lazy" in GPT-2's vocabulary (as in model_bench.cc).
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]


def input_id(b, s, vocab):
    return (s * 7919 + b * 104729 + 13) % vocab


def time_reps(args, what, units_per_rep, unit, fn):
    for _ in range(args.warmup):
        fn()
    seconds, cpu = [], []
    start = time.perf_counter()
    total = args.reps * units_per_rep
    for i in range(args.reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        done = (i + 1) * units_per_rep
        elapsed = time.perf_counter() - start
        rate = done / elapsed
        print(f"[{what}] {done}/{total} {unit} ({100.0 * done / total:.1f}%)  {rate:.1f} {unit}/s  "
              f"ETA {(total - done) / rate:.1f}s  last rep {seconds[-1] * 1e3:.1f} ms",
              file=sys.stderr, flush=True)
    CPU_SECONDS[:] = cpu
    return seconds


CPU_SECONDS = []  # process CPU seconds of the timed reps (all threads)


def print_result(args, shape, seconds, units_per_rep, rate_name, load_s, extra, impl="torch"):
    row = {"impl": impl, "mode": args.mode, **shape, "dtype": args.dtype, "threads": torch.get_num_threads() if torch else args.threads,
           "reps": args.reps, "median_ms": statistics.median(seconds) * 1e3,
           "min_ms": min(seconds) * 1e3, "max_ms": max(seconds) * 1e3,
           "cpu_ms": statistics.median(CPU_SECONDS) * 1e3,
           rate_name: units_per_rep / statistics.median(seconds), "load_s": load_s,
           "times_ms": [round(s * 1e3, 3) for s in seconds], **extra}
    print(json.dumps(row), flush=True)


def load_causal_lm(folder, dtype="f32"):
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    model.eval()
    return model, time.perf_counter() - t0


def ort_session(args):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads if args.threads > 0 else torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    session = ort.InferenceSession(args.onnx, options, providers=["CPUExecutionProvider"])
    return session, time.perf_counter() - t0, options.intra_op_num_threads


def run_forward_ort(args):
    import numpy as np
    session, load_s, threads = ort_session(args)
    from transformers import AutoConfig
    vocab = AutoConfig.from_pretrained(args.model).vocab_size
    ids = np.array([[input_id(b, s, vocab) for s in range(args.seq)] for b in range(args.batch)],
                   dtype=np.int64)
    out = {}

    def step():
        out["logits"] = session.run(["logits"], {"input_ids": ids})[0]

    seconds = time_reps(args, "forward", args.batch * args.seq, "tok", step)
    check = float(out["logits"][0, args.seq - 1, :16].astype(np.float64).sum())
    print_result(args, {"batch": args.batch, "seq": args.seq}, seconds, args.batch * args.seq,
                 "tokens_per_s", load_s,
                 {"checksum": round(check, 5), "onnx": os.path.basename(args.onnx),
                  "ort_threads": threads}, impl="onnxruntime")


def run_encode_ort(args):
    import numpy as np
    from transformers import AutoTokenizer
    with open(args.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    session, load_s, threads = ort_session(args)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    out = {}

    def step():
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors = [None] * len(texts)
        for start in range(0, len(order), args.encode_batch):
            chunk = order[start:start + args.encode_batch]
            enc = tokenizer([texts[i] for i in chunk], padding=True, truncation=True,
                            max_length=256, return_tensors="np")
            feeds = {"input_ids": enc["input_ids"].astype(np.int64),
                     "attention_mask": enc["attention_mask"].astype(np.int64),
                     "token_type_ids": enc.get("token_type_ids",
                                               np.zeros_like(enc["input_ids"])).astype(np.int64)}
            hidden = session.run(["last_hidden_state"], feeds)[0]
            mask = feeds["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, i in enumerate(chunk):
                vectors[i] = pooled[row]
        out["v"] = vectors

    seconds = time_reps(args, "encode", len(texts), "sentence", step)
    print_result(args, {"sentences": len(texts), "encode_batch": args.encode_batch}, seconds,
                 len(texts), "sentences_per_s", load_s,
                 {"checksum": round(float(out["v"][0][0]), 5), "onnx": os.path.basename(args.onnx),
                  "ort_threads": threads}, impl="onnxruntime")


def run_forward(args):
    model, load_s = load_causal_lm(args.model, args.dtype)
    vocab = model.config.vocab_size
    ids = torch.tensor([[input_id(b, s, vocab) for s in range(args.seq)] for b in range(args.batch)])
    out = {}

    def step():
        out["logits"] = model(input_ids=ids).logits

    with torch.inference_mode():
        seconds = time_reps(args, "forward", args.batch * args.seq, "tok", step)
    check = float(out["logits"][0, args.seq - 1, :16].double().sum())
    print_result(args, {"batch": args.batch, "seq": args.seq}, seconds, args.batch * args.seq,
                 "tokens_per_s", load_s,
                 {"checksum": round(check, 5), "attn_implementation": model.config._attn_implementation})


def run_decode(args):
    model, load_s = load_causal_lm(args.model, args.dtype)
    ids = torch.tensor([PROMPT])
    mask = torch.ones_like(ids)
    eos = model.config.eos_token_id
    out = {}

    def step():
        out["ids"] = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                    min_new_tokens=args.new_tokens, do_sample=False,
                                    eos_token_id=eos, pad_token_id=eos)

    with torch.inference_mode():
        seconds = time_reps(args, "decode", args.new_tokens, "tok", step)
    new = out["ids"][0, len(PROMPT):].tolist()
    assert len(new) == args.new_tokens, f"generated {len(new)} tokens, expected {args.new_tokens}"
    print_result(args, {"batch": 1, "prompt": len(PROMPT), "new_tokens": args.new_tokens}, seconds,
                 args.new_tokens, "tokens_per_s", load_s, {"first_tokens": new[:8]})


def run_encode(args):
    from sentence_transformers import SentenceTransformer
    with open(args.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    t0 = time.perf_counter()
    model = SentenceTransformer(args.model, device="cpu")
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    load_s = time.perf_counter() - t0
    out = {}

    def step():
        out["v"] = model.encode(texts, batch_size=args.encode_batch, convert_to_numpy=True,
                                show_progress_bar=False)

    with torch.inference_mode():
        seconds = time_reps(args, "encode", len(texts), "sentence", step)
    print_result(args, {"sentences": len(texts), "encode_batch": args.encode_batch}, seconds,
                 len(texts), "sentences_per_s", load_s, {"checksum": round(float(out["v"][0][0]), 5)})


def run_sgemm(args):
    """torch.matmul (MKL in the pip wheels) at GPT-2 small's layer shapes, 1024 tokens, and
    the read bandwidth."""
    rates = {}
    for k, n in [(768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50257)]:
        m = 1024
        a, b = torch.rand(m, k), torch.rand(k, n)
        torch.matmul(a, b)
        best = float("inf")
        for _ in range(max(args.reps, 3)):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
        rates[f"{m}x{k}x{n}"] = round(2.0 * m * k * n / best * 1e-9, 2)
    # Out-of-cache read bandwidth with the same threads (torch.sum over 256 MB of f32), the
    # floor for decode, which must read every weight once per token.
    x = torch.rand(64 << 20)
    x.sum()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"impl": "torch", "mode": "sgemm", "threads": torch.get_num_threads(),
                      "gflops": rates, "read_gbs": round(x.numel() * 4 / best * 1e-9, 2)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model")
    p.add_argument("--mode", default="forward", choices=["forward", "decode", "encode", "sgemm"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--texts")
    p.add_argument("--encode-batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                   help="the model's dtype (bf16: torch.bfloat16 weights and activations)")
    p.add_argument("--impl", default="torch", choices=["torch", "onnxruntime"])
    p.add_argument("--onnx", help="the graph for --impl onnxruntime (tools/export_ort_peers.py)")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.impl == "onnxruntime":
        if args.mode not in ("forward", "encode") or not args.onnx:
            p.error("--impl onnxruntime runs --mode forward or encode, with --onnx FILE")
        {"forward": run_forward_ort, "encode": run_encode_ort}[args.mode](args)
        return
    {"forward": run_forward, "decode": run_decode, "encode": run_encode, "sgemm": run_sgemm}[args.mode](args)


if __name__ == "__main__":
    main()
