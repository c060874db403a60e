#!/usr/bin/env python3
"""Auto parallel against an exhaustive sweep, measured the same way (issue 21).

`libai-actor plan --json` of configs/examples/auto_parallel.yaml (one node of --devices devices
here) lists every layout that fits with its predicted samples/s; this script then trains every
one of them for a few steps with `libai-actor train` (graph mode, the layout's keys set,
auto_parallel off) and reads the samples/s the trainer logs per step (the median of the steps
after the first two). A second round re-measures the chosen layout and the five fastest of the
first round three more times each (the median of the four runs counts), because this host's
timings are noisy. Prints a markdown table and the chosen layout's measured throughput over the
best measured one.

    python3 bench/run_auto_parallel_sweep.py --build build [--devices 2] [--steps 8]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = os.path.join(REPO, "configs", "examples", "auto_parallel.yaml")
STEP = re.compile(r"iter (\d+)/(\d+) .*?([\d.]+) samples/s")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def dataset(binary, build):
    prefix = os.path.join(build, "demo", "shakespeare")
    if not os.path.exists(prefix + "_text_document.idx"):
        subprocess.run([binary, "preprocess", "--input", os.path.join(REPO, "data", "shakespeare", "plays.txt"),
                        "--tokenizer", os.path.join(REPO, "configs", "demo", "char_gpt"), "--output-prefix",
                        prefix, "--split-paragraphs", "--append-eod"], check=True, cwd=REPO)
    return prefix + "_text_document"


def measure(binary, base, overrides, steps):
    with tempfile.TemporaryDirectory() as out:
        command = [binary, "train", CONFIG] + base + overrides + [
            "graph.auto_parallel.enabled=false", f"train.train_iter={steps}", "train.log_period=1",
            f"train.output_dir={out}", "train.checkpointer.period=100000"]
        run = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if run.returncode != 0:
            return None, run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed"
        rates = [float(m.group(3)) for m in STEP.finditer(run.stdout + run.stderr) if int(m.group(1)) > 2]
        return (statistics.median(rates) if rates else None), None


def overrides_of(layout):
    o = [f"train.dist.data_parallel_size={layout['data_parallel_size']}",
         f"train.dist.tensor_parallel_size={layout['tensor_parallel_size']}",
         f"train.dist.pipeline_parallel_size={layout['pipeline_parallel_size']}",
         f"train.train_micro_batch_size={layout['micro_batch_size']}",
         f"train.num_accumulation_steps={layout['num_accumulation_steps']}",
         f"train.dist.pipeline_schedule={layout['pipeline_schedule']}",
         f"train.dist.virtual_pipeline_size={layout['virtual_pipeline_size']}",
         f"train.activation_checkpoint.enabled={'true' if layout['activation_checkpoint'] else 'false'}",
         f"train.zero_optimization.enabled={'true' if layout['zero_stage'] > 0 else 'false'}"]
    if layout["zero_stage"] > 0:
        o.append(f"train.zero_optimization.stage={layout['zero_stage']}")
    return o


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    binary = os.path.join(build, "bin", "libai-actor")
    base = ["train.cluster.nodes=1", f"train.cluster.devices_per_node={args.devices}",
            f"data.prefix={dataset(binary, build)}"]
    plan = json.loads(subprocess.run([binary, "plan", CONFIG, "--json"] + base, cwd=REPO, check=True,
                                     capture_output=True, text=True).stdout)
    layouts = plan["ranked"]
    log(f"{len(layouts)} layouts fit; measuring each for {args.steps} steps")
    rows = []
    for i, entry in enumerate(layouts):
        rate, error = measure(binary, base, overrides_of(entry["layout"]), args.steps)
        rows.append({"layout": entry["layout"]["description"], "overrides": overrides_of(entry["layout"]),
                     "predicted": entry["estimate"]["samples_per_second"], "runs": [rate] if rate else [],
                     "error": error})
        log(f"[{i + 1}/{len(layouts)}] {rows[-1]['layout']}: predicted {rows[-1]['predicted']:.1f}, "
            f"measured {rate if rate else error}")
    measured = [r for r in rows if r["runs"]]
    again = sorted(measured, key=lambda r: -r["runs"][0])[:5]
    if rows[0] not in again and rows[0]["runs"]:
        again.append(rows[0])
    for r in again:
        for _ in range(3):
            rate, _ = measure(binary, base, r["overrides"], args.steps)
            if rate:
                r["runs"].append(rate)
        log(f"again {r['layout']}: {r['runs']}")
    for r in measured:
        r["measured"] = statistics.median(r["runs"])
    best = max(measured, key=lambda r: r["measured"])
    chosen = rows[0]
    print(f"| layout (ranked by prediction) | predicted samples/s | measured samples/s (runs) |")
    print("|---|---|---|")
    for r in rows:
        shown = f"{r['measured']:.1f} ({len(r['runs'])})" if r["runs"] else f"failed: {r['error']}"
        mark = " **chosen**" if r is chosen else (" **best measured**" if r is best else "")
        print(f"| {r['layout']}{mark} | {r['predicted']:.1f} | {shown} |")
    if chosen.get("measured"):
        print(f"\nchosen / best measured: {chosen['measured']:.1f} / {best['measured']:.1f} = "
              f"{chosen['measured'] / best['measured']:.3f}")
    ranks = sorted(range(len(measured)), key=lambda i: -measured[i]["measured"])
    top = [measured[i]["layout"] for i in ranks[:3]]
    print("fastest measured: " + "; ".join(top))


if __name__ == "__main__":
    main()
