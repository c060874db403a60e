"""Writes a Llama of TinyLlama-1.1B's shape (hidden 2048, 22 layers, 32 heads over 4 KV heads,
FFN 5632, vocabulary 32000; 1.1 B parameters) with random weights as a Q4_0 GGUF file, every
matrix in Q4_0 and the norms in F32, with a SentencePiece vocabulary of placeholder tokens (the
256 byte tokens and <unk> <s> </s> that llama.cpp needs, then ▁t<i>): the file of the 1B decode
row of bench/run_cpu_peers.py. Weights are normal(0, 1 / sqrt(fan-in)) so activations keep
their scale through the layers.

    python bench/make_llama_gguf.py --out build/model_bench/llama-1b-q4_0.gguf
"""
import argparse
import os
import sys
import time

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 2048, 22, 32, 4, 5632, 32000, 2048


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"\u2581t{i}" for i in range(VOCAB - len(tokens))]
    types += [1] * (VOCAB - len(types))
    return tokens, [-float(i) for i in range(VOCAB)], types


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    if os.path.exists(a.out):
        return
    rng = np.random.default_rng(a.seed)
    head_dim, kv = HIDDEN // HEADS, HIDDEN // HEADS * KV_HEADS
    w = gguf.GGUFWriter(a.out + ".tmp", "llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    shapes = [("token_embd.weight", (VOCAB, HIDDEN)), ("output.weight", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        b = f"blk.{i}."
        shapes += [(b + "attn_q.weight", (HIDDEN, HIDDEN)), (b + "attn_k.weight", (kv, HIDDEN)),
                   (b + "attn_v.weight", (kv, HIDDEN)), (b + "attn_output.weight", (HIDDEN, HIDDEN)),
                   (b + "ffn_gate.weight", (FFN, HIDDEN)), (b + "ffn_up.weight", (FFN, HIDDEN)),
                   (b + "ffn_down.weight", (HIDDEN, FFN))]
    t0 = time.time()
    for n, (name, shape) in enumerate(shapes):
        std = 1.0 if name == "token_embd.weight" else 1.0 / np.sqrt(shape[1])
        x = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)
        w.add_tensor(name, quants.quantize(x, T.Q4_0), raw_dtype=T.Q4_0)
        el = time.time() - t0
        print(f"[gguf] {n + 1}/{len(shapes)} tensors  ETA {el / (n + 1) * (len(shapes) - n - 1):.0f} s",
              file=sys.stderr, flush=True)
    for i in range(LAYERS):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.rename(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
