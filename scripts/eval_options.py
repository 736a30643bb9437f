"""Score a task's trained models under other evaluate settings, side by side with the figures the
evaluate stage wrote: ``replace_unk``, ``ban_unk`` and ``average_last``.

For every mechanism and every setting, the model (model.pt, or with ``average_last=K`` the mean of
the run's last K step checkpoints, as the evaluate stage builds it) is decoded on each split with the
task's evaluate settings plus that one change, and scored as the evaluate stage scores it
(pipeline.decoding: decode_table, score_records). The "as evaluated" row is read, not decoded: the
stage's own metrics.json and predictions (data/eval/runs/<task>/<mechanism>; left out where the
evaluate stage has not run), so each other row differs from it by its one setting. Runs in a
project checkout after ``dvc repro``, with the math libraries pinned as the stages pin them:

    .venv/bin/python scripts/eval_options.py --task gigaword --splits test \\
        --settings replace_unk=true ban_unk=true average_last=3 --json unk_options.json

Prints a markdown table per split (the task's columns, output <unk> count, mean length) and writes
every figure to ``--json``. The task's columns are those its comparison page shows for the split's
metric (:func:`split_columns`): exact match top1 and top<k>, ROUGE rouge1/2/L, BLEU bleu ...;
``--columns`` shows others.
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from pipeline.config.params import project_root  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.schema import check_params_file  # noqa: E402
from pipeline.config.tasks import effective_params  # noqa: E402
from pipeline.config.validation import SettingsError  # noqa: E402
from pipeline.data.add_task import METRICS  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.shards import first_rows, read_split  # noqa: E402
from pipeline.reporting.compare import CompareConfig  # noqa: E402
from pipeline.runtime.device import compute_settings, resolve_device  # noqa: E402
from pipeline.training.averaging import snapshots, write_average  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.vocab.vocabulary import Vocab  # noqa: E402

UNK = "<unk>"
ROUGE_COLUMNS = ["rouge1", "rouge2", "rougeL"]  # a --json of an older version, which recorded no columns


class Refused(Exception):
    """A request this script cannot run: printed alone (no traceback), exit code 2, before anything is decoded."""


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` of the evaluate section (the value read as YAML: true, 3, ...)."""
    key, sep, value = text.partition("=")
    if not sep or key not in EvalConfig.__dataclass_fields__:
        raise Refused(
            f"--settings: {text!r} is not <evaluate key>=<value> (keys: {sorted(EvalConfig.__dataclass_fields__)})"
        )
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError as err:
        raise Refused(f"--settings: {text!r}: the value is not readable ({err})") from err


def unk_stats(records: list[dict]) -> dict:
    outputs = [r["pred"] for r in records]
    return {
        "unk_tokens": sum(o.count(UNK) for o in outputs),
        "lines_with_unk": sum(UNK in o for o in outputs),
        "empty_outputs": sum(not o for o in outputs),
    }


def score(model, paths, mechanism, split, vocabs, cfg, device) -> dict:
    table = first_rows(read_split(paths.split(split)), cfg.max_examples)
    start = time.perf_counter()
    records = decode_table(model, table, *vocabs, cfg, device, desc=f"{mechanism} {split}")
    metrics = score_records(records, cfg, split, tgt_vocab=vocabs[1])
    return {**metrics, **unk_stats(records), "seconds": round(time.perf_counter() - start, 1)}


def plan(args, params: dict, paths: TaskPaths) -> tuple[list[str], list[tuple[str, object]], list[str]]:
    """What will be decoded, all of it checked before anything is: the mechanisms (those given, each of
    which must be trained; by default those of params.yaml that are trained, the others named as
    skipped), the settings (each a valid evaluate setting for every mechanism: types and ranges; for
    ``average_last=K``, K step checkpoints kept) and the splits (their shards present). Returns the
    mechanisms, the settings and the lines saying what was skipped."""
    if args.task not in (params.get("tasks") or {}) and not paths.shards.is_dir():
        raise Refused(f"--task {args.task}: not a task of params.yaml ({', '.join(params.get('tasks') or {})})")
    for name in ("src.vocab", "tgt.vocab"):
        if not (paths.vocab / name).is_file():
            raise Refused(f"{paths.vocab / name} is absent: run `dvc repro vocab@{args.task}` first")
    missing_splits = [s for s in args.splits if not paths.split(s).is_dir()]
    if missing_splits:
        raise Refused(
            f"--splits: no shards for {', '.join(missing_splits)} under {paths.shards} (run prepare@{args.task})"
        )
    trained = lambda m: (paths.checkpoints(m) / "model.pt").is_file()
    notes = []
    if args.mechanisms:
        unknown = [m for m in args.mechanisms if not trained(m)]
        if unknown:
            raise Refused(
                f"--mechanisms: {', '.join(unknown)} not trained for {args.task} (no "
                f"{paths.checkpoints(unknown[0]) / 'model.pt'}): run `dvc repro train@{args.task}-{unknown[0]}` first"
            )
        mechanisms = list(args.mechanisms)
    else:
        mechanisms = [m for m in params["mechanisms"] if trained(m)]
        skipped = [m for m in params["mechanisms"] if not trained(m)]
        if skipped:
            notes.append(f"skipped (not trained for {args.task}): {', '.join(skipped)}")
        if not mechanisms:
            raise Refused(f"no mechanism of params.yaml is trained for {args.task}: run `dvc repro` first")
    settings = [parse_setting(s) for s in args.settings]
    for mechanism in mechanisms:
        eff = effective_params(params, args.task, mechanism)
        for key, value in settings:
            try:
                EvalConfig.from_params({**eff, "evaluate": {**eff["evaluate"], key: value}})
            except ValueError as err:
                raise Refused(f"--settings {key}={value!r}: {err}") from err
            if key == "average_last" and value:
                kept = len(snapshots(paths.checkpoints(mechanism)))
                if kept < value:
                    raise Refused(
                        f"--settings average_last={value}: {mechanism} kept {kept} step checkpoint(s) "
                        f"({paths.checkpoints(mechanism) / 'steps'}); train with train.keep_checkpoints >= {value}"
                    )
    return mechanisms, settings, notes


def split_columns(params: dict, task: str, split: str) -> list[str]:
    """The score columns of ``split``'s table, as the task's comparison page picks them for the split's
    metric (:func:`pipeline.reporting.compare.comparison_markdown`): exact match: ``top1`` and
    ``top<evaluate.topk>``; a text metric: the task's ``compare.columns``, else the columns ``tasks add``
    gives that metric (:data:`pipeline.data.add_task.METRICS`: rouge1/2/L, bleu, bleu and sari)."""
    eff = effective_params(params, task)
    evaluate = EvalConfig.from_params(eff)
    kind = evaluate.metric_for(split)
    if kind == "exact_match":
        return ["top1", f"top{evaluate.topk}"]
    return list(CompareConfig.from_params(eff).columns) or list(METRICS.get(kind, ([kind], ""))[0])


def as_evaluated(evaluated: Path, splits: list[str]) -> dict | None:
    """The evaluate stage's own figures for each of ``splits`` it scored (its metrics.json and
    predictions); None when it has not run. A split it did not score is left out (shown as '-')."""
    if not (evaluated / "metrics.json").exists():
        return None
    metrics = json.loads((evaluated / "metrics.json").read_text())
    rows = {}
    for split in splits:
        predictions = evaluated / "predictions" / f"{split}.jsonl"
        if not isinstance(metrics.get(split), dict) or "n" not in metrics[split] or not predictions.is_file():
            continue  # not scored by the stage (another evaluate.splits)
        lines = [json.loads(line) for line in predictions.read_text().splitlines()]
        rows[split] = {**metrics[split], **unk_stats(lines)}
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default=None)
    p.add_argument("--mechanisms", nargs="+", default=None, help="default: params.yaml's trained mechanisms")
    p.add_argument("--splits", nargs="+", default=["test"])
    p.add_argument("--settings", nargs="+", default=[], help="evaluate overrides, one per row: key=value")
    p.add_argument("--params", default=None)
    p.add_argument(
        "--columns", nargs="+", default=None, help="the metrics shown (default: the task's, by each split's metric)"
    )
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--print", dest="print_json", type=Path, default=None, help="only print the tables of this --json")
    args = p.parse_args(argv)
    try:
        return run(args)
    except Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def run(args) -> int:
    if args.print_json:
        print_tables(json.loads(args.print_json.read_text()), args.columns)
        return 0
    if not args.task:
        raise Refused("--task is needed (unless --print)")
    try:
        params = check_params_file(args.params)  # every setting checked first
    except SettingsError as err:
        raise Refused(str(err)) from None
    paths = TaskPaths(args.task, project_root(args.params))
    mechanisms, settings, notes = plan(args, params, paths)
    try:
        columns = {s: list(args.columns) if args.columns else split_columns(params, args.task, s) for s in args.splits}
    except ValueError as err:  # the task's evaluate or compare settings
        raise Refused(f"the columns of {args.task}: {err}") from err
    for note in notes:
        print(note, flush=True)
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    report: dict = {"task": args.task, "splits": args.splits, "columns": columns, "rows": {}}
    for mechanism in mechanisms:
        eff = effective_params(params, args.task, mechanism)
        base = EvalConfig.from_params(eff)
        device = resolve_device(base.device)
        compute_settings(base.threads, base.deterministic)
        rows = {}
        evaluated = as_evaluated(paths.evaluation(mechanism), args.splits)
        if evaluated is not None:  # the evaluate stage's own figures, when it has run
            rows["as evaluated"] = evaluated
        plain, _ = load_model(paths.checkpoints(mechanism) / "model.pt", mechanism, device, vocabs)
        for key, value in settings:
            cfg = EvalConfig.from_params({**eff, "evaluate": {**eff["evaluate"], key: value}})
            model = plain
            if key == "average_last" and value:
                with tempfile.TemporaryDirectory() as tmp:
                    write_average(paths.checkpoints(mechanism), value, Path(tmp) / "model.pt")
                    model, _ = load_model(Path(tmp) / "model.pt", mechanism, device, vocabs)
            label = f"{key}={value}"
            rows[label] = {s: score(model, paths, mechanism, s, vocabs, cfg, device) for s in args.splits}
            brief = {s: {k: v for k, v in m.items() if isinstance(v, int | float)} for s, m in rows[label].items()}
            print(f"{mechanism} {label}: {brief}", flush=True)
            report["rows"][mechanism] = rows
            if args.json:  # after every row: a long run stopped half-way keeps what it scored
                args.json.write_text(json.dumps(report, indent=1))
        report["rows"][mechanism] = rows
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print_tables(report, args.columns)
    return 0


def print_tables(report: dict, chosen: list[str] | None) -> None:
    """One markdown table per split: ``chosen`` columns, else those the report recorded per split."""
    for split in report["splits"]:
        columns = chosen or (report.get("columns") or {}).get(split) or ROUGE_COLUMNS
        print(f"\n### {report['task']} {split}\n")
        print("| mechanism | setting | " + " | ".join(columns) + " | <unk> tokens | lines with <unk> | length |")
        print("|---|---|" + "---:|" * (len(columns) + 3))
        for mechanism, rows in report["rows"].items():
            for label, by_split in rows.items():
                m = by_split.get(split)
                if m is None:  # the evaluate stage did not score this split
                    print(f"| {mechanism} | {label} | " + " | ".join(["-"] * (len(columns) + 3)) + " |")
                    continue
                cells = ["-" if m.get(c) is None else f"{m[c]:.2f}" for c in columns]
                length = m.get("copy", {}).get("outputs", {}).get("length")
                shown_length = "-" if length is None else f"{length:.1f}"
                print(
                    f"| {mechanism} | {label} | "
                    + " | ".join(cells)
                    + f" | {m['unk_tokens']} | {m['lines_with_unk']} | {shown_length} |"
                )


if __name__ == "__main__":
    sys.exit(main())
