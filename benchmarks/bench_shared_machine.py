"""A training on a shared machine: its tokens/s alone and beside a second 2-thread job, under OpenMP's
wait policies.

The train and evaluate stages run with a fixed thread count (``threads: 2``, for the same bits on
every machine). PyTorch's CPU kernels and MKL run on GNU OpenMP, whose idle threads spin (busy-wait)
at the end of each parallel region before they sleep. Alone that costs nothing; on a machine whose
cores are all taken, a spinning thread burns the time slice that the thread it waits for needs, so a
training beside another 2-thread job on 2 cores can run many times slower than half its speed.
``OMP_WAIT_POLICY=PASSIVE`` (set for every stage process where the pipeline loads) makes idle threads
sleep at once; the work each thread does, and so every result, is the same bits
(tests/pipeline/runtime/test_omp_wait_policy.py checks).

Each measurement runs fresh processes, each training CopyNet as the default task does (emb 64, hidden
128, vocabulary 1,000, batch 32, 2 threads, the math pins of the stages) for ``--seconds`` after a
warm-up, and reports target tokens/s over the whole window and per ``--window`` seconds (the swings):

    .venv/bin/python benchmarks/bench_shared_machine.py                  # ~4 min on 2 cores
    .venv/bin/python benchmarks/bench_shared_machine.py --seconds 60 --repeats 2 --json shared.json

Scenarios: ``alone`` (one training), ``shared`` (two trainings at once, both measured), each under
the wait policy unset (libgomp's default: spin, then sleep) and ``PASSIVE``.
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries

pin_math_libraries()  # as the stages pin them, before torch loads (the worker processes inherit them)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from benchmarks.bench_training import batches_for  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.registry import build_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
POLICIES = {"unset": None, "PASSIVE": "PASSIVE"}


def worker(seconds: float, window: float, threads: int, start_at: float) -> dict:
    """Train until ``seconds`` have passed after a warm-up; tokens/s overall and per window."""
    torch.set_num_threads(threads)
    vocab, batches = batches_for(1000, 16, 32, 0)
    torch.manual_seed(0)
    model = build_model("copynet", ModelConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb=64, hidden=128))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch) -> int:
        loss = -model(batch).sum() / batch.n_tokens
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return batch.n_tokens

    for batch in batches[:2]:  # warm-up
        step(batch)
    while time.time() < start_at:  # the scenario's processes start measuring together
        time.sleep(0.01)
    rates, tokens, total, i = [], 0, 0, 0
    start = window_start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        n = step(batches[i % len(batches)])
        tokens, total, i = tokens + n, total + n, i + 1
        now = time.perf_counter()
        if now - window_start >= window:
            rates.append(tokens / (now - window_start))
            tokens, window_start = 0, now
    return {"tok_s": total / (time.perf_counter() - start), "windows": rates, "steps": i}


def run_scenario(policy: str | None, n: int, args) -> list[dict]:
    """``n`` trainings at once, in fresh processes under ``policy``; their results."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    env["PYTHONPATH"] = str(REPO)
    start_at = time.time() + 25  # imports and warm-up of every process first
    cmd = [sys.executable, __file__, "--worker", "--seconds", str(args.seconds), "--window", str(args.window),
           "--threads", str(args.threads), "--start-at", str(start_at)]  # fmt: skip
    procs = [subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=args.seconds + 300)
        if proc.returncode != 0:
            raise RuntimeError(f"worker failed ({proc.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per training")
    p.add_argument("--window", type=float, default=2.0, help="seconds per reported window")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.seconds, args.window, args.threads, args.start_at)), flush=True)
        return
    results = []
    for _ in range(args.repeats):
        for scenario, n in (("alone", 1), ("shared", 2)):
            for label, policy in POLICIES.items():
                for i, r in enumerate(run_scenario(policy, n, args)):
                    results.append({"scenario": scenario, "policy": label, "process": i, **r})
                    w = r["windows"] or [r["tok_s"]]
                    print(
                        f"{scenario:6} OMP_WAIT_POLICY={label:7} process {i}: {r['tok_s']:7.0f} tok/s "
                        f"(per {args.window:g} s: min {min(w):.0f}, median {statistics.median(w):.0f}, max {max(w):.0f})",
                        flush=True,
                    )
    print(
        f"\n| scenario | OMP_WAIT_POLICY | tok/s of each training (min - max over {args.repeats} runs) | per-{args.window:g}-s windows: min / median / max |"
    )
    print("|---|---|---:|---:|")
    for scenario in ("alone", "shared"):
        for label in POLICIES:
            rows = [r for r in results if r["scenario"] == scenario and r["policy"] == label]
            rates = [r["tok_s"] for r in rows]
            w = [x for r in rows for x in r["windows"]] or rates
            print(
                f"| {scenario} | {label} | {min(rates):,.0f} - {max(rates):,.0f} | "
                f"{min(w):,.0f} / {statistics.median(w):,.0f} / {max(w):,.0f} |"
            )
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args), "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
