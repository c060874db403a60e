#!/usr/bin/env python3
"""Builds tests/data/datasets/gpt_index.json: Megatron's GPT dataset index arrays (document index,
sample index, shuffle index) and the first samples' tokens for small synthetic corpora, computed
with numpy from the algorithm as Megatron documents it (written here from that description:
epochs, the document index tiled and shuffled, samples of seq_length + 1 tokens overlapping by
one, the shuffled sample positions, a separate final epoch under 80% of an epoch). The C++
GptDataset must give the same arrays for the same seed (tests/train/data_gpt_dataset_test.cc).

    .venv/bin/python tools/make_gpt_index_fixture.py

Deterministic: the corpora are formulas (corpus() below, mirrored in the test) and every
shuffle uses numpy.random.RandomState(seed).
"""
import json
import os

import numpy as np


def corpus(num_docs, max_len, salt):
    """Document lengths 1..max_len and token values from integer formulas (the test's twin)."""
    docs = []
    for d in range(num_docs):
        length = 1 + (d * 7919 + salt * 31) % max_len
        docs.append([(d * 1000 + t * 17 + salt) % 50257 for t in range(length)])
    return docs


def build(docs, seq_length, num_samples, seed):
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    documents = np.arange(len(docs))
    tokens_per_epoch = int(sizes[documents].sum())
    epochs = 1
    while epochs * tokens_per_epoch < num_samples * seq_length + 1:
        epochs += 1
    separate = False
    before_final = 0
    if epochs > 1:
        before_final = ((epochs - 1) * tokens_per_epoch - 1) // seq_length
        per_epoch = (tokens_per_epoch - 1) // seq_length
        separate = (num_samples - before_final) < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)

    def doc_index(n_epochs):
        idx = np.tile(documents, n_epochs).astype(np.int32)
        rng.shuffle(idx)
        return idx

    if separate:
        doc_idx = np.concatenate((doc_index(epochs - 1), doc_index(1)))
    else:
        doc_idx = doc_index(epochs)

    total = (epochs * tokens_per_epoch - 1) // seq_length
    sample_idx = [(0, 0)]
    pos, off = 0, 0
    while len(sample_idx) <= total:
        remaining = seq_length + 1
        while remaining:
            length = int(sizes[doc_idx[pos]]) - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - 1
                remaining = 0
            elif pos == len(doc_idx) - 1:
                off = int(sizes[doc_idx[pos]]) - 1
                break
            else:
                pos += 1
                off = 0
        sample_idx.append((pos, off))

    def shuffled(begin, end):
        r = np.arange(begin, end, dtype=np.uint32)
        rng.shuffle(r)
        return r

    if separate:
        shuffle_idx = np.concatenate((shuffled(0, before_final), shuffled(before_final, total)))
    else:
        shuffle_idx = shuffled(0, total)

    def sample_tokens(i):
        k = int(shuffle_idx[i])
        (b, bo), (e, eo) = sample_idx[k], sample_idx[k + 1]
        out = []
        for p in range(b, e + 1):
            doc = docs[int(doc_idx[p])]
            start = bo if p == b else 0
            stop = eo + 1 if p == e else len(doc)
            out.extend(doc[start:stop])
        assert len(out) == seq_length + 1
        return out

    return {
        "epochs": epochs,
        "separate_final_epoch": bool(separate),
        "tokens_per_epoch": tokens_per_epoch,
        "size": int(total),
        "document_index": [int(x) for x in doc_idx],
        "sample_index": [int(x) for pair in sample_idx for x in pair],
        "shuffle_index": [int(x) for x in shuffle_idx],
        "first_samples": [sample_tokens(i) for i in range(min(4, total))],
    }


def main():
    cases = []
    # (num_docs, max_len, salt, seq_length, num_samples, seed): one epoch; several epochs with
    # the final one folded in; several with a separate final epoch; a long shuffle (n > 2^16).
    for num_docs, max_len, salt, seq, samples, seed in [
        (40, 30, 1, 16, 20, 1234),
        (25, 40, 2, 8, 220, 7),
        (25, 40, 3, 8, 140, 42),
        (300, 12, 4, 4, 600, 2**32 - 1),
    ]:
        case = build(corpus(num_docs, max_len, salt), seq, samples, seed)
        case.update(num_docs=num_docs, max_len=max_len, salt=salt, seq_length=seq,
                    num_samples=samples, seed=seed)
        cases.append(case)
    rng = np.random.RandomState(5)
    big = np.arange(70000, dtype=np.int64)
    rng.shuffle(big)
    out = {"numpy": np.__version__, "cases": cases,
           "permutation_70000_seed5_first": [int(x) for x in big[:64]],
           "permutation_70000_seed5_sum_of_i_times_x": int((np.arange(70000) * big).sum())}
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "datasets",
                        "gpt_index.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    for c in cases:
        print(c["epochs"], c["separate_final_epoch"], c["size"])


if __name__ == "__main__":
    main()
