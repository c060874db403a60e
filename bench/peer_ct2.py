"""The CTranslate2 side of bench/run_cpu_peers.py's quantized rows (issue 34).

Same flags, same work and the same JSON line per measurement as build/bench/model_bench and
bench/peer_models.py. The model is converted once from the same Hugging Face folder
(ct2-transformers-converter, float32 weights, into --ct2 DIR) and loaded with --compute-type
int8 (CTranslate2 quantizes the weights at load; activations quantized at run time) or
float32, intra_threads = --threads, inter_threads = 1.

  .venv/bin/python bench/peer_ct2.py --model DIR --ct2 OUT --mode forward --batch 8 --seq 128
  .venv/bin/python bench/peer_ct2.py --model DIR --ct2 OUT --mode decode --new-tokens 128
  .venv/bin/python bench/peer_ct2.py --model MINILM --ct2 OUT --mode encode --texts FILE

forward: Generator.forward_batch(ids [batch, seq]) -> all logits.
decode:  Generator.generate_batch (greedy, exactly N new tokens) from model_bench's 8-token prompt.
encode:  Encoder.forward_batch on the folder's fast tokenizer's ids (longest first, batches of
         --encode-batch), mean-pooled over the mask and normalised in numpy, as peer_models.py's
         ONNX Runtime path does.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_models  # noqa: E402  (time_reps, print_result, the prompt and input ids)


def convert(args):
    if os.path.exists(os.path.join(args.ct2, "model.bin")):
        return
    folder = args.model
    if args.mode != "encode" and not os.path.exists(os.path.join(folder, "tokenizer.json")):
        # The converter reads the vocabulary from a tokenizer, which a random-weight folder does
        # not have: one of placeholder tokens t0, t1, ... of the model's size (ids are what runs).
        import json
        import tempfile
        from transformers import AutoConfig
        vocab = AutoConfig.from_pretrained(args.model).vocab_size
        folder = tempfile.mkdtemp()
        for name in os.listdir(args.model):
            os.symlink(os.path.abspath(os.path.join(args.model, name)), os.path.join(folder, name))
        with open(os.path.join(folder, "vocab.json"), "w") as f:
            json.dump({f"t{i}": i for i in range(vocab)}, f)
        with open(os.path.join(folder, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n")
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": f"t{vocab - 1}",
                       "eos_token": f"t{vocab - 1}", "unk_token": f"t{vocab - 1}"}, f)
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ct2-transformers-converter"),
                    "--model", folder, "--output_dir", args.ct2, "--force"], check=True,
                   stdout=subprocess.DEVNULL)


def run(args):
    import ctranslate2
    convert(args)
    kind = ctranslate2.Encoder if args.mode == "encode" else ctranslate2.Generator
    t0 = time.perf_counter()
    model = kind(args.ct2, device="cpu", compute_type=args.compute_type,
                 intra_threads=args.threads, inter_threads=1)
    load_s = time.perf_counter() - t0
    extra = {"compute_type": args.compute_type, "ct2": ctranslate2.__version__}
    out = {}
    if args.mode == "forward":
        from transformers import AutoConfig
        vocab = AutoConfig.from_pretrained(args.model).vocab_size
        ids = [[peer_models.input_id(b, s, vocab) for s in range(args.seq)]
               for b in range(args.batch)]

        def step():
            out["logits"] = np.asarray(model.forward_batch(ids))

        seconds = peer_models.time_reps(args, "forward", args.batch * args.seq, "tok", step)
        extra["checksum"] = round(float(out["logits"][0, args.seq - 1, :16].astype(np.float64).sum()), 5)
        peer_models.print_result(args, {"batch": args.batch, "seq": args.seq}, seconds,
                                 args.batch * args.seq, "tokens_per_s", load_s, extra,
                                 impl="ctranslate2")
    elif args.mode == "decode":
        import json
        with open(os.path.join(args.ct2, "vocabulary.json")) as f:
            tokens = json.load(f)
        prompt = [tokens[i] for i in peer_models.PROMPT]

        def step():
            out["r"] = model.generate_batch([prompt], max_length=args.new_tokens,
                                            min_length=args.new_tokens, sampling_topk=1,
                                            include_prompt_in_result=False)

        seconds = peer_models.time_reps(args, "decode", args.new_tokens, "tok", step)
        new = out["r"][0].sequences_ids[0]
        assert len(new) == args.new_tokens, f"generated {len(new)} tokens"
        extra["first_tokens"] = new[:8]
        peer_models.print_result(args, {"batch": 1, "prompt": len(prompt), "new_tokens": args.new_tokens},
                                 seconds, args.new_tokens, "tokens_per_s", load_s, extra,
                                 impl="ctranslate2")
    else:
        from transformers import AutoTokenizer
        with open(args.texts, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
        tokenizer = AutoTokenizer.from_pretrained(args.model)

        def step():
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            vectors = [None] * len(texts)
            for start in range(0, len(order), args.encode_batch):
                chunk = order[start:start + args.encode_batch]
                enc = tokenizer([texts[i] for i in chunk], truncation=True, max_length=256)
                hidden = np.asarray(model.forward_batch(enc["input_ids"]).last_hidden_state)
                lengths = [len(x) for x in enc["input_ids"]]
                for row, i in enumerate(chunk):
                    v = hidden[row, :lengths[row]].mean(axis=0)
                    vectors[i] = v / max(np.linalg.norm(v), 1e-12)
            out["v"] = vectors

        seconds = peer_models.time_reps(args, "encode", len(texts), "sentence", step)
        extra["checksum"] = round(float(out["v"][0][0]), 5)
        peer_models.print_result(args, {"sentences": len(texts), "encode_batch": args.encode_batch},
                                 seconds, len(texts), "sentences_per_s", load_s, extra,
                                 impl="ctranslate2")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--ct2", required=True, help="the converted model's folder (made on first use)")
    p.add_argument("--mode", default="forward", choices=["forward", "decode", "encode"])
    p.add_argument("--compute-type", default="int8", choices=["int8", "float32"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--texts")
    p.add_argument("--encode-batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    args.dtype = args.compute_type
    run(args)


if __name__ == "__main__":
    main()
