#!/usr/bin/env python3
"""Builds small Megatron indexed datasets (.bin + .idx) from the documented layout, byte by byte
with struct and numpy (Megatron itself is not imported), and a JSON of what each one holds.

    .venv/bin/python tools/make_indexed_fixtures.py

Writes
  tests/data/indexed/<case>.bin, <case>.idx   one dataset per case (a token type, documents)
  tests/data/indexed/contents.json            per case: dtype code, sequences, document indices

The layout (Megatron's megatron/core/datasets/indexed_dataset.py, _IndexWriter / _IndexReader):
  .idx = b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code, <Q N sequences, <Q D index entries,
         int32[N] lengths, int64[N] byte pointers (cumulative from 0), int64[D] document indices
         (0, then the sequence count after each document: an empty document repeats it)
  .bin = the N token arrays concatenated, little-endian, no header
Dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.
Seeded: a rerun rewrites the same bytes.
"""
import json
import os
import struct

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "indexed")
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}


def write_dataset(name, dtype, documents):
    """documents: a list of documents, each a list of sequences (lists of ints)."""
    sequences = [s for doc in documents for s in doc]
    doc_idx = [0]
    for doc in documents:
        doc_idx.append(doc_idx[-1] + len(doc))
    np_dtype = np.dtype(dtype).newbyteorder("<")
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        for s in sequences:
            f.write(np.array(s, dtype=np_dtype).tobytes(order="C"))
    lengths = np.array([len(s) for s in sequences], dtype="<i4")
    pointers = np.zeros(len(sequences), dtype="<i8")
    if len(sequences) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * np_dtype.itemsize)
    with open(os.path.join(OUT, name + ".idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[dtype]))
        f.write(struct.pack("<Q", len(sequences)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.array(doc_idx, dtype="<i8").tobytes(order="C"))
    return {"name": name, "dtype": dtype, "dtype_code": CODES[dtype],
            "sequences": [[int(t) for t in s] for s in sequences], "document_indices": doc_idx}


def random_documents(rng, count, low, high, max_sequences=3, max_length=12):
    docs = []
    for _ in range(count):
        doc = []
        for _ in range(int(rng.integers(1, max_sequences + 1))):
            doc.append(rng.integers(low, high, size=int(rng.integers(1, max_length + 1))).tolist())
        docs.append(doc)
    return docs


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(12)
    cases = []
    # GPT-2 sized vocabulary -> uint16 (what preprocess_data.py writes for vocab < 65500), with an
    # empty document (repeated index) and an empty sequence (length 0, Megatron's add_item([])).
    docs = random_documents(rng, 6, 0, 50257)
    docs.insert(2, [])
    docs[4].insert(1, [])
    docs[0][0][0] = 65535  # the top of the range
    cases.append(write_dataset("gpt_uint16", "uint16", docs))
    # A large vocabulary -> int32, ids past 65535.
    cases.append(write_dataset("large_vocab_int32", "int32", random_documents(rng, 5, 60000, 250000)))
    # The other integer codes, and whole-number floats (the format allows them).
    cases.append(write_dataset("bytes_uint8", "uint8", random_documents(rng, 3, 0, 256)))
    cases.append(write_dataset("signed_int8", "int8", random_documents(rng, 3, -128, 128)))
    cases.append(write_dataset("signed_int16", "int16", random_documents(rng, 3, -32768, 32768)))
    cases.append(write_dataset("wide_int64", "int64", random_documents(rng, 3, -2**40, 2**40)))
    cases.append(write_dataset("floats_float32", "float32", random_documents(rng, 2, 0, 1000)))
    cases.append(write_dataset("floats_float64", "float64", random_documents(rng, 2, 0, 1000)))
    # No sequences at all: N = 0, D = 1, an empty .bin.
    cases.append(write_dataset("empty_uint16", "uint16", []))
    with open(os.path.join(OUT, "contents.json"), "w") as f:
        json.dump({"generator": "tools/make_indexed_fixtures.py", "numpy": np.__version__, "cases": cases}, f,
                  indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
