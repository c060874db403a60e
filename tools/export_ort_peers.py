"""Exports the ONNX Runtime peer graphs of the CPU inference benchmarks (bench/run_model_bench.sh,
bench/RESULTS.md) from a Hugging Face folder, with transformers and torch:

  causal-lm  AutoModelForCausalLM, input_ids [batch, seq] -> logits [batch, seq, vocab]
             (no KV cache: the forward rows)
  encoder    AutoModel (BERT family), input_ids, attention_mask, token_type_ids
             -> last_hidden_state (sentence embeddings pool it, as sentence-transformers does)

Each is written as `<name>.onnx` as torch exports it (ONNX Runtime then applies its own graph
optimizations at ORT_ENABLE_ALL when it loads it), and as `<name>.opt.onnx` after ONNX
Runtime's transformer optimizer (onnxruntime.transformers.optimizer: fused attention, skip
layer norm, bias + GELU, as far as it recognises the exported graph); the JSON printed says
which passes ran and what they fused.
The export uses eager attention (one graph for every sequence length); the batch and sequence
axes are dynamic.

  python tools/export_ort_peers.py --model DIR --kind causal-lm --out OUT_DIR
  python tools/export_ort_peers.py --model DIR --kind encoder --out OUT_DIR

Needs torch, transformers, onnx and onnxruntime in the running environment. Prints the two
paths as JSON.
"""

import argparse
import json
import os
import sys

import torch


def export(args):
    from transformers import AutoModel, AutoModelForCausalLM
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, f"{args.kind}.onnx")
    opt = os.path.join(args.out, f"{args.kind}.opt.onnx")
    if args.kind == "causal-lm":
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.config.use_cache = False
        ids = torch.zeros((2, 16), dtype=torch.int64)

        class Logits(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids):
                return self.inner(input_ids=input_ids, use_cache=False).logits

        module, inputs = Logits(model.eval()), (ids,)
        names = ["input_ids"]
        outputs = ["logits"]
        axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
        model_type = model.config.model_type
    else:
        model = AutoModel.from_pretrained(args.model, dtype=torch.float32,
                                          attn_implementation="eager")
        ids = torch.ones((2, 16), dtype=torch.int64)

        class Hidden(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state

        module, inputs = Hidden(model.eval()), (ids, torch.ones_like(ids), torch.zeros_like(ids))
        names = ["input_ids", "attention_mask", "token_type_ids"]
        outputs = ["last_hidden_state"]
        axes = {n: {0: "batch", 1: "seq"} for n in names + outputs}
        model_type = "bert"
    with torch.inference_mode():
        torch.onnx.export(module, inputs, raw, input_names=names, output_names=outputs,
                          dynamic_axes=axes, opset_version=18, dynamo=True)
    from onnxruntime.transformers import optimizer
    config = model.config
    heads = getattr(config, "num_attention_heads", getattr(config, "n_head", 0))
    hidden = getattr(config, "hidden_size", getattr(config, "n_embd", 0))
    result = {"raw": raw}
    # The model's own fusion passes first; where they do not know the exported graph (GPT-2's
    # post-processing fails on the graphs torch 2.x exports), BERT's passes, which fuse the
    # patterns every transformer has (skip layer norm, bias + GELU).
    for kind in dict.fromkeys([model_type, "bert"]):
        try:
            optimized = optimizer.optimize_model(raw, model_type=kind, num_heads=heads,
                                                 hidden_size=hidden, opt_level=1, use_gpu=False)
        except Exception as e:
            result[f"optimizer_error_{kind}"] = f"{type(e).__name__}: {e}"
            continue
        optimized.save_model_to_file(opt, use_external_data_format=True)
        stats = optimized.get_fused_operator_statistics()
        result.update(optimized=opt, passes=kind, fused={k: v for k, v in stats.items() if v})
        break
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--kind", required=True, choices=["causal-lm", "encoder"])
    p.add_argument("--out", required=True)
    export(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
