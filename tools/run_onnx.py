#!/usr/bin/env python3
"""Runs an ONNX model with ONNX Runtime on inputs from a safetensors file and writes every
output to another safetensors file (the ONNX export tests write the inputs and read the
outputs back; tests/onnx/). Needs only onnxruntime and numpy: tools/install_onnxruntime.sh
installs them under BUILD/pyonnx.

    PYTHONPATH=build/pyonnx python3 tools/run_onnx.py model.onnx inputs.safetensors out.safetensors

Prints one line per output: its name, shape and dtype. Exits 1 with the reason on stderr when
an input is missing or the model does not run.
"""
import json
import struct
import sys

import numpy as np
import onnxruntime as ort

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        out[name] = np.frombuffer(blob[base + begin:base + end], dtype=dtype).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, offset, chunks = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    model, inputs_path, outputs_path = sys.argv[1:]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # The graph as written: no fusions, so the comparison checks our ops, not ORT's rewrites.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    inputs = read_safetensors(inputs_path)
    feed = {}
    for i in session.get_inputs():
        if i.name not in inputs:
            print(f"run_onnx: {inputs_path} has no input {i.name} (the model takes "
                  f"{', '.join(x.name for x in session.get_inputs())})", file=sys.stderr)
            return 1
        feed[i.name] = inputs[i.name]
    # Inputs with a default (overridable initializers: Llama's position_ids) when given.
    for i in session.get_overridable_initializers():
        if i.name in inputs:
            feed[i.name] = inputs[i.name]
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, feed)
    write_safetensors(outputs_path, dict(zip(names, results)))
    for name, value in zip(names, results):
        print(f"{name} {list(value.shape)} {value.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
