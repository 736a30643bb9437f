"""Beyond one machine: the prepare flow on a Dask cluster, and training on two torchrun nodes.

prepare  ``--pairs`` generated pairs (benchmarks/support_qa.py: train/valid/test TSVs, 80/10/10)
         through the prepare flow (flows/prepare.py, the parallel reader, ``--tokenizer``): the local
         runner with one worker (chunks in the flow's own thread: the baseline), then a loopback
         Dask cluster (benchmarks/loopback_cluster.py: a ``dask scheduler`` and N ``dask worker``
         processes, one thread each) with 1 and with 2 workers, through ``parallel.dask_address``.
         Each configuration is warmed up on a small corpus first (Prefect's server, the workers'
         imports), then timed; pairs/s = pairs read / seconds, and the CPU seconds of the flow's
         process and the workers (pairs per CPU second does not depend on what else shares the
         machine). The shards must be identical.
train    the toy copy task (benchmarks/toy.py) trained by the train stage's worker with the default
         run's model sizes (``--mechanism``, emb 64 / hidden 128, ``--batch`` pairs per process,
         one thread per process): one process, then two torchrun nodes of one process each on
         loopback (``pipeline.stages.train.launch`` as the stage's machine, ``pipeline.stages.train_node``
         as the other): target tokens/s of all processes (the history's ``tokens_per_s``, training
         time only, the first interval left out as warm-up), and the CPU seconds of every process.

    scripts/with_prefect_server.sh .venv/bin/python benchmarks/bench_distributed.py       # both sections, ~40 min on 2 cores
    scripts/with_prefect_server.sh .venv/bin/python benchmarks/bench_distributed.py --sections prepare --pairs 20000
    .venv/bin/python benchmarks/bench_distributed.py --sections train --json out.json    # no Prefect needed

Every figure on one machine: two Dask workers or two nodes share its cores (on this project's
2-core machine, at most 2x is possible, and less while anything else runs); say the machine's load
with the figures (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from benchmarks.loopback_cluster import LoopbackCluster
from benchmarks.support_qa import write_corpus
from benchmarks.toy import TASK, free_port, write_toy_task
from flows.prepare import prepare_corpus
from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.stages.train import launch, worker_args
from pipeline.training.job import TrainJob

REPO = Path(__file__).resolve().parent.parent


def children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def processes_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the running processes ``pids`` have used so far."""
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# --------------------------------------------------------------------------- #
# prepare on Dask
# --------------------------------------------------------------------------- #


def prepare_params(raw: Path, tokenizer: str, runner: str, workers: int, address: str | None) -> dict:
    return {
        "tasks": {"qa": str(raw)},
        "prepare": {
            "qa": {
                "reader": "parallel",
                "train_file": "train.tsv",
                "valid_file": "valid.tsv",
                "test_file": "test.tsv",
                "src_col": "question",
                "tgt_col": "answer",
                "tokenizer": tokenizer,
            }
        },
        "parallel": {"task_runner": runner, "workers": workers, "dask_address": address},
    }


def prepare_once(work: Path, raw: Path, tokenizer: str, runner: str, workers: int, address: str | None) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(prepare_params(raw, tokenizer, runner, workers, address)))
    started, cpu = time.perf_counter(), time.process_time()
    manifests = prepare_corpus("qa", str(work / "params.yaml"))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    pairs = sum(m["rows_in"] for m in manifests.values())
    hashes = {s: m["content_sha256"] for s, m in manifests.items()}
    return {"seconds": seconds, "flow_cpu_s": cpu, "pairs": pairs, "pairs_per_s": pairs / seconds, "hashes": hashes}


def bench_prepare(work: Path, pairs: int, tokenizer: str) -> list[dict]:
    raw, small = work / "raw", work / "raw_small"
    write_corpus(raw, pairs, seed=0)
    write_corpus(small, 2000, seed=1)
    rows = []

    def measure(label: str, runner: str, workers: int, address: str | None, pids: list[int]) -> None:
        prepare_once(work / "warm", small, tokenizer, runner, workers, address)  # not timed
        before, workers_cpu = load(), processes_cpu(pids)
        result = prepare_once(work / "out", raw, tokenizer, runner, workers, address)
        result["workers_cpu_s"] = processes_cpu(pids) - workers_cpu
        result["cpu_s"] = result["flow_cpu_s"] + result["workers_cpu_s"]  # the flow's process and the workers
        rows.append({"configuration": label, "load_before": before, "load_after": load(), **result})
        print(
            f"{label}: {result['pairs_per_s']:,.0f} pairs/s ({result['seconds']:.1f} s, {result['cpu_s']:.1f} CPU s), "
            f"load {before} -> {load()}"
        )

    measure("local runner, 1 worker (baseline)", "local", 1, None, [])
    for n in (1, 2):
        with LoopbackCluster(n, work / f"cluster{n}", cwd=REPO) as cluster:
            pids = [proc.pid for proc in cluster.workers.values()]
            measure(f"Dask, {n} worker{'s' if n > 1 else ''} (loopback)", "dask", n, cluster.address, pids)
    same = all(r["hashes"] == rows[0]["hashes"] for r in rows)
    for r in rows:
        r["same_shards"] = same
    return rows


# --------------------------------------------------------------------------- #
# training on two nodes
# --------------------------------------------------------------------------- #


def train_params(mechanism: str, batch: int, steps: int, nnodes: int, endpoint: str | None) -> dict:
    return {
        "tasks": {TASK: "data"},
        "mechanisms": [mechanism],
        "prepare": {TASK: {"reader": "copynet_rules"}},
        "model": {"emb": 64, "hidden": 128},
        "train": {
            "epochs": 1000,
            "max_steps": steps,
            "validate_every": max(1, steps // 5),
            "batch_size": batch,
            "seed": 0,
            "threads": 1,
            "device": "cpu",
            "deterministic": True,
            "nproc": 1,
            "nnodes": nnodes,
            "rdzv_endpoint": endpoint,
            "rdzv_timeout": 300,
        },
        "tracking": {"experiment_prefix": ""},
    }


def launch_as_stage(mechanism: str, params_path: str = "params.yaml") -> None:
    """What the train stage runs on its machine once its MLflow run is open: this machine's torchrun
    agent, as the machine that writes the outputs."""
    params = effective_params(load_params(params_path), TASK, mechanism)
    job = TrainJob(TaskPaths(TASK, project_root(params_path)), mechanism, params)
    launch(job, worker_args(job, params_path, None), owner=True)


def tokens_per_s(log: str) -> float:
    """The median over the validation intervals after the first (warm-up) of all processes' target
    tokens/s, as the writing process prints them (history.json leaves wall-clock figures out)."""
    rates = [float(m) for m in re.findall(r"^step \d+ \(epoch \d+\): train_loss .*\((\d+) tok/s\)$", log, re.M)]
    if len(rates) < 2:
        raise RuntimeError(f"fewer than two validation intervals in the log:\n{log[-3000:]}")
    return statistics.median(rates[1:])


def train_once(root: Path, mechanism: str, batch: int, steps: int, nnodes: int) -> dict:
    nodes = [root / f"node{i}" for i in range(nnodes)]
    endpoint = f"127.0.0.1:{free_port()}" if nnodes > 1 else None
    for node in nodes:
        if not (node / "data/vocab" / TASK).exists():
            write_toy_task(node)
        shutil.rmtree(node / "data/checkpoints", ignore_errors=True)
        shutil.rmtree(node / "data/train_state", ignore_errors=True)
        (node / "params.yaml").write_text(yaml.safe_dump(train_params(mechanism, batch, steps, nnodes, endpoint)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    task = ["--task", TASK, "--mechanism", mechanism, "--params", "params.yaml"]
    if nnodes == 1:  # the train stage's worker, as one process (no torchrun)
        cmds = [[sys.executable, "-m", "pipeline.stages.train", *task]]
    else:  # the stage's machine (its launch, without the MLflow run) and the joining one
        owner = f"from benchmarks.bench_distributed import launch_as_stage; launch_as_stage({mechanism!r})"
        cmds = [[sys.executable, "-c", owner], [sys.executable, "-m", "pipeline.stages.train_node", *task]]
    cpu, before, started = children_cpu(), load(), time.perf_counter()
    procs = [
        subprocess.Popen(cmd, cwd=node, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd, node in zip(cmds, nodes)
    ]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("training failed:\n" + "\n\n".join(o[-3000:] for o in outs))
    history = json.loads((nodes[0] / "data/checkpoints" / TASK / mechanism / "history.json").read_text())
    return {
        "processes": nnodes,
        "wall_s": time.perf_counter() - started,
        "cpu_s": children_cpu() - cpu,
        "tokens_per_s": tokens_per_s(outs[0]),
        "final_valid_loss": history[-1]["valid_loss"],
        "load_before": before,
        "load_after": load(),
    }


def bench_train(work: Path, mechanism: str, batch: int, steps: int, repeats: int) -> list[dict]:
    rows = []
    for _ in range(repeats):  # alternating one process and two nodes, so a change in load hits both
        for nnodes in (1, 2):
            row = train_once(work / f"train{nnodes}", mechanism, batch, steps, nnodes)
            rows.append({"configuration": "1 process" if nnodes == 1 else "2 nodes x 1 process", **row})
            print(f"{rows[-1]['configuration']}: {row['tokens_per_s']:,.0f} tok/s, load {row['load_before']}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=["prepare", "train"], choices=["prepare", "train"])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument(
        "--tokenizer", default="moses", help="the parallel reader's tokenizer (moses: CPU-bound chunks)"
    )
    parser.add_argument("--mechanism", default="copynet")
    parser.add_argument("--batch", type=int, default=32, help="pairs per batch and process")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    if "prepare" in args.sections and not os.environ.get("PREFECT_API_URL"):
        # Without a server address each Dask worker would start a temporary Prefect server of its
        # own (the flow's temporary one is not an address the task carries), and time that.
        parser.error(
            "the prepare section needs a Prefect server: scripts/with_prefect_server.sh python benchmarks/bench_distributed.py ..."
        )
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    results: dict = {"cpus": os.cpu_count(), "load_start": load()}
    try:
        if "prepare" in args.sections:
            results["prepare"] = rows = bench_prepare(work / "prepare", args.pairs, args.tokenizer)
            base = rows[0]["pairs_per_s"]
            print(f"\nprepare, {args.pairs:,} generated pairs, tokenizer {args.tokenizer} ({os.cpu_count()} CPUs)\n")
            print(
                "| configuration | seconds | pairs/s | vs baseline | CPU s (flow + workers) | pairs per CPU s | load before -> after |"
            )
            print("|---|---:|---:|---:|---:|---:|---|")
            for r in rows:
                print(
                    f"| {r['configuration']} | {r['seconds']:.1f} | {r['pairs_per_s']:,.0f} | "
                    f"{r['pairs_per_s'] / base:.2f}x | {r['cpu_s']:.1f} | {r['pairs'] / r['cpu_s']:,.0f} | "
                    f"{r['load_before']} -> {r['load_after']} |"
                )
            print(f"\nshards identical in every configuration: {rows[0]['same_shards']}")
        if "train" in args.sections:
            results["train"] = rows = bench_train(work / "train", args.mechanism, args.batch, args.steps, args.repeats)
            print(
                f"\ntraining, {args.mechanism}, emb 64 / hidden 128, batch {args.batch} per process, gloo on the CPU\n"
            )
            print("| configuration | tokens/s (all processes) | vs 1 process | CPU s | wall s | load before -> after |")
            print("|---|---:|---:|---:|---:|---|")
            ones = [r["tokens_per_s"] for r in rows if r["processes"] == 1]
            for r in rows:
                print(
                    f"| {r['configuration']} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / statistics.median(ones):.2f}x "
                    f"| {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['load_before']} -> {r['load_after']} |"
                )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
