"""Score a task's trained models under other evaluate settings, side by side with the figures the
evaluate stage wrote: ``replace_unk``, ``ban_unk`` and ``average_last`` (issue 21's and 22's tables).

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
every figure to ``--json``.
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from pipeline.config.params import load_params, project_root  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.tasks import effective_params  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.shards import first_rows, read_split  # noqa: E402
from pipeline.runtime.device import compute_settings, resolve_device  # noqa: E402
from pipeline.training.averaging import write_average  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.vocab.vocabulary import Vocab  # noqa: E402

UNK = "<unk>"


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` of the evaluate section (the value read as YAML: true, 3, ...)."""
    key, sep, value = text.partition("=")
    if not sep or key not in EvalConfig.__dataclass_fields__:
        raise SystemExit(f"--settings: {text!r} is not <evaluate key>=<value>")
    return key, yaml.safe_load(value)


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default=None)
    p.add_argument("--mechanisms", nargs="+", default=None, help="default: params.yaml's mechanisms")
    p.add_argument("--splits", nargs="+", default=["test"])
    p.add_argument("--settings", nargs="+", default=[], help="evaluate overrides, one per row: key=value")
    p.add_argument("--params", default=None)
    p.add_argument("--columns", nargs="+", default=["rouge1", "rouge2", "rougeL"], help="the metrics shown")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--print", dest="print_json", type=Path, default=None, help="only print the tables of this --json")
    args = p.parse_args(argv)
    if args.print_json:
        print_tables(json.loads(args.print_json.read_text()), args.columns)
        return

    if not args.task:
        raise SystemExit("--task is needed (unless --print)")
    params = load_params(args.params)
    paths = TaskPaths(args.task, project_root(args.params))
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    settings = [parse_setting(s) for s in args.settings]
    report: dict = {"task": args.task, "splits": args.splits, "rows": {}}
    for mechanism in args.mechanisms or params["mechanisms"]:
        eff = effective_params(params, args.task, mechanism)
        base = EvalConfig.from_params(eff)
        device = resolve_device(base.device)
        compute_settings(base.threads, base.deterministic)
        rows = {}
        evaluated = paths.evaluation(mechanism)
        if (evaluated / "metrics.json").exists():  # the evaluate stage's own figures, when it has run
            metrics = json.loads((evaluated / "metrics.json").read_text())
            rows["as evaluated"] = {}
            for split in args.splits:
                lines = (evaluated / "predictions" / f"{split}.jsonl").read_text().splitlines()
                lines = [json.loads(line) for line in lines]
                rows["as evaluated"][split] = {**metrics[split], **unk_stats(lines)}
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
    print_tables(report, args.columns)


def print_tables(report: dict, columns: list[str]) -> None:
    for split in report["splits"]:
        print(f"\n### {report['task']} {split}\n")
        print("| mechanism | setting | " + " | ".join(columns) + " | <unk> tokens | lines with <unk> | length |")
        print("|---|---|" + "---:|" * (len(columns) + 3))
        for mechanism, rows in report["rows"].items():
            for label, by_split in rows.items():
                m = by_split[split]
                cells = ["-" if m.get(c) is None else f"{m[c]:.2f}" for c in columns]
                length = m.get("copy", {}).get("outputs", {}).get("length")
                shown_length = "-" if length is None else f"{length:.1f}"
                print(
                    f"| {mechanism} | {label} | "
                    + " | ".join(cells)
                    + f" | {m['unk_tokens']} | {m['lines_with_unk']} | {shown_length} |"
                )


if __name__ == "__main__":
    main()
