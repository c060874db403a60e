#!/usr/bin/env python3
"""Auto parallel of a run job against every layout measured the same way (issue 21).

A generate job of the demo's character GPT (its initial weights, written by `libai-actor train
configs/demo/train_char_gpt.yaml train.train_iter=0`) on --nodes node processes of one CPU
device each on loopback, with train.cluster.device_slowdown emulating unequal devices. Every
layout the search of `libai-actor run` covers (Note [Auto parallel of a run job]: dp x pp of the
devices, groups in flight from dp to min(prompts, 2 dp pp) in steps of dp) is planned with
`libai-actor plan` (its predicted job time) and run with `libai-actor run` (its keys set, auto
parallel off), measured as node 0's job_seconds; then `run` with auto parallel on chooses
its own layout, read from its log. The chosen layout and the five fastest of the first round
run 3 more times (the median of the 4 runs counts). Prints a markdown table, the chosen
layout's measured time over the best one's, and the rank correlation.

    python3 bench/run_auto_parallel_run_sweep.py --build build [--nodes 4] [--prompts 8]
        [--new-tokens 32] [--slowdown "[1, 3, 1, 3]"]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHOSEN = re.compile(r"auto parallel: dp (\d+) x tp 1 x pp (\d+), (\d+) groups")
PREDICTED = re.compile(r"predicted job time ([\d.]+) (ns|us|ms|s)\b")
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
LINES = ["HAMLET.", "To be, or not to be", "KING LEAR.", "Now is the winter", "ROMEO.",
         "O, what a rogue", "MACBETH.", "Friends, Romans, countrymen", "OTHELLO.", "All the world"]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model(binary, build):
    folder = os.path.join(build, "demo", "untrained", "model_final")
    if not os.path.exists(os.path.join(folder, "config.json")):
        prefix = os.path.join(build, "demo", "shakespeare")
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        if not os.path.exists(prefix + "_text_document.idx"):
            subprocess.run([binary, "preprocess", "--input", "data/shakespeare/plays.txt", "--tokenizer",
                            "configs/demo/char_gpt", "--output-prefix", prefix, "--split-paragraphs",
                            "--append-eod"], check=True, cwd=REPO, capture_output=True)
        subprocess.run([binary, "train", "configs/demo/train_char_gpt.yaml", f"data.prefix={prefix}_text_document",
                        "train.train_iter=0", f"train.output_dir={os.path.dirname(folder)}"],
                       check=True, cwd=REPO, capture_output=True)
    return folder


def write_config(path, weights, args):
    prompts = ", ".join(json.dumps(LINES[i % len(LINES)]) for i in range(args.prompts))
    with open(path, "w") as f:
        f.write(f"_base_: [{os.path.join(REPO, 'configs', 'default.yaml')}]\n"
                "graph: {auto_parallel: {enabled: true}}\n"
                f"model: {{weights: {weights}}}\n"
                f"job: {{_target_: generate, prompts: [{prompts}], max_new_tokens: {args.new_tokens}, "
                "num_groups: null}\n"
                "train:\n  dist: {data_parallel_size: null, pipeline_parallel_size: null}\n"
                f"  cluster: {{nodes: {args.nodes}, devices_per_node: 1, token: sweep, "
                f"device_slowdown: {args.slowdown}, join_timeout: 60.0}}\n")


def keys(dp, pp, groups):
    return ["graph.auto_parallel.enabled=false", f"train.dist.data_parallel_size={dp}",
            f"train.dist.pipeline_parallel_size={pp}", f"job.num_groups={groups}"]


def run(binary, config, overrides, nodes):
    """Runs the job on `nodes` processes; returns node 0's JSON, its log and the first failure."""
    port = str(free_port())
    procs = [subprocess.Popen([binary, "run", config] + overrides + ["--node-rank", str(r), "--port", port] +
                              (["--json"] if r == 0 else []),
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(nodes)]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0:
            return None, outputs[0][1], err.strip().splitlines()[-1] if err.strip() else "failed"
    return json.loads(outputs[0][0]), outputs[0][1], None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--slowdown", default="[1, 3, 1, 3]")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    binary = os.path.join(build, "bin", "libai-actor")
    weights = model(binary, build)
    layers = json.load(open(os.path.join(weights, "config.json")))["n_layer"]
    with tempfile.TemporaryDirectory() as scratch:
        config = os.path.join(scratch, "generate.yaml")
        write_config(config, weights, args)
        layouts = []
        for dp in range(1, args.nodes + 1):
            pp = args.nodes // dp
            if args.nodes % dp or pp > layers or dp > args.prompts:
                continue
            for groups in range(dp, min(args.prompts, 2 * dp * pp) + 1, dp):
                layouts.append((dp, pp, groups))
        rows = []
        for i, (dp, pp, groups) in enumerate(layouts):
            planned = subprocess.run([binary, "plan", config] + keys(dp, pp, groups), cwd=REPO,
                                     capture_output=True, text=True)
            found = PREDICTED.search(planned.stdout)
            predicted = float(found.group(1)) * UNIT[found.group(2)] if found else None
            out, _, error = run(binary, config, keys(dp, pp, groups), args.nodes)
            rows.append({"layout": (dp, pp, groups), "predicted": predicted,
                         "runs": [out["job_seconds"]] if out else [], "error": error})
            log(f"[{i + 1}/{len(layouts)}] dp {dp} x pp {pp}, {groups} groups: predicted {predicted}, "
                f"measured {out['job_seconds'] if out else error}")
        out, err, error = run(binary, config, [], args.nodes)
        found = CHOSEN.search(err or "")
        if error or not found:
            sys.exit(f"run with auto parallel failed: {error or 'no choice in its log'}")
        chosen_key = tuple(int(x) for x in found.groups())
        by_key = {r["layout"]: r for r in rows}
        if chosen_key not in by_key:
            sys.exit(f"run chose {chosen_key}, which the sweep did not list")
        chosen = by_key[chosen_key]
        auto_seconds = out["job_seconds"]
        measured = [r for r in rows if r["runs"]]
        again = sorted(measured, key=lambda r: r["runs"][0])[:5]
        if chosen not in again and chosen["runs"]:
            again.append(chosen)
        for r in again:
            for _ in range(3):
                out, _, _ = run(binary, config, keys(*r["layout"]), args.nodes)
                if out:
                    r["runs"].append(out["job_seconds"])
            log(f"again {r['layout']}: {r['runs']}")
    tokens = args.prompts * args.new_tokens
    for r in measured:
        r["measured"] = statistics.median(r["runs"])
    best = min(measured, key=lambda r: r["measured"])
    print("| layout | predicted job time | measured job time (runs) | measured tokens/s |")
    print("|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r["predicted"] or 1e30):
        dp, pp, groups = r["layout"]
        mark = (" **chosen**" if r is chosen else "") + (" **best measured**" if r is best else "")
        shown = (f"{1e3 * r['measured']:.1f} ms ({len(r['runs'])}) | {tokens / r['measured']:.0f}"
                 if r["runs"] else f"failed: {r['error']} |")
        print(f"| dp {dp} x pp {pp}, {groups} groups{mark} | {1e3 * r['predicted']:.2f} ms | {shown} |")
    print(f"\nchosen by run (auto parallel on): dp {chosen_key[0]} x pp {chosen_key[1]}, {chosen_key[2]} groups; "
          f"best measured / chosen (time): {best['measured']:.4f} / {chosen['measured']:.4f} = "
          f"{best['measured'] / chosen['measured']:.3f}; the auto-parallel run itself took {auto_seconds:.4f} s")
    order = lambda values: {i: rank for rank, i in enumerate(sorted(range(len(values)), key=lambda i: values[i]))}
    if len(measured) > 2:
        rp = order([r["predicted"] for r in measured])
        rm = order([r["measured"] for r in measured])
        n = len(measured)
        rho = 1 - 6 * sum((rp[i] - rm[i]) ** 2 for i in range(n)) / (n * (n * n - 1))
        print(f"Spearman rank correlation of predicted and measured job times over {n} layouts: {rho:.3f}")


if __name__ == "__main__":
    main()
