#!/usr/bin/env python3
"""Writes the checkpoint I/O fixtures under tests/data/checkpoint/ (a few KB in all).

    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    .venv/bin/python tools/make_checkpoint_fixtures.py

small.safetensors    every supported dtype, a [4, 6] tensor for slice reads, __metadata__
small.bin            torch.save of {"model": state dict, "epoch": 7, "note": "tiny"} with a
                     transposed view, a storage-offset view, a Parameter and a tied weight
sharded/             model.safetensors.index.json + two shards
evil.bin             a zip whose data.pkl calls os.system via GLOBAL + REDUCE (hand-written
evil_eval.bin        opcodes, never unpickled here); the same with STACK_GLOBAL builtins.eval
expected.json        names, dtypes, shapes, strides and values the tests compare against,
                     plus byte offsets the tests use to corrupt copies of small.bin
"""
import collections
import json
import os
import pickletools
import struct
import sys
import zipfile

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "checkpoint")
SENTINEL = "libai_evil_pickle_ran"  # relative: the tests check that it never appears

DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
          torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "bool"}


def describe(t):
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "strides": list(t.stride()),
            "storage_offset": t.storage_offset(),
            "values": [float(v) for v in t.double().flatten().tolist()]}


def safetensors_fixture(g):
    tensors = {
        "f32": torch.randn(3, 4, generator=g),
        "f64": torch.randn(2, 2, generator=g, dtype=torch.float64),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 3, generator=g).to(torch.float16),
        "i64": torch.arange(-3, 3, dtype=torch.int64).reshape(2, 3),
        "i32": torch.tensor([7, -8, 9], dtype=torch.int32),
        "u8": torch.tensor([0, 1, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "slice_me": torch.arange(24, dtype=torch.float32).reshape(4, 6) / 4,
        "transposed": torch.randn(3, 5, generator=g).t().contiguous(),
    }
    metadata = {"format": "pt", "producer": "make_checkpoint_fixtures"}
    save_file(tensors, os.path.join(OUT, "small.safetensors"), metadata=metadata)
    return {"metadata": metadata, "tensors": {k: describe(v) for k, v in tensors.items()}}


def sharded_fixture(g):
    folder = os.path.join(OUT, "sharded")
    os.makedirs(folder, exist_ok=True)
    shards = {"model-00001-of-00002.safetensors": {"a.weight": torch.randn(2, 3, generator=g),
                                                   "a.bias": torch.randn(3, generator=g)},
              "model-00002-of-00002.safetensors": {"b.weight": torch.randn(4, 2, generator=g)}}
    weight_map, expected = {}, {}
    for file, tensors in shards.items():
        save_file(tensors, os.path.join(folder, file), metadata={"format": "pt"})
        for name, t in tensors.items():
            weight_map[name] = file
            expected[name] = describe(t) | {"file": file}
    total = sum(t.numel() * t.element_size() for ts in shards.values() for t in ts.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return {"tensors": expected, "total_size": total}


def torch_fixture(g):
    base = torch.randn(3, 5, generator=g)
    embed = torch.randn(4, 3, generator=g)
    model = collections.OrderedDict()
    model["base"] = base
    model["transposed"] = base.t()           # stride (1, 5): a non-contiguous view
    model["row"] = base[1]                   # storage offset 5
    model["embed.weight"] = embed
    model["lm_head.weight"] = embed          # tied: one storage, two names
    model["half"] = torch.randn(2, 2, generator=g).half()
    model["bf16"] = torch.randn(3, generator=g).to(torch.bfloat16)
    model["steps"] = torch.tensor([1, 2, 3], dtype=torch.int64)
    model["param"] = torch.nn.Parameter(torch.randn(2, generator=g))
    checkpoint = {"model": model, "epoch": 7, "note": "tiny"}
    path = os.path.join(OUT, "small.bin")
    torch.save(checkpoint, path)
    tensors = {"model." + k: describe(v.detach()) for k, v in model.items()}
    with zipfile.ZipFile(path) as z:
        pkl = next(i for i in z.infolist() if i.filename.endswith("/data.pkl"))
    with open(path, "rb") as f:
        raw = f.read()
    # Where the pickle bytes start: after the local header, its name and its extra field.
    name_len, extra_len = struct.unpack("<HH", raw[pkl.header_offset + 26:pkl.header_offset + 30])
    pickle_offset = pkl.header_offset + 30 + name_len + extra_len
    eocd = raw.rindex(b"PK\x05\x06")
    central_directory = struct.unpack("<I", raw[eocd + 16:eocd + 20])[0]
    if central_directory == 0xFFFFFFFF:
        locator = raw.rindex(b"PK\x06\x07")
        record = struct.unpack("<Q", raw[locator + 8:locator + 16])[0]
        central_directory = struct.unpack("<Q", raw[record + 48:record + 56])[0]
    return {"tensors": tensors, "names": list(tensors),
            "tied": ["model.embed.weight", "model.lm_head.weight"],
            "shared_storage": ["model.base", "model.transposed", "model.row"],
            "other_values": {"epoch": "7", "note": "tiny"},
            "pickle_offset": pickle_offset, "central_directory_offset": central_directory}


def evil_fixture(file, pickle_bytes):
    pickletools.dis(pickle_bytes, out=open(os.devnull, "w"))  # well-formed; never loaded
    with zipfile.ZipFile(os.path.join(OUT, file), "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", "3\n")


def evil_fixtures():
    command = ("touch " + SENTINEL).encode()
    # PROTO 2; GLOBAL 'os system'; SHORT_BINUNICODE command; TUPLE1; REDUCE; STOP
    evil_fixture("evil.bin", b"\x80\x02cos\nsystem\n\x8c" + bytes([len(command)]) + command +
                 b"\x85R.")
    code = ("__import__('os').system('touch " + SENTINEL + "')").encode()
    # PROTO 4; 'builtins' 'eval' STACK_GLOBAL; code; TUPLE1; REDUCE; STOP
    evil_fixture("evil_eval.bin", b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c" +
                 bytes([len(code)]) + code + b"\x85R.")
    return {"sentinel": SENTINEL, "files": {"evil.bin": "os.system", "evil_eval.bin": "builtins.eval"}}


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(20240601)
    expected = {"safetensors": safetensors_fixture(g), "sharded": sharded_fixture(g),
                "torch": torch_fixture(g), "evil": evil_fixtures(),
                "torch_version": torch.__version__}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
