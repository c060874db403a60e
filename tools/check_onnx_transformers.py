#!/usr/bin/env python3
"""Checks an exported ONNX model (libai-actor export onnx) against transformers' own PyTorch
model of the same folder: both run on the same random inputs, and every ONNX output that the
transformers model also returns must agree within --tolerance (relative to the largest
reference value). With --with-past (GPT-2 and the Llama family), a prefill of all but the last token from an empty
past and one step fed the returned present are compared with the full sequence's logits.

Needs torch, transformers, onnxruntime and numpy in one interpreter (onnxruntime may come from
tools/install_onnxruntime.sh's folder through --pyonnx, appended to the module path).

    python3 tools/check_onnx_transformers.py --model tests/data/models/gpt2 --onnx gpt2.onnx
    python3 tools/check_onnx_transformers.py --model DIR --onnx past.onnx --with-past --pyonnx build/pyonnx

Prints one line per output (name, shape, relative error); exits 1 when one is off.
"""
import argparse
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--onnx", required=True, help="the exported .onnx file")
    parser.add_argument("--with-past", action="store_true", help="the model was exported so")
    parser.add_argument("--pyonnx", help="a folder holding onnxruntime (appended to sys.path)")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--sequence", type=int, default=12)
    args = parser.parse_args()
    if args.pyonnx:
        sys.path.append(args.pyonnx)

    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    architecture = (config.get("architectures") or ["AutoModel"])[0]
    model = getattr(transformers, architecture).from_pretrained(args.model).float().eval()  # bf16 checkpoints in f32, as exported
    session = ort.InferenceSession(args.onnx, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    rng = np.random.default_rng(0)
    b, s = args.batch, args.sequence
    inputs = {}
    if "pixel_values" in names:
        size = config.get("image_size", 224)
        inputs["pixel_values"] = rng.standard_normal(
            (b, config.get("num_channels", 3), size, size)).astype(np.float32)
    else:
        low = 3 if config["model_type"] == "roberta" else 0  # no pad or special ids
        inputs["input_ids"] = rng.integers(low, config["vocab_size"], (b, s), dtype=np.int64)
        mask = np.ones((b, s), dtype=np.int64)
        if config["model_type"] != "gpt2" and not args.with_past:
            mask[-1, s - 3:] = 0  # right padding in the last row
        inputs["attention_mask"] = mask
        if "token_type_ids" in names:
            types = np.zeros((b, s), dtype=np.int64)
            types[:, s // 2:] = 1
            inputs["token_type_ids"] = types

    with torch.no_grad():
        reference = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    reference = {k: v.numpy() for k, v in reference.items() if isinstance(v, torch.Tensor)}

    def error(a, e):
        return float(np.abs(a - e).max() / max(np.abs(e).max(), 1e-30))

    worst = 0.0
    if not args.with_past:
        outputs = session.run(None, {n: inputs[n] for n in names})
        for o, value in zip(session.get_outputs(), outputs):
            if o.name not in reference:
                print(f"{o.name:28s} {list(value.shape)} (transformers does not return it)")
                continue
            err = error(value, reference[o.name])
            worst = max(worst, err)
            print(f"{o.name:28s} {list(value.shape)} rel. error {err:.3g}")
    else:
        if config["model_type"] == "gpt2":
            heads, d = config["n_head"], config["n_embd"] // config["n_head"]
        else:  # the Llama family: the cache holds key/value heads
            heads = config.get("num_key_value_heads", config["num_attention_heads"])
            d = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
        ids = inputs["input_ids"]
        feed = {"input_ids": ids[:, :-1], "attention_mask": np.ones((b, s - 1), np.int64)}
        for n in names:
            if n.startswith("past_key_values."):
                feed[n] = np.zeros((b, heads, 0, d), np.float32)
        first = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        step = {"input_ids": ids[:, -1:], "attention_mask": np.ones((b, s), np.int64)}
        for n in names:
            if n.startswith("past_key_values."):
                step[n] = first[n.replace("past_key_values.", "present.")]
        second = dict(zip([o.name for o in session.get_outputs()], session.run(None, step)))
        for label, value, expected in (("prefill logits", first["logits"], reference["logits"][:, :-1]),
                                       ("step logits", second["logits"], reference["logits"][:, -1:])):
            err = error(value, expected)
            worst = max(worst, err)
            print(f"{label:28s} {list(value.shape)} rel. error {err:.3g}")
    if worst > args.tolerance:
        print(f"check_onnx_transformers: worst relative error {worst:.3g} > {args.tolerance}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
