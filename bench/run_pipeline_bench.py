#!/usr/bin/env python3
"""Pipeline benchmarks of the actor runtime (`libai-actor run`), on this host.

Every job runs as one process per node on 127.0.0.1 (nodes 1..n-1 in the background, node 0
in the foreground with --json). Sections (all by default):

  mixed     balanced pipeline on mixed devices: emulated slow-downs 1:1, 1:2, 1:4 (2 processes)
            and 1:2:4 (3 processes), synthetic stages; throughput of balance=measured against
            balance=uniform, balance=memory (free memory overridden: 8 GiB on the fast device,
            24 GiB on the slower ones), "oracle" (balance=measured with the true speeds as
            profile overrides) and the optimum (the best split over every device order and
            contiguous split under the true costs, by brute force over the simulator below).
  accuracy  the simulator's predicted job time against the measured one: (a) as `run`
            predicts it (costs from the measured device profiles), (b) the same simulator
            fed the true stage costs (layers x layer_seconds x slow-down), (c) fed the measured
            seconds per action (busy_seconds / compute actions), (d) the true costs plus the
            runtime's cost per action measured by the overhead section.
  overhead  cross-process runtime overhead: p = 2, 3, 4 stages of 2 ms (and of 0 ms), 32
            micro-batches, one step; job_seconds over the ideal (m + p - 1) x t.
  probe     (not by default) the overhead against the number of micro-batches, and with one
            stage 4x longer than the other.
  model     a random GPT-2 (12 layers, hidden 512, made with .venv's transformers in the build
            folder) generating at slow-downs 1:2, balance uniform vs measured vs memory.

Packets and credits between the processes travel on the nodes' data plane; --transport sets
train.cluster.transport for every job: shm (the default here: shared memory, as `auto` picks on
one host) or ucx (UCX over loopback, as between hosts).

Within a repetition the compared variants alternate (their order rotates each repetition);
tables give the median and min-max over repetitions. Python 3 standard library only (the
model section runs .venv/bin/python once to save the random model).

  bench/run_pipeline_bench.py --build build-benchmx                 # everything (~4-5 min)
  bench/run_pipeline_bench.py --build build-benchmx --sections mixed --reps 3
  bench/run_pipeline_bench.py --build build-benchmx --quick         # 1 repetition, smoke test
  bench/run_pipeline_bench.py --sections overhead --transport shm   # issue 5's overhead only
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "bench", "configs", "pipeline_synthetic.yaml")
MODEL_CONFIG = os.path.join(ROOT, "bench", "configs", "pipeline_generate_bench.yaml")
GIB = 1024 ** 3

# ---------------------------------------------------------------------------------------------
# The pipeline simulator (the same rules as schedule/simulate.cc for forward-only programs):
# every stage runs (step t, group g) t-major in a fixed order; (g, t) enters stage s > 0 when
# stage s - 1 has finished it, and stage 0 when the last stage has finished (g, t - 1).
# A packet takes `transfer` seconds between adjacent stages, and a decoding step's token
# `transfer + sample` from the last stage back to stage 0 (schedule::StageCosts). With `quota`,
# stage s may start an action only when its consumer has a free input slot (`quota` slots,
# freed when the consumer finishes that input): the runtime's credits (2 input slots after
# stage 0).


def simulate(costs, groups, steps, quota=None, transfer=0.0, sample=0.0):
    p = len(costs)
    items = groups * steps
    end = [[0.0] * items for _ in range(p)]
    start = [[0.0] * items for _ in range(p)]
    free = [0.0] * p
    for i in range(items):
        t, g = divmod(i, groups)
        for s in range(p):
            if s == 0:
                back = (transfer if p > 1 else 0.0) + sample
                ready = end[p - 1][(t - 1) * groups + g] + back if t > 0 else 0.0
            else:
                ready = end[s - 1][i] + transfer
            begin = max(ready, free[s])
            if quota is not None and s + 1 < p and i >= quota:
                begin = max(begin, end[s + 1][i - quota])
            start[s][i] = begin
            end[s][i] = free[s] = begin + costs[s]
    return max(end[p - 1][items - 1], max(free))


def compositions(total, parts):
    """Every split of `total` layers into `parts` non-empty contiguous stages (layer counts)."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0,) + cuts + (total,)
        yield [bounds[k + 1] - bounds[k] for k in range(parts)]


def optimum(layers, layer_seconds, slowdown, groups, steps):
    """The best simulated job time over all contiguous splits and orders of the devices along
    the pipeline, under the true costs: (seconds, layer counts per stage, device per stage)."""
    best = None
    for order in sorted(set(itertools.permutations(range(len(slowdown))))):
        for counts in compositions(layers, len(slowdown)):
            costs = [c * layer_seconds * slowdown[d] for c, d in zip(counts, order)]
            if best is not None and max(costs) * groups * steps >= best[0]:
                continue  # a lower bound already worse than the best: skip the replay
            t = simulate(costs, groups, steps)
            if best is None or t < best[0] - 1e-12:
                best = (t, counts, list(order))
    return best


def split_label(counts, order):
    """"14/7/3", or "3/7/14 on 2,1,0" when stage s does not run on device s."""
    label = "/".join(map(str, counts))
    if list(order) != list(range(len(order))):
        label += " on " + ",".join(map(str, order))
    return label


def counts_of(stage_of, p):
    counts = [0] * p
    for s in stage_of:
        counts[s] += 1
    return counts


def stage_nodes(doc):
    """The node (= device: one per node here) of each stage, from the plan."""
    plan = doc["plan"]
    if "stage_devices" in plan:  # [["node2:cpu:0"], ...]
        return [int(names[0].split(":")[0][len("node"):]) for names in plan["stage_devices"]]
    return [st["node"] for st in sorted(doc["stages"], key=lambda st: int(st["name"].split()[-1]))]


def split_of(doc, p):
    """(layer counts per stage, device per stage, label)."""
    counts = counts_of(doc["plan"]["stage_of"], p)
    order = stage_nodes(doc)
    return counts, order, split_label(counts, order)


# ---------------------------------------------------------------------------------------------
# Running jobs.


class Runner:
    def __init__(self, binary, port, timeout, stagger=0.0, transport="shm"):
        self.binary = binary
        self.transport = transport
        self.stagger = stagger  # seconds between the starts of nodes n-1, ..., 1, 0
        self.port = port
        self.timeout = timeout
        self.runs = 0
        self.failures = []

    def next_port(self):
        self.port += 1
        if self.port > 29999:
            self.port = 29700
        return self.port

    def run(self, config, nodes, overrides, attempts=2):
        for attempt in range(attempts):
            port = self.next_port()
            try:
                return self._run_once(config, nodes, overrides, port)
            except RuntimeError as e:
                self.failures.append(str(e))
                print("  ! run failed (attempt %d): %s" % (attempt + 1, e), flush=True)
        raise RuntimeError("a job failed %d times: %s" % (attempts, self.failures[-1]))

    def _run_once(self, config, nodes, overrides, port):
        base = [self.binary, "run", config] + list(overrides) + [
            "train.cluster.transport=" + self.transport]
        others = []
        logs = []
        try:
            for rank in range(1, nodes):
                if rank > 1 and self.stagger > 0:
                    time.sleep(self.stagger)
                log = tempfile.TemporaryFile()
                logs.append(log)
                others.append(subprocess.Popen(
                    base + ["--node-rank", str(rank), "--port", str(port)],
                    stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
            if nodes > 1 and self.stagger > 0:
                time.sleep(self.stagger)
            node0 = subprocess.run(base + ["--node-rank", "0", "--port", str(port), "--json"],
                                   capture_output=True, text=True, cwd=ROOT, timeout=self.timeout)
            for proc in others:
                proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise RuntimeError("timed out after %d s: %s" % (self.timeout, " ".join(base)))
        finally:
            for proc in others:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        self.runs += 1
        if node0.returncode != 0 or any(p.returncode != 0 for p in others):
            tails = []
            for log in logs:
                log.seek(0)
                tails.append(log.read().decode(errors="replace")[-400:])
            raise RuntimeError("exit %s / %s: %s %s" % (
                node0.returncode, [p.returncode for p in others], node0.stderr[-600:], tails))
        out = node0.stdout
        doc = json.loads(out[out.index("{"):])
        doc["load"] = os.getloadavg()[0]
        return doc


class Progress:
    def __init__(self, total):
        self.total = total
        self.done = 0
        self.start = time.time()

    def step(self, what):
        self.done += 1
        elapsed = time.time() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        print("[%3d/%d %5.0f s, ETA %4.0f s, load %.1f] %s" % (
            self.done, self.total, elapsed, eta, os.getloadavg()[0], what), flush=True)


def med(values):
    return statistics.median(values)


def fmt_range(values, digits=3, scale=1.0):
    v = [x * scale for x in values]
    if len(v) == 1:
        return "%.*f" % (digits, v[0])
    return "%.*f (%.*f-%.*f)" % (digits, med(v), digits, min(v), digits, max(v))


def profile_overrides(memory_gib=None, gflops=None):
    """train.cluster.profiles: what-if fields per device (node k's cpu:0)."""
    fields = {}
    for key, values, scale in (("free_memory_bytes", memory_gib, GIB), ("matmul_gflops", gflops, 1)):
        for k, v in enumerate(values or []):
            fields.setdefault(k, []).append("%s: %d" % (key, int(v * scale)))
    if not fields:
        return []
    return ["train.cluster.profiles={%s}" % ", ".join(
        "node%d:cpu:0: {%s}" % (k, ", ".join(f)) for k, f in sorted(fields.items()))]


def synthetic_overrides(p, layers, layer_seconds, slowdown, groups, steps, balance,
                        memory_gib=None, gflops=None):
    o = ["train.dist.pipeline_parallel_size=%d" % p, "train.cluster.nodes=%d" % p,
         "train.dist.pipeline_num_layers=%d" % layers, "job.layer_seconds=%g" % layer_seconds,
         "train.cluster.device_slowdown=[%s]" % ",".join("%g" % f for f in slowdown),
         "job.num_micro_batches=%d" % groups, "job.steps=%d" % steps,
         "train.dist.balance=%s" % balance]
    return o + profile_overrides(memory_gib, gflops)


def stage_costs_from_plan(doc, groups, steps):
    """The per-action stage costs `run`'s prediction used."""
    plan = doc["plan"]
    if "stage_seconds" in plan:
        return list(plan["stage_seconds"])
    return [u * plan["predicted_seconds"] / (groups * steps) for u in plan["predicted_utilisation"]]


def measured_action_seconds(doc, groups):
    """Busy seconds per compute action of each stage; `actions` counts the done packets too."""
    out = []
    for st in sorted(doc["stages"], key=lambda s: int(s["name"].split()[-1])):
        out.append(st["busy_seconds"] / max(1, st["actions"] - groups))
    return out


def check_simulator(doc, groups, steps, checks):
    """Replays run's own prediction with this file's simulator: they must agree."""
    costs = stage_costs_from_plan(doc, groups, steps)
    plan = doc["plan"]  # hop costs, should `run` report the ones it planned with
    mine = simulate(costs, groups, steps, transfer=plan.get("transfer_seconds", 0.0),
                    sample=plan.get("sample_seconds", 0.0))
    rel = abs(mine - doc["plan"]["predicted_seconds"]) / doc["plan"]["predicted_seconds"]
    checks.append(rel)
    return costs


# ---------------------------------------------------------------------------------------------
# Sections.

MIXED = [  # name, slow-downs, memory (GiB) per device
    ("1:1", [1, 1], [8, 24]),
    ("1:2", [1, 2], [8, 24]),
    ("1:4", [1, 4], [8, 24]),
    ("1:2:4", [1, 2, 4], [8, 24, 24]),
]
MIXED_LAYERS, MIXED_LAYER_SECONDS, MIXED_STEPS = 24, 0.002, 4
# "oracle": balance=measured with the profiles' GFLOP/s overridden by the true speeds
# (100 / slow-down): the balancer and the runtime without the profiling error.
VARIANTS = ["measured", "uniform", "memory", "oracle"]


def mixed_jobs(args):
    jobs = []
    for rep in range(args.reps):
        for name, slowdown, memory in MIXED:
            p = len(slowdown)
            order = VARIANTS[rep % 4:] + VARIANTS[:rep % 4]
            for balance in order:
                jobs.append((rep, name, slowdown, memory, balance, 2 * p, MIXED_STEPS))
    return jobs


def run_mixed(runner, progress, args, checks):
    results = {}
    for rep, name, slowdown, memory, balance, groups, steps in mixed_jobs(args):
        p = len(slowdown)
        oracle = balance == "oracle"
        doc = runner.run(CONFIG, p, synthetic_overrides(
            p, MIXED_LAYERS, MIXED_LAYER_SECONDS, slowdown, groups, steps,
            "measured" if oracle else balance, memory,
            [100.0 / f for f in slowdown] if oracle else None))
        plan_costs = check_simulator(doc, groups, steps, checks)
        split, order, label = split_of(doc, p)
        seen = [0.0] * p  # per device
        for c, n, d in zip(plan_costs, split, order):
            seen[d] = c / (n * MIXED_LAYER_SECONDS)
        results.setdefault((name, balance), []).append({
            "job": doc["job_seconds"], "split": split, "order": order, "label": label,
            "load": doc["load"], "profiled_slowdown": seen,
            "predicted": doc["plan"]["predicted_seconds"]})
        progress.step("mixed %s %-8s split %s job %.3f s" % (name, balance, label,
                                                              doc["job_seconds"]))
    rows = []
    for name, slowdown, memory in MIXED:
        p = len(slowdown)
        groups, steps = 2 * p, MIXED_STEPS
        items = groups * steps
        best_t, best_split, best_order = optimum(MIXED_LAYERS, MIXED_LAYER_SECONDS, slowdown,
                                                 groups, steps)
        row = {"name": name, "slowdown": slowdown, "memory_gib": memory, "items": items,
               "optimum_seconds": best_t, "optimum_split": split_label(best_split, best_order)}
        for balance in VARIANTS:
            runs = results[(name, balance)]
            row[balance] = runs
        # Per repetition ratios (the variants of one repetition ran side by side).
        reps = len(row["measured"])
        row["ratio_opt"] = [best_t / row["measured"][k]["job"] for k in range(reps)]
        row["ratio_uniform"] = [row["uniform"][k]["job"] / row["measured"][k]["job"]
                                for k in range(reps)]
        row["ratio_memory"] = [row["memory"][k]["job"] / row["measured"][k]["job"]
                               for k in range(reps)]
        row["ratio_oracle_opt"] = [best_t / row["oracle"][k]["job"] for k in range(reps)]
        row["split_quality"] = []  # optimum / simulated time of the split measured chose
        for r in row["measured"]:
            costs = [c * MIXED_LAYER_SECONDS * slowdown[d] for c, d in zip(r["split"], r["order"])]
            row["split_quality"].append(best_t / simulate(costs, groups, steps))
        rows.append(row)
    return rows


ACCURACY = [  # p, slow-downs
    (2, [1, 2]),
    (3, [1, 2, 4]),
    (4, [1, 1, 2, 4]),
]
ACC_LAYERS, ACC_LAYER_SECONDS = 24, 0.001


def accuracy_jobs(args):
    jobs = []
    for rep in range(args.acc_reps):
        for p, slowdown in ACCURACY:
            for groups in (p, 2 * p):
                for steps in (1, 20):
                    jobs.append((rep, p, slowdown, groups, steps))
    return jobs


def run_accuracy(runner, progress, args, checks):
    results = {}
    for rep, p, slowdown, groups, steps in accuracy_jobs(args):
        doc = runner.run(CONFIG, p, synthetic_overrides(
            p, ACC_LAYERS, ACC_LAYER_SECONDS, slowdown, groups, steps, "measured"))
        check_simulator(doc, groups, steps, checks)
        split, order, label = split_of(doc, p)
        true_costs = [n * ACC_LAYER_SECONDS * slowdown[d] for n, d in zip(split, order)]
        busy_costs = measured_action_seconds(doc, groups)
        job = doc["job_seconds"]
        r = {"job": job, "split": split, "order": order, "label": label, "load": doc["load"],
             "a": doc["plan"]["predicted_seconds"],
             "b": simulate(true_costs, groups, steps),
             "true_costs": true_costs,
             "c": simulate(busy_costs, groups, steps),
             "busy_over_true": [b / t for b, t in zip(busy_costs, true_costs)]}
        results.setdefault((p, groups, steps), []).append(r)
        progress.step("accuracy p %d groups %2d steps %2d split %s job %.3f s, predicted "
                      "%.3f / %.3f / %.3f" % (p, groups, steps, label, job, r["a"], r["b"], r["c"]))
    rows = []
    for (p, groups, steps), runs in results.items():
        rows.append({"p": p, "groups": groups, "steps": steps,
                     "slowdown": dict(ACCURACY)[p], "runs": runs})
    return rows


OVERHEAD = [4, 2, 3]  # p (p = 3 for the accuracy section's column (d))
OVH_STAGE_SECONDS, OVH_MICRO_BATCHES = 0.002, 32


def overhead_jobs(args):
    # Stages of 2 ms, and of 0 ms (the runtime's own cost per micro-batch, nothing to hide it).
    jobs = []
    for rep in range(args.reps):
        for p in (OVERHEAD if rep % 2 == 0 else OVERHEAD[::-1]):
            for t in ((OVH_STAGE_SECONDS, 0.0) if rep % 2 == 0 else (0.0, OVH_STAGE_SECONDS)):
                jobs.append((rep, p, t))
    return jobs


def run_overhead(runner, progress, args, checks):
    results = {}
    m = OVH_MICRO_BATCHES
    for rep, p, t in overhead_jobs(args):
        doc = runner.run(CONFIG, p, synthetic_overrides(p, p, t, [1] * p, m, 1, "uniform"))
        if t > 0:
            check_simulator(doc, m, 1, checks)
        busy = measured_action_seconds(doc, m)
        ideal = (m + p - 1) * t
        r = {"job": doc["job_seconds"], "finish": doc.get("finish_seconds", doc["job_seconds"]),
             "ideal": ideal, "ideal_busy": simulate(busy, m, 1),
             "action_ms": [b * 1e3 for b in busy], "load": doc["load"],
             "predicted": doc["plan"]["predicted_seconds"]}
        results.setdefault((p, t), []).append(r)
        progress.step("overhead p %d t %g ms job %.4f s ideal %.4f s (+%.2f ms per micro-batch)"
                      % (p, t * 1e3, r["job"], ideal, (r["job"] - r["ideal_busy"]) / m * 1e3))
    return [{"p": p, "t": t, "runs": results[(p, t)]} for p in OVERHEAD
            for t in (OVH_STAGE_SECONDS, 0.0)]


# Where the overhead comes from (section "probe", not in the default run): the excess over the
# simulated job (from busy seconds) against the number of micro-batches (fixed part vs per
# micro-batch), and with one stage 4x longer than the other (a bottleneck stage always has its
# next input waiting: what is left is the cost each action pays in series with its compute).
PROBE = [  # name, p, layer seconds (one layer per stage), slow-downs, micro-batches
    ("p2 2/2 ms", 2, 0.002, [1, 1], (8, 32, 128)),
    ("p4 2/2/2/2 ms", 4, 0.002, [1, 1, 1, 1], (8, 32, 128)),
    ("p2 0.5/2 ms", 2, 0.0005, [1, 4], (32,)),
    ("p2 2/0.5 ms", 2, 0.0005, [4, 1], (32,)),
]


def probe_jobs(args):
    return [(rep, name, p, ls, sd, m) for rep in range(args.acc_reps)
            for name, p, ls, sd, ms in PROBE for m in ms]


def run_probe(runner, progress, args, checks):
    results = {}
    for rep, name, p, ls, sd, m in probe_jobs(args):
        doc = runner.run(CONFIG, p, synthetic_overrides(p, p, ls, sd, m, 1, "uniform"))
        busy = measured_action_seconds(doc, m)
        sim = simulate(busy, m, 1)
        results.setdefault((name, m), []).append(
            {"job": doc["job_seconds"], "sim_busy": sim, "action_ms": [b * 1e3 for b in busy]})
        progress.step("probe %s m %d job %.4f s, busy-simulated %.4f s" % (
            name, m, doc["job_seconds"], sim))
    return [{"name": name, "m": m, "runs": runs} for (name, m), runs in results.items()]


MODEL_LAYERS, MODEL_HIDDEN, MODEL_HEADS, MODEL_NEW_TOKENS, MODEL_GROUPS = 12, 512, 8, 24, 4
MODEL_SLOWDOWN, MODEL_MEMORY = [1, 2], [8, 24]
MODEL_VARIANTS = ["measured", "uniform", "memory"]


def make_model(build):
    folder = os.path.join(build, "pipeline_bench", "gpt2-%dl-%d" % (MODEL_LAYERS, MODEL_HIDDEN))
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return folder
    python = os.path.join(ROOT, ".venv", "bin", "python")
    if not os.path.exists(python):
        return None
    script = """
import shutil, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
fixture = sys.argv[2]
cfg = GPT2Config.from_pretrained(fixture)
cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_inner, cfg.n_positions = %d, %d, %d, %d, 256
GPT2LMHeadModel(cfg).eval().save_pretrained(sys.argv[1])
for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "generation_config.json"):
    shutil.copy(fixture + "/" + f, sys.argv[1] + "/" + f)
""" % (MODEL_LAYERS, MODEL_HIDDEN, MODEL_HEADS, 4 * MODEL_HIDDEN)
    os.makedirs(folder, exist_ok=True)
    subprocess.run([python, "-c", script, folder,
                    os.path.join(ROOT, "tests", "data", "models", "gpt2")], check=True)
    return folder


def model_jobs(args):
    return [(rep, balance) for rep in range(args.model_reps)
            for balance in MODEL_VARIANTS[rep % 3:] + MODEL_VARIANTS[:rep % 3]]


def run_model(runner, progress, args, folder, checks):
    results = {}
    for rep, balance in model_jobs(args):
        o = ["model.weights=%s" % folder, "train.dist.balance=%s" % balance,
             "train.cluster.device_slowdown=[%s]" % ",".join("%g" % f for f in MODEL_SLOWDOWN)
             ] + profile_overrides(MODEL_MEMORY)
        doc = runner.run(MODEL_CONFIG, 2, o)
        seqs = doc.get("sequences", [])
        new_tokens = sum(len(s["token_ids"]) for s in seqs) - sum(
            len(s["prompt"]) if isinstance(s["prompt"], list) else 0 for s in seqs)
        split, order, label = split_of(doc, 2)
        busy = measured_action_seconds(doc, MODEL_GROUPS)
        r = {"job": doc["job_seconds"], "split": split, "order": order, "label": label,
             "tokens": new_tokens, "stage_seconds": doc["plan"].get("stage_seconds"),
             "predicted": doc["plan"]["predicted_seconds"], "action_ms": [b * 1e3 for b in busy],
             "token_ids": [s["token_ids"] for s in seqs], "load": doc["load"]}
        results.setdefault(balance, []).append(r)
        progress.step("model %-8s split %s job %.3f s, %d tokens, %.1f tok/s" % (
            balance, label, r["job"], new_tokens, new_tokens / r["job"]))
    return results


# ---------------------------------------------------------------------------------------------
# Report.


def machine_info():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=ROOT).stdout.strip()
        rev += " + uncommitted changes" if dirty else ""
    except OSError:
        rev = "?"
    return "%s, nproc %d, %s, %s, git %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        os.cpu_count(), model, platform.platform(), rev)


def report(mixed, accuracy, overhead, model, loads, checks, args, probe=None):
    print("\n## Results\n")
    print("machine: %s; data plane: %s" % (machine_info(), args.transport))
    print("load average (1 min) during the runs: %.1f-%.1f (start %.1f, end %.1f)" % (
        min(loads), max(loads), loads[0], loads[-1]))
    if checks:
        print("this script's simulator replays run's predictions to within %.2g (relative)"
              % max(checks))
    if mixed:
        print("\n### Mixed hardware: %d layers x %g ms, %d decode-like steps, groups = 2p; "
              "memory-proportional with the memories shown\n" % (
                  MIXED_LAYERS, MIXED_LAYER_SECONDS * 1e3, MIXED_STEPS))
        print("| slow-downs | memory GiB | items | optimum split | optimum items/s (sim) | "
              "measured split(s) | measured items/s | uniform items/s | memory split | "
              "memory items/s | measured / optimum | measured vs uniform | measured vs memory |"
              " split quality (sim) | oracle split(s) | oracle / optimum |")
        print("|---|---|---:|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|")
        for r in mixed:
            items = r["items"]
            splits = sorted({x["label"] for x in r["measured"]})
            print("| %s | %s | %d | %s | %.1f | %s | %s | %s | %s | %s | **%s** | %s | %s | %s | %s | %s |"
                  % (
                r["name"], ":".join("%g" % m for m in r["memory_gib"]), items,
                r["optimum_split"], items / r["optimum_seconds"], ", ".join(splits),
                fmt_range([items / x["job"] for x in r["measured"]], 1),
                fmt_range([items / x["job"] for x in r["uniform"]], 1),
                ", ".join(sorted({x["label"] for x in r["memory"]})),
                fmt_range([items / x["job"] for x in r["memory"]], 1),
                fmt_range(r["ratio_opt"]), fmt_range(r["ratio_uniform"], 2),
                fmt_range(r["ratio_memory"], 2), fmt_range(r["split_quality"]),
                ", ".join(sorted({x["label"] for x in r["oracle"]})),
                fmt_range(r["ratio_oracle_opt"])))
        print("\nprofiled slow-downs (what balance=measured saw; true ones in the first column):")
        for r in mixed:
            seen = [x["profiled_slowdown"] for x in r["measured"]]
            print("  %s: %s" % (r["name"], "; ".join(
                ":".join("%.2f" % f for f in s) for s in seen)))
    if accuracy:
        print("\n### Simulator accuracy: %d layers x %g ms, balance measured; predicted / "
              "measured job seconds\n" % (ACC_LAYERS, ACC_LAYER_SECONDS * 1e3))
        # (d): the true costs plus the runtime's own cost per micro-batch, measured with stages
        # of 2 ms in the overhead section (same p: job - simulated from busy, per micro-batch),
        # added to every stage's action.
        per_action = {}
        for r in overhead or []:
            if r["t"] > 0:
                per_action[r["p"]] = med([(x["job"] - x["ideal_busy"]) / OVH_MICRO_BATCHES
                                          for x in r["runs"]])
        if per_action:
            print("(d) adds per action: %s" % ", ".join(
                "p %d: %.2f ms" % (p, o * 1e3) for p, o in sorted(per_action.items())))
        print("| p | slow-downs | groups | steps | split(s) | measured s | (a) run's prediction "
              "/ measured | (b) true costs / measured | (c) busy per action / measured | (d) true "
              "costs + runtime cost per action / measured |")
        print("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for r in accuracy:
            runs = r["runs"]
            splits = sorted({x["label"] for x in runs})
            print("| %d | %s | %d | %d | %s | %s | %s | %s | %s | %s |" % (
                r["p"], ":".join("%g" % f for f in r["slowdown"]), r["groups"], r["steps"],
                ", ".join(splits),
                fmt_range([x["job"] for x in runs]),
                fmt_range([x["a"] / x["job"] for x in runs]),
                fmt_range([x["b"] / x["job"] for x in runs]),
                fmt_range([x["c"] / x["job"] for x in runs]),
                fmt_range([simulate([c + per_action[r["p"]] for c in x["true_costs"]], r["groups"],
                                    r["steps"]) / x["job"] for x in runs])
                if r["p"] in per_action else "-"))
        ratios = [x["busy_over_true"] for r in accuracy for x in r["runs"]]
        flat = [v for rr in ratios for v in rr]
        print("\nmeasured busy per action / true cost: median %.3f, %.3f-%.3f" % (
            med(flat), min(flat), max(flat)))
    if overhead:
        print("\n### Runtime overhead: %d micro-batches, stages of %g ms, one step, one process "
              "per stage\n" % (OVH_MICRO_BATCHES, OVH_STAGE_SECONDS * 1e3))
        print("job: from the start until the last output is on node 0; finished: until every "
              "stage has reported (after the groups' done packets)\n")
        print("| p | t ms | ideal (m+p-1) t s | measured job s | job / ideal | finished / ideal "
              "| ideal from busy s"
              " | job / ideal from busy | (job - ideal from busy) / m, ms | ms per action (busy) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in overhead:
            runs = r["runs"]
            t = r["t"]
            print("| %d | %g | %.3f | %s | %s | %s | %s | %s | %s | %s |" % (
                r["p"], t * 1e3, runs[0]["ideal"], fmt_range([x["job"] for x in runs], 4),
                "**" + fmt_range([x["job"] / x["ideal"] for x in runs]) + "**" if t > 0 else "-",
                fmt_range([x.get("finish", x["job"]) / x["ideal"] for x in runs]) if t > 0 else "-",
                fmt_range([x["ideal_busy"] for x in runs], 4),
                fmt_range([x["job"] / x["ideal_busy"] for x in runs]) if t > 0 else "-",
                fmt_range([(x["job"] - x["ideal_busy"]) / OVH_MICRO_BATCHES * 1e3
                           for x in runs], 2),
                " / ".join("%.3f" % med([x["action_ms"][s] for x in runs])
                           for s in range(r["p"]))))
    if probe:
        print("\n### Probe: excess = measured job - job simulated from busy seconds per action\n")
        print("| stages | micro-batches m | measured job s | simulated from busy s | excess ms | "
              "excess / m, ms | ms per action (busy) |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for r in probe:
            runs = r["runs"]
            print("| %s | %d | %s | %s | %s | %s | %s |" % (
                r["name"], r["m"], fmt_range([x["job"] for x in runs], 4),
                fmt_range([x["sim_busy"] for x in runs], 4),
                fmt_range([(x["job"] - x["sim_busy"]) * 1e3 for x in runs], 1),
                fmt_range([(x["job"] - x["sim_busy"]) / r["m"] * 1e3 for x in runs], 2),
                " / ".join("%.2f" % med([x["action_ms"][s] for x in runs])
                           for s in range(len(runs[0]["action_ms"])))))
    if model:
        print("\n### GPT-2 (%d layers, hidden %d, random weights) generation, slow-downs %s, "
              "%d groups x %d new tokens\n" % (MODEL_LAYERS, MODEL_HIDDEN,
                                               ":".join(map(str, MODEL_SLOWDOWN)), MODEL_GROUPS,
                                               MODEL_NEW_TOKENS))
        print("| balance | split(s) | job s | tokens/s | vs measured | ms per action (busy) | "
              "ms per action (plan) | predicted s |")
        print("|---|---|---:|---:|---:|---|---|---:|")
        base = model["measured"]
        for balance in MODEL_VARIANTS:
            runs = model[balance]
            splits = sorted({x["label"] for x in runs})
            planned = [x["stage_seconds"] for x in runs if x.get("stage_seconds")]
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                balance, ", ".join(splits),
                fmt_range([x["job"] for x in runs]),
                fmt_range([x["tokens"] / x["job"] for x in runs], 1),
                fmt_range([base[k]["job"] / runs[k]["job"] for k in range(len(runs))], 2),
                " / ".join("%.2f" % med([x["action_ms"][s] for x in runs]) for s in range(2)),
                " / ".join("%.2f" % (med([c[s] for c in planned]) * 1e3) for s in range(2))
                if planned else "-",
                fmt_range([x["predicted"] for x in runs])))
        same = all(x["token_ids"] == base[0]["token_ids"] for b in MODEL_VARIANTS
                   for x in model[b])
        print("\ntoken ids identical across splits and runs: %s" % same)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="build folder with bin/libai-actor")
    parser.add_argument("--sections", default="mixed,accuracy,overhead,model",
                        help="comma-separated; also: probe (where the overhead goes, ~1 min)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (mixed, overhead)")
    parser.add_argument("--acc-reps", type=int, default=3, help="repetitions (accuracy)")
    parser.add_argument("--model-reps", type=int, default=3, help="repetitions (model)")
    parser.add_argument("--stagger", type=float, default=0.0,
                        help="seconds between the nodes' starts (their profiles then run apart)")
    parser.add_argument("--quick", action="store_true", help="one repetition of everything")
    parser.add_argument("--port", type=int, default=29700, help="first port (one per job)")
    parser.add_argument("--timeout", type=int, default=90, help="seconds per job")
    parser.add_argument("--json", help="write the raw results here (default BUILD/"
                                       "pipeline_bench/results.json)")
    parser.add_argument("--transport", default="shm", choices=["shm", "ucx"],
                        help="the nodes' data plane (train.cluster.transport)")
    args = parser.parse_args()
    if args.quick:
        args.reps = args.acc_reps = args.model_reps = 1
    build = os.path.abspath(args.build)
    binary = os.path.join(build, "bin", "libai-actor")
    if not os.path.exists(binary):
        sys.exit("no %s: build it first (cmake --build %s --target libai-actor)" % (
            binary, args.build))
    sections = set(args.sections.split(","))
    runner = Runner(binary, args.port, args.timeout, args.stagger, args.transport)
    folder = None
    if "model" in sections:
        folder = make_model(build)
        if folder is None:
            print("model section skipped: no .venv with transformers to make the model")
            sections.discard("model")
    total = ((len(mixed_jobs(args)) if "mixed" in sections else 0)
             + (len(accuracy_jobs(args)) if "accuracy" in sections else 0)
             + (len(overhead_jobs(args)) if "overhead" in sections else 0)
             + (len(model_jobs(args)) if "model" in sections else 0)
             + (len(probe_jobs(args)) if "probe" in sections else 0))
    print("machine: %s; data plane: %s" % (machine_info(), args.transport))
    print("%d jobs; load average %s" % (total, " ".join("%.2f" % x for x in os.getloadavg())),
          flush=True)
    progress = Progress(total)
    loads = [os.getloadavg()[0]]
    checks = []
    mixed = run_mixed(runner, progress, args, checks) if "mixed" in sections else None
    loads.append(os.getloadavg()[0])
    accuracy = run_accuracy(runner, progress, args, checks) if "accuracy" in sections else None
    loads.append(os.getloadavg()[0])
    overhead = run_overhead(runner, progress, args, checks) if "overhead" in sections else None
    loads.append(os.getloadavg()[0])
    model = run_model(runner, progress, args, folder, []) if "model" in sections else None
    loads.append(os.getloadavg()[0])
    probe = run_probe(runner, progress, args, checks) if "probe" in sections else None
    loads.append(os.getloadavg()[0])
    report(mixed, accuracy, overhead, model, loads, checks, args, probe)
    out = args.json or os.path.join(build, "pipeline_bench", "results.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"machine": machine_info(), "transport": args.transport, "mixed": mixed, "accuracy": accuracy,
                   "overhead": overhead, "model": model, "probe": probe, "loads": loads,
                   "failures": runner.failures}, f, indent=1, default=str)
    print("\nraw results: %s (%d jobs, %d failed attempts, %.0f s)" % (
        out, runner.runs, len(runner.failures), time.time() - progress.start))


if __name__ == "__main__":
    main()
