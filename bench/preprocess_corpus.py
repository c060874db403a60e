#!/usr/bin/env python3
"""Inputs of bench/run_preprocess_bench.sh: a JSONL corpus and a GPT-2 style byte-level BPE
tokenizer trained on it, both from text available offline.

    python bench/preprocess_corpus.py OUT_DIR [MEGABYTES]

Words: the English in the docstrings and comments of the installed `transformers` package
(every [A-Za-z']+ word, kept with its frequency); documents of 30-600 words drawn from those
frequencies (seeded), in sentences with capitals, commas, digits and full stops. Writes
OUT_DIR/corpus.jsonl ({"text": ...} per line) and OUT_DIR/tokenizer/ (vocab.json, merges.txt,
special_tokens_map.json with <|endoftext|>, tokenizer_config.json for AutoTokenizer; 50257 entries like GPT-2, trained with the
`tokenizers` package on the first 4 MB of the corpus).
"""
import collections
import json
import os
import random
import re
import sys

import transformers
from tokenizers import ByteLevelBPETokenizer


def word_counts():
    counts = collections.Counter()
    root = os.path.dirname(transformers.__file__)
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8", errors="ignore") as f:
                    for line in f:
                        if "#" in line or '"""' in line or line.startswith("    ") and not re.search(r"[=()\[\]]", line):
                            counts.update(re.findall(r"[A-Za-z][a-z']+", line))
    return counts


def main():
    out, megabytes = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 30
    os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
    counts = word_counts()
    words = sorted(counts)
    weights = [counts[w] for w in words]
    rng = random.Random(12)
    path = os.path.join(out, "corpus.jsonl")
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < megabytes * 1e6:
            sentences = []
            for _ in range(rng.randint(2, 40)):
                n = rng.randint(4, 20)
                s = rng.choices(words, weights, k=n)
                if rng.random() < 0.2:
                    s.insert(rng.randrange(n), str(rng.randint(0, 5000)))
                if rng.random() < 0.3:
                    s[rng.randrange(1, n)] += ","
                sentences.append(" ".join(s).capitalize() + rng.choice([".", ".", ".", "?", "!"]))
            line = json.dumps({"text": " ".join(sentences)}) + "\n"
            f.write(line)
            written += len(line.encode())
    with open(path, encoding="utf-8") as f:
        sample = f.read(4_000_000)
    texts = [json.loads(l)["text"] for l in sample.splitlines()[:-1]]
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(texts, vocab_size=50257, min_frequency=2, special_tokens=["<|endoftext|>"])
    tok.save_model(os.path.join(out, "tokenizer"))
    with open(os.path.join(out, "tokenizer", "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)
    with open(os.path.join(out, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)
    print(f"{path}: {written / 1e6:.1f} MB, {len(words)} distinct words; tokenizer: {tok.get_vocab_size()} entries")


if __name__ == "__main__":
    main()
