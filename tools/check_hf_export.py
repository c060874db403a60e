#!/usr/bin/env python3
"""Checks that a trained checkpoint exported to the Hugging Face layout loads in transformers and
gives the logits our runtime computes from the checkpoint itself.

    # a training checkpoint (train/checkpoint/gathered.h): OUT/model_NNNNNNN/, or OUT with last_checkpoint
    libai-actor convert --from OUT --to EXPORT --format hf
    libai-actor forward --model OUT/model_NNNNNNN --input-ids 1,2,3,4 --input-ids 5,6,7,8 \\
        --save ours.safetensors
    .venv/bin/python tools/check_hf_export.py --export EXPORT --ours ours.safetensors \\
        --input-ids 1,2,3,4 --input-ids 5,6,7,8

The export is loaded with the transformers class config.json's architectures[0] names, in float32 on the
CPU, run on the same rows (equal lengths: no padding), and its logits are compared with the
"logits" tensor of --ours. Prints the max absolute difference and exits 1 above --tolerance
(default 1e-5). Deterministic: no randomness is involved.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="folder written by convert --format hf")
    parser.add_argument("--ours", required=True, help="forward --save output of the checkpoint")
    parser.add_argument("--input-ids", action="append", required=True,
                        help="one row of comma-separated token ids (repeat for more rows)")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()

    with open(os.path.join(args.export, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    model_class = getattr(transformers, architecture)
    model = model_class.from_pretrained(args.export, torch_dtype=torch.float32).eval()
    rows = [[int(t) for t in row.split(",")] for row in args.input_ids]
    if len({len(r) for r in rows}) != 1:
        sys.exit("rows must have equal lengths (no padding in this check)")
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(rows)).logits.float()
    ours = load_file(args.ours)["logits"].float()
    if ours.shape != theirs.shape:
        sys.exit(f"shape mismatch: ours {tuple(ours.shape)}, transformers {tuple(theirs.shape)}")
    diff = (ours - theirs).abs().max().item()
    print(f"{architecture} from {args.export}: logits {tuple(theirs.shape)}, "
          f"max |ours - transformers| = {diff:.3e} (tolerance {args.tolerance:g}), "
          f"transformers {transformers.__version__}, torch {torch.__version__}")
    sys.exit(0 if diff <= args.tolerance else 1)


if __name__ == "__main__":
    main()
