"""How many epochs each mechanism of a task needs to come within a margin of its long-run figure.

For every mechanism: one training of ``--epochs`` (default 30) epochs at the task's own settings
(params.yaml, the task's overrides and preset; per-mechanism overrides are left out, so every
mechanism gets the same long run), with the weights of every epoch kept. Training is exactly
repeatable (seeded batches and dropout, deterministic kernels, pinned math libraries), and no
setting of the schedule depends on the number of epochs (plateau halving reads the validation
history), so a run of N epochs is the first N epochs of this one: its model is the best validation
epoch among the first N. The script scores that model on the test split as the evaluate stage does
(beam search, the task's metric) for the N it needs: the long run (N = ``--epochs``, the reference),
then N = 5, 10, ... and a bisection down to the first N whose figure is within ``--margin`` points
of the reference. Prints one table row per mechanism and writes everything to ``--json``.

    .venv/bin/python scripts/convergence.py --json docs/experiments/convergence/copy_rules.json
    .venv/bin/python scripts/convergence.py --mechanisms copynet --epochs 30 --margin 2

Needs the task's shards and vocabularies (``dvc repro vocab@copy_rules``). Runs in its own process
with the math libraries pinned as the pipeline's stages are (pipeline.runtime.math_pins).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from pipeline.config.params import load_params, project_root  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.tasks import effective_params, primary_metric  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.shards import read_split  # noqa: E402
from pipeline.runtime.device import compute_settings, resolve_device  # noqa: E402
from pipeline.training.job import TrainJob  # noqa: E402
from pipeline.training.loop import train  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="copy_rules")
    p.add_argument("--mechanisms", nargs="+", default=None, help="default: params.yaml's mechanisms")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--margin", type=float, default=2.0, help="points below the reference that count as converged")
    p.add_argument("--params", default=None)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def best_epoch_within(history: list[dict], n: int) -> int:
    """The epoch whose weights model.pt would hold after an n-epoch run: the first strict minimum of
    the validation loss over epochs 1..n (history[0] is the untrained model; pipeline.training.loop keeps a
    model only when it improves on the best so far, the untrained model included)."""
    best, epoch = history[0]["valid_loss"], 0
    for row in history[1 : n + 1]:
        if row["valid_loss"] < best:
            best, epoch = row["valid_loss"], row["epoch"]
    return epoch


def study(raw: dict, paths: TaskPaths, mechanism: str, test, split: str, key: str, args) -> dict:
    """One mechanism: the long run, then the scores the bisection needs."""
    # the task's settings and a variant's own sections, without the per-mechanism epochs of the default run
    params = effective_params(raw, args.task, mechanism, task_overrides=False)
    params["train"] = {**params["train"], "epochs": args.epochs, "patience": None, "max_steps": None}
    job = TrainJob(paths, mechanism, params)
    ev = EvalConfig.from_params(params)
    device = resolve_device(job.train_cfg.device)
    model, _ = job.build_model()
    snapshots: dict[int, dict] = {}

    def keep(row: dict) -> None:
        snapshots[row["epoch"]] = copy.deepcopy(model.state_dict())

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as ckpt:
        history = train(
            model,
            job.splits["train"],
            job.splits["valid"],
            job.train_cfg,
            Path(ckpt),
            model_config=vars(job.model_cfg),
            data_hash=job.data_hash,
            on_validate=keep,
            progress=False,
        )
    train_s = time.perf_counter() - started
    scores: dict[int, float] = {}

    def score(n: int) -> float:
        epoch = best_epoch_within(history, n)
        if epoch not in scores:
            model.load_state_dict(snapshots[epoch])
            compute_settings(ev.threads, ev.deterministic)
            records = decode_table(model.eval(), test, job.src_vocab, job.tgt_vocab, ev, device)
            scores[epoch] = float(score_records(records, ev, split)[key])
        return scores[epoch]

    reference = score(args.epochs)

    def within(n: int) -> bool:
        return score(n) >= reference - args.margin

    coarse = [n for n in range(5, args.epochs, 5)] + [args.epochs]
    first = next(n for n in coarse if within(n))
    low = max(0, first - 5)  # the coarse step below passed nothing: bisect in (low, first]
    while first - low > 1:
        mid = (low + first) // 2
        low, first = (low, mid) if within(mid) else (mid, first)
    return {
        "mechanism": mechanism,
        "reference": reference,
        "reference_best_epoch": best_epoch_within(history, args.epochs),
        "first_within": first,
        "first_within_score": score(first),
        "scores_by_best_epoch": scores,
        "valid_loss": [r["valid_loss"] for r in history],
        "train_seconds": train_s,
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    raw = load_params(args.params)
    paths = TaskPaths(args.task, project_root(args.params))
    split, key, _ = primary_metric(raw, args.task)
    test = read_split(paths.split(split))
    report = {"task": args.task, "epochs": args.epochs, "margin": args.margin, "metric": f"{split}.{key}", "rows": []}
    print(f"| mechanism | {args.epochs}-epoch {split} {key} | best epoch | first N within {args.margin} | its {key} |")
    print("|---|---:|---:|---:|---:|")
    for mechanism in args.mechanisms or list(raw["mechanisms"]):
        row = study(raw, paths, mechanism, test, split, key, args)
        report["rows"].append(row)
        print(
            f"| {mechanism} | {row['reference']:.2f} | {row['reference_best_epoch']} | {row['first_within']} | "
            f"{row['first_within_score']:.2f} |",
            flush=True,
        )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
