#!/usr/bin/env python3
"""Auto parallel against an exhaustive sweep, measured the same way (issue 21).

`libai-actor plan --json` of configs/examples/auto_parallel.yaml (--nodes node processes of
--devices devices each, on this host) lists every layout that fits with its predicted
samples/s; this script then trains every one of them for a few steps with `libai-actor train`
(graph mode, the layout's keys set, auto_parallel off; with --nodes > 1 one process per node on
loopback) and reads the samples/s the trainer logs per step (the median of the steps after the
first two). The chosen layout is the one `libai-actor train` itself chooses with auto parallel
on (on a cluster: node 0's search over the devices every node measured), read from its log. A
second round re-measures the chosen layout and the five fastest of the first round three more
times each (the median of the four runs counts), because this host's timings are noisy. Prints
a markdown table and the chosen layout's measured throughput over the best measured one.

    python3 bench/run_auto_parallel_sweep.py --build build [--nodes 1] [--devices 2] [--steps 8]
        [--slowdown "[1, 3, 1, 3]"] [--batch 32] [--fix train.zero_optimization.enabled=false]

--slowdown sets train.cluster.device_slowdown (emulated unequal devices, one entry per device
of the cluster); --fix sets a searched key (a constraint of the search and of the sweep alike).
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
CONFIG = os.path.join(REPO, "configs", "examples", "auto_parallel.yaml")
STEP = re.compile(r"iter (\d+)/(\d+) .*?([\d.]+) samples/s")
CHOSEN = re.compile(r"auto parallel: (.*?) \(of \d+ layouts")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def dataset(binary, build):
    prefix = os.path.join(build, "demo", "shakespeare")
    if not os.path.exists(prefix + "_text_document.idx"):
        subprocess.run([binary, "preprocess", "--input", os.path.join(REPO, "data", "shakespeare", "plays.txt"),
                        "--tokenizer", os.path.join(REPO, "configs", "demo", "char_gpt"), "--output-prefix",
                        prefix, "--split-paragraphs", "--append-eod"], check=True, cwd=REPO)
    return prefix + "_text_document"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(binary, base, overrides, steps, nodes):
    """Trains on `nodes` processes; returns node 0's output and the first failure, if any."""
    with tempfile.TemporaryDirectory() as out:
        command = [binary, "train", CONFIG] + base + overrides + [
            f"train.train_iter={steps}", "train.log_period=1", f"train.output_dir={out}",
            "train.checkpointer.period=100000"]
        port = str(free_port())
        runs = [subprocess.Popen(command + (["--node-rank", str(r), "--port", port] if nodes > 1 else []),
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in range(nodes)]
        outputs = [run.communicate(timeout=600) for run in runs]
        error = None
        for run, (_, err) in zip(runs, outputs):
            if run.returncode != 0 and error is None:
                error = err.strip().splitlines()[-1] if err.strip() else "failed"
        return outputs[0][0] + outputs[0][1], error


def rate_of(text):
    rates = [float(m.group(3)) for m in STEP.finditer(text) if int(m.group(1)) > 2]
    return statistics.median(rates) if rates else None


def measure(binary, base, overrides, steps, nodes):
    text, error = train(binary, base, overrides + ["graph.auto_parallel.enabled=false"], steps, nodes)
    return (None, error) if error else (rate_of(text), None)


def overrides_of(layout):
    o = [f"train.dist.data_parallel_size={layout['data_parallel_size']}",
         f"train.dist.tensor_parallel_size={layout['tensor_parallel_size']}",
         f"train.dist.pipeline_parallel_size={layout['pipeline_parallel_size']}",
         f"train.train_micro_batch_size={layout['micro_batch_size']}",
         f"train.num_accumulation_steps={layout['num_accumulation_steps']}",
         f"train.dist.pipeline_schedule={layout['pipeline_schedule']}",
         f"train.dist.virtual_pipeline_size={layout['virtual_pipeline_size']}",
         f"train.activation_checkpoint.enabled={'true' if layout['activation_checkpoint'] else 'false'}",
         f"train.zero_optimization.enabled={'true' if layout['zero_stage'] > 0 else 'false'}",
         f"train.dist.balance={layout['balance']}"]
    if layout["zero_stage"] > 0:
        o.append(f"train.zero_optimization.stage={layout['zero_stage']}")
    return o


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--devices", type=int, default=2, help="devices per node")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32, help="train.global_batch_size")
    parser.add_argument("--slowdown", default=None, help='train.cluster.device_slowdown, e.g. "[1, 3]"')
    parser.add_argument("--fix", action="append", default=[], help="KEY=VALUE: a searched key fixed")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    binary = os.path.join(build, "bin", "libai-actor")
    base = [f"train.cluster.nodes={args.nodes}", f"train.cluster.devices_per_node={args.devices}",
            f"train.global_batch_size={args.batch}", f"data.prefix={dataset(binary, build)}",
            "train.cluster.token=sweep"] + args.fix
    if args.slowdown:
        base.append(f"train.cluster.device_slowdown={args.slowdown}")
    plan = json.loads(subprocess.run([binary, "plan", CONFIG, "--json"] + base, cwd=REPO, check=True,
                                     capture_output=True, text=True).stdout)
    layouts = plan["ranked"]
    log(f"{len(layouts)} layouts fit; measuring each for {args.steps} steps on {args.nodes} process(es)")
    rows = []
    for i, entry in enumerate(layouts):
        rate, error = measure(binary, base, overrides_of(entry["layout"]), args.steps, args.nodes)
        rows.append({"layout": entry["layout"]["description"], "overrides": overrides_of(entry["layout"]),
                     "predicted": entry["estimate"]["samples_per_second"], "runs": [rate] if rate else [],
                     "error": error})
        log(f"[{i + 1}/{len(layouts)}] {rows[-1]['layout']}: predicted {rows[-1]['predicted']:.1f}, "
            f"measured {rate if rate else error}")
    # The layout `train` chooses with auto parallel on, and its own throughput in that run.
    text, error = train(binary, base, [], args.steps, args.nodes)
    found = CHOSEN.search(text)
    if error or not found:
        sys.exit(f"train with auto parallel failed: {error or 'no choice in its log'}")
    by_name = {r["layout"]: r for r in rows}
    if found.group(1) not in by_name:
        sys.exit(f"train chose {found.group(1)}, which plan did not list")
    chosen = by_name[found.group(1)]
    auto_rate = rate_of(text)
    log(f"train chose {chosen['layout']} (plan ranked first: {rows[0]['layout']}); "
        f"that run measured {auto_rate}")
    measured = [r for r in rows if r["runs"]]
    again = sorted(measured, key=lambda r: -r["runs"][0])[:5]
    if chosen not in again and chosen["runs"]:
        again.append(chosen)
    for r in again:
        for _ in range(3):
            rate, _ = measure(binary, base, r["overrides"], args.steps, args.nodes)
            if rate:
                r["runs"].append(rate)
        log(f"again {r['layout']}: {r['runs']}")
    for r in measured:
        r["measured"] = statistics.median(r["runs"])
    best = max(measured, key=lambda r: r["measured"])
    print(f"| layout (ranked by prediction) | predicted samples/s | measured samples/s (runs) |")
    print("|---|---|---|")
    for r in rows:
        shown = f"{r['measured']:.1f} ({len(r['runs'])})" if r["runs"] else f"failed: {r['error']}"
        mark = (" **chosen**" if r is chosen else "") + (" **best measured**" if r is best else "")
        print(f"| {r['layout']}{mark} | {r['predicted']:.1f} | {shown} |")
    if chosen.get("measured"):
        print(f"\nchosen (by train, auto parallel on): {chosen['layout']}; plan ranked first: {rows[0]['layout']}")
        print(f"chosen / best measured: {chosen['measured']:.1f} / {best['measured']:.1f} = "
              f"{chosen['measured'] / best['measured']:.3f}; the auto-parallel run itself measured "
              f"{auto_rate:.1f} samples/s" if auto_rate else "")
    predicted = [r["predicted"] for r in measured]
    observed = [r["measured"] for r in measured]
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out
    if len(measured) > 2:
        rp, ro = ranks(predicted), ranks(observed)
        n = len(measured)
        rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(rp, ro)) / (n * (n * n - 1))
        ratios = sorted(o / p for o, p in zip(observed, predicted))
        print(f"Spearman rank correlation of predicted and measured over {n} layouts: {rho:.3f}; "
              f"measured / predicted median {statistics.median(ratios):.3f} "
              f"(range {ratios[0]:.3f}-{ratios[-1]:.3f})")
    ranks = sorted(range(len(measured)), key=lambda i: -measured[i]["measured"])
    top = [measured[i]["layout"] for i in ranks[:3]]
    print("fastest measured: " + "; ".join(top))


if __name__ == "__main__":
    main()
