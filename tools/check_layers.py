#!/usr/bin/env python3
"""Fails when an #include goes the wrong way between the libraries (docs/ARCHITECTURE.md).

    tools/check_layers.py [--root DIR]

Every source file of a layer folder may include the headers of the folders its library links,
and no others; the third-party headers that belong to one room (CAF, Cap'n Proto, UCX) are
allowed there only. Prints one line per wrong include, "file:line: ..." and exits 1; exits 0 and
prints a one-line summary when there is none. tests/, bench/, examples/, tools/ and third_party/
are not layers and are not checked.
"""
import argparse
import os
import re
import sys

# The folder of each library and what its sources may include (its own folder included), as
# cmake/LibaiLibrary.cmake links them. Order: lowest first.
ALLOWED = {
    "runtime": {"runtime"},
    "ops": {"ops", "runtime"},
    "models": {"models", "ops", "runtime"},
    "schedule": {"schedule", "runtime"},
    "train": {"train", "models", "schedule", "ops", "runtime"},
    "app": {"app", "runtime"},
    "plan": {"plan", "models", "schedule", "app", "ops", "runtime"},
    "service": {"service", "models", "ops", "runtime"},
    "actors": {"actors", "plan", "train", "service", "models", "schedule", "app", "ops",
               "runtime"},
    "bin": {"bin", "actors", "plan", "train", "service", "models", "schedule", "app", "ops",
            "runtime"},
}

# Rooms inside a folder, the first matching prefix deciding: a file under it may not include a
# header under the listed ones (the actors library: its root actors and wire schema below the cluster, the cluster
# below the jobs).
INNER = [
    ("actors/jobs/", []),
    ("actors/cluster/", ["actors/jobs/"]),
    ("actors/wire/", ["actors/jobs/", "actors/cluster/"]),
    ("actors/", ["actors/jobs/", "actors/cluster/"]),  # the root (the prefixes above come first)
]

# `libai-plan` links libai_plan alone: the sources it is built from include no actor, train or
# service header (bin/CMakeLists.txt).
PLAN_BINARY = {"bin/cli.cc", "bin/cmd_plan.cc", "bin/libai_plan_main.cc", "bin/commands.h"}
PLAN_BINARY_ALLOWED = {"bin", "plan", "schedule", "app", "models", "ops", "runtime"}

# Third-party headers of one room: allowed under these folders only.
SYSTEM = {
    "caf/": ["actors/"],
    "capnp/": ["actors/"],
    "kj/": ["actors/"],
    "ucp/": ["runtime/comm/", "actors/"],
    "uct/": ["runtime/comm/", "actors/"],
    "ucs/": ["runtime/comm/", "actors/"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE = (".h", ".cc", ".cu", ".cuh")


def problems_of(root):
    problems, files = [], 0
    for layer in ALLOWED:
        base = os.path.join(root, layer)
        for folder, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m:
                            problems += check(rel, number, layer, m.group(1), m.group(2))
    return problems, files


def check(rel, number, layer, quote, header):
    where = f"{rel}:{number}"
    if quote == "<":
        for prefix, rooms in SYSTEM.items():
            if header.startswith(prefix) and not any(rel.startswith(r) for r in rooms):
                return [f"{where}: <{header}> belongs to {' and '.join(rooms)} only"]
        return []
    target = header.split("/", 1)[0]
    if "/" not in header or target not in ALLOWED:
        return []  # a generated or third-party header ("capnp schema", "gtest/...")
    allowed = PLAN_BINARY_ALLOWED if rel in PLAN_BINARY else ALLOWED[layer]
    if target not in allowed:
        whose = "libai-plan's sources" if rel in PLAN_BINARY else f"{layer}/"
        return [f'{where}: "{header}": {whose} may include only '
                f"{', '.join(sorted(allowed))}"]
    for prefix, forbidden in INNER:
        if rel.startswith(prefix):
            for room in forbidden:
                if header.startswith(room):
                    return [f'{where}: "{header}": {prefix} is below {room}']
            break
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the source tree (default: this checkout)")
    args = parser.parse_args()
    problems, files = problems_of(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) go the wrong way", file=sys.stderr)
        return 1
    if files == 0:
        print(f"check_layers: no layer folder under {args.root}", file=sys.stderr)
        return 1
    print(f"check_layers: {files} files, every include goes the right way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
