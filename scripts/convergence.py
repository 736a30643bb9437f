"""How many epochs each mechanism of a task needs, chosen on the validation split only.

For every mechanism: one training of ``--epochs`` (default 30) epochs at the task's own settings
(params.yaml, the task's overrides and preset; per-mechanism overrides are left out, so every
mechanism gets the same long run), with the weights of every epoch kept and, at every validation,
the task's metric on the validation split decoded as ``train.select_by: metric`` decodes it
(:mod:`pipeline.decoding.validation`: greedy unless ``train.select_beam`` says otherwise). Training is
exactly repeatable and no setting of the schedule depends on the number of epochs (plateau halving
reads the validation loss), so a run of N epochs is the first N epochs of this one: its model is the
epoch the selection rule picks among the first N. For both rules (``loss``: the lowest validation
loss; ``metric``: the best validation metric, the loss breaking ties) the script finds the fewest N
whose pick is within ``--margin`` points of the long run's pick, on the validation metric. Nothing
here reads the test split to choose: with ``--score-test`` it scores, after the choice, the models
both rules pick at the N of the task's own rule (or ``--test-at``) on the test split (beam search, as the evaluate
stage), which is how the rules themselves were compared (docs/training.md, "Which checkpoint").
Prints one table row per mechanism and writes everything to ``--json``.

    .venv/bin/python scripts/convergence.py --json docs/experiments/convergence/copy_rules_valid.json
    .venv/bin/python scripts/convergence.py --mechanisms copynet --epochs 30 --margin 2 --score-test

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
from pipeline.config.tasks import effective_params, selection_metric  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.decoding.validation import validation_scorer  # noqa: E402
from pipeline.io.shards import first_rows, read_split  # noqa: E402
from pipeline.runtime.device import compute_settings, resolve_device  # noqa: E402
from pipeline.training.job import TrainJob  # noqa: E402
from pipeline.training.loop import train  # noqa: E402

RULES = ("loss", "metric")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="copy_rules")
    p.add_argument("--mechanisms", nargs="+", default=None, help="default: params.yaml's mechanisms")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument(
        "--margin", type=float, default=2.0, help="validation points below the long run's that count as converged"
    )
    p.add_argument("--score-test", action="store_true", help="after choosing: the test figures of both rules' picks")
    p.add_argument(
        "--test-at", type=int, default=None, help="score the picks within N epochs (default: the task rule's N)"
    )
    p.add_argument("--params", default=None)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def pick(history: list[dict], n: int, rule: str, metric: str) -> int:
    """The epoch whose weights model.pt holds after an n-epoch run under ``rule``, as
    pipeline.training.loop chooses: the first strict best over epochs 0..n (history[0] is the
    untrained model, kept only if nothing beats it) by the validation loss, or by the validation
    metric with the loss breaking ties."""

    def key(row: dict) -> tuple[float, float]:
        return (-row[metric], row["valid_loss"]) if rule == "metric" else (row["valid_loss"], row["valid_loss"])

    best = history[0]
    for row in history[1 : n + 1]:
        if key(row) < key(best):
            best = row
    return best["epoch"]


def first_within(history: list[dict], epochs: int, rule: str, metric: str, margin: float) -> int:
    """The fewest epochs N whose pick's validation metric is within ``margin`` of the long run's pick's."""
    by_epoch = {row["epoch"]: row[metric] for row in history}
    reference = by_epoch[pick(history, epochs, rule, metric)]
    return next(n for n in range(1, epochs + 1) if by_epoch[pick(history, n, rule, metric)] >= reference - margin)


def study(raw: dict, paths: TaskPaths, mechanism: str, test, args) -> dict:
    """One mechanism: the long run with every epoch's weights and validation metric, then both rules."""
    # the task's settings and a variant's own sections, without the per-mechanism epochs of the default run
    params = effective_params(raw, args.task, mechanism, task_overrides=False)
    params["train"] = {
        **params["train"],
        "epochs": args.epochs,
        "patience": None,
        "max_steps": None,
        "select_by": "loss",
    }
    job = TrainJob(paths, mechanism, params)
    ev = EvalConfig.from_params(params)
    device = resolve_device(job.train_cfg.device)
    _, key, _ = selection_metric(raw, args.task)
    scorer = validation_scorer(
        read_split(paths.split("valid")),
        (job.src_vocab, job.tgt_vocab),
        ev,
        key,
        job.train_cfg.select_beam,
        device,
        limit=job.train_cfg.max_valid_examples,
    )
    model, _ = job.build_model()
    snapshots: dict[int, dict] = {}

    def keep(row: dict) -> None:
        snapshots[row["epoch"]] = copy.deepcopy(model.state_dict())
        row[scorer.name] = scorer(model)  # the loop's own row: it lands in the returned history

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
    task_rule = TrainJob(
        paths, mechanism, {**params, "train": {**params["train"], "select_by": "auto"}}
    ).train_cfg.select_by
    out = {"mechanism": mechanism, "task_rule": task_rule, "metric": scorer.name, "train_seconds": train_s}
    for rule in RULES:
        n = first_within(history, args.epochs, rule, scorer.name, args.margin)
        out[rule] = {
            "reference_epoch": pick(history, args.epochs, rule, scorer.name),
            "first_within": n,
            "pick_at_first_within": pick(history, n, rule, scorer.name),
        }
    n = args.test_at or out[task_rule]["first_within"]
    if args.score_test:  # after every choice: what each rule's pick at the task's N scores on test
        scores: dict[int, float] = {}
        split, test_key = "test", key
        for rule in RULES:
            epoch = pick(history, n, rule, scorer.name)
            if epoch not in scores:
                model.load_state_dict(snapshots[epoch])
                compute_settings(ev.threads, ev.deterministic)
                records = decode_table(
                    model.eval(), first_rows(test, ev.max_examples), job.src_vocab, job.tgt_vocab, ev, device
                )
                scores[epoch] = float(score_records(records, ev, split)[test_key])
            out[rule]["test_at_task_n"] = {"epoch": epoch, test_key: scores[epoch]}
    out["history"] = [{k: r[k] for k in ("epoch", "valid_loss", scorer.name)} for r in history]
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    raw = load_params(args.params)
    paths = TaskPaths(args.task, project_root(args.params))
    test = read_split(paths.split("test")) if args.score_test else None
    report = {"task": args.task, "epochs": args.epochs, "margin": args.margin, "rows": []}
    print(
        "| mechanism | task's rule | epochs (metric rule) | its pick | epochs (loss rule) | its pick | test: metric pick / loss pick |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for mechanism in args.mechanisms or list(raw["mechanisms"]):
        row = study(raw, paths, mechanism, test, args)
        report["rows"].append(row)
        m, lo = row["metric"], row["loss"]
        tests = (
            f"{next(iter(v for k, v in m['test_at_task_n'].items() if k != 'epoch')):.2f} / "
            f"{next(iter(v for k, v in lo['test_at_task_n'].items() if k != 'epoch')):.2f}"
            if args.score_test
            else "-"
        )
        print(
            f"| {mechanism} | {row['task_rule']} | {m['first_within']} | {m['pick_at_first_within']} | "
            f"{lo['first_within']} | {lo['pick_at_first_within']} | {tests} |",
            flush=True,
        )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
