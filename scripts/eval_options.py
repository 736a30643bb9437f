"""Score a task's trained models under other evaluate settings, side by side with the figures the
evaluate stage wrote: ``replace_unk``, ``ban_unk`` and ``average_last``.

For every mechanism and every setting, the model (model.pt, or with ``average_last=K`` the mean of
the run's last K step checkpoints, as the evaluate stage builds it) is decoded on each split with the
task's evaluate settings plus that one change, and scored as the evaluate stage scores it
(pipeline.decoding: decode_table, score_records). The "as evaluated" row is read, not decoded: the
stage's own metrics.json and predictions (data/eval/runs/<task>/<mechanism>; left out where the
evaluate stage has not run), so each other row differs from it by its one setting. Runs in a
project checkout after ``dvc repro``, with the math libraries pinned as the stages pin them:

    .venv/bin/python scripts/eval_options.py --task gigaword \\
        --settings replace_unk=true ban_unk=true average_last=3 --json unk_options.json

The splits are the validation split by default: choose an option there, then report it on test
once (``--splits valid test``, or set it in ``evaluate`` and rerun the evaluate stage).

Prints a line per decoded row (its examples and seconds), then a markdown table per split (the task's
columns, the output <unk> tokens, the lines with <unk>, the empty outputs, the mean length; under it
the names of the rows' other figures) and writes every figure to ``--json``. The task's columns are those its comparison page shows for the split's
metric (:func:`split_columns`): exact match top1 and top<k>, ROUGE rouge1/2/L, BLEU bleu ...;
``--columns`` shows others.
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from pipeline.config.arguments import OneLineParser, run_command  # noqa: E402
from pipeline.config.checks import check_serving  # noqa: E402
from pipeline.config.params import project_root  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.schema import check_params_file  # noqa: E402
from pipeline.config.tasks import effective_params  # noqa: E402
from pipeline.config.validation import SettingsError  # noqa: E402
from pipeline.data.add_task import METRICS  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.files import write_text_atomic  # noqa: E402
from pipeline.io.shards import first_rows, read_split  # noqa: E402
from pipeline.reporting.compare import CompareConfig  # noqa: E402
from pipeline.runtime.device import compute_settings, resolve_device  # noqa: E402
from pipeline.training.averaging import snapshots, write_average  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.vocab.vocabulary import Vocab  # noqa: E402

PROG = "copyseq eval-options"  # how users run this script

UNK = "<unk>"
ROUGE_COLUMNS = ["rouge1", "rouge2", "rougeL"]  # a --json of an older version, which recorded no columns
UNK_COLUMNS = ("unk_tokens", "lines_with_unk", "empty_outputs")  # unk_stats: in every row beside the metrics


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
    counts = (sum(o.count(UNK) for o in outputs), sum(UNK in o for o in outputs), sum(not o for o in outputs))
    return dict(zip(UNK_COLUMNS, counts))


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
        given = list(dict.fromkeys(args.mechanisms))  # -m copynet -m copynet: decoded once
        unknown = [m for m in given if not trained(m)]
        if unknown:
            raise Refused(
                f"-m/--mechanisms: {', '.join(unknown)} not trained for {args.task} (no "
                f"{paths.checkpoints(unknown[0]) / 'model.pt'}): run `dvc repro train@{args.task}-{unknown[0]}` first"
            )
        mechanisms = given
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
            evaluate = {**eff["evaluate"], key: value}
            try:
                EvalConfig.from_params({**eff, "evaluate": evaluate})
                check_serving(evaluate, params.get("serving"))  # within what predict and the server accept
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


def metric_columns(cfg: EvalConfig, split: str) -> set[str]:
    """The figures a row of ``split`` holds under ``cfg``: found by scoring one made-up example with
    the scorer the rows are scored with, so whatever metric the registry gives is known here too."""
    probe = {"src": ["a"], "tgt": ["a"], "pred": ["a"], "nbest": [["a"]]}
    if cfg.group_by:
        probe[cfg.group_by] = "a"
    scored = score_records([probe], cfg, split)
    return {k for k, v in scored.items() if is_figure(v)} | set(UNK_COLUMNS) | {"seconds"}


def shown_figure(value: object) -> str:
    """A table cell: a score with 2 decimals, a count (``--columns n``) as it is, '-' for no figure."""
    if isinstance(value, int) and is_figure(value):
        return str(value)
    return f"{value:.2f}" if is_figure(value) else "-"


def is_figure(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_columns(chosen: list[str] | None, known: set[str], where: str) -> None:
    """Every ``--columns`` name is a figure the rows hold; else one line listing those they hold
    (an unknown name would only show a column of '-')."""
    unknown = [c for c in chosen or [] if c not in known]
    if unknown:
        raise Refused(
            f"--columns: {', '.join(unknown)} not among the figures of {where}; known: {', '.join(sorted(known))}"
        )


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
    metrics = parse_json(read_text(evaluated / "metrics.json"), evaluated / "metrics.json")
    if not isinstance(metrics, dict):
        raise Refused(f"{evaluated / 'metrics.json'}: not the evaluate stage's metrics (a JSON object of splits)")
    rows = {}
    for split in splits:
        predictions = evaluated / "predictions" / f"{split}.jsonl"
        if not isinstance(metrics.get(split), dict) or "n" not in metrics[split] or not predictions.is_file():
            continue  # not scored by the stage (another evaluate.splits)
        lines = [parse_json(t, f"{predictions}:{i}") for i, t in enumerate(read_text(predictions).splitlines(), 1)]
        if not all(isinstance(line, dict) and isinstance(line.get("pred"), str | list) for line in lines):
            raise Refused(f"{predictions}: not the evaluate stage's predictions (one JSON object with a pred a line)")
        rows[split] = {**metrics[split], **unk_stats(lines)}
    return rows


def read_text(path: Path) -> str:
    """A file of the evaluate stage's, read before anything is decoded; one line naming it if it cannot be."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise Refused(f"{path}: cannot be read ({err})") from None


def parse_json(text: str, where: object) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise Refused(f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None


EXAMPLE = f"""example (the validation split; the tables only, nothing written):
  {PROG} --task copy_rules -m copynet -m rnnsearch \\
      --settings ban_unk=true replace_unk=true"""
SETTINGS_KEYS = {  # the keys of the evaluate section users try here, each with what its row shows
    "ban_unk=true": "the search never emits <unk> (an output may then end early or be empty: the empty outputs "
    "column counts them)",
    "replace_unk=true": "each output <unk> becomes the source word most attended at that step",
    "average_last=K": "the mean weights of the run's last K step checkpoints (needs train.keep_checkpoints >= K)",
    "beam_size=N": "another beam size",
}


def parser() -> argparse.ArgumentParser:
    description = textwrap.fill(" ".join(__doc__.split("\n\n")[0].replace("``", "").split()), 79)
    p = OneLineParser(
        prog=PROG, description=description, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--task",
        default=None,
        help="the task whose trained models are scored: a task under `tasks` in params.yaml (e.g. copy_rules); "
        "needed unless --print (no default)",
    )
    p.add_argument(
        "-m",
        "--mechanisms",
        nargs="+",
        action="extend",
        default=None,
        metavar="MECHANISM",
        help="a mechanism to score, each trained for the task: repeat -m as `copyseq run` takes it "
        "(-m copynet -m rnnsearch), or list them (--mechanisms copynet rnnsearch); "
        "default: every mechanism of params.yaml trained for the task (the others named as skipped)",
    )
    p.add_argument(
        "--splits",
        nargs="+",
        default=["valid"],
        metavar="SPLIT",
        help="the splits decoded and scored (default: valid, where options are chosen; add test to report the "
        "chosen one: nothing is chosen on test)",
    )
    keys = [k.split("=")[0] for k in SETTINGS_KEYS]
    others = ", ".join(k for k in sorted(EvalConfig.__dataclass_fields__) if k not in keys)
    p.add_argument(
        "--settings",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="one row per setting: the task's evaluate settings with this one changed (the value read as YAML), "
        "e.g. --settings ban_unk=true replace_unk=true average_last=3 beam_size=5. "
        + "; ".join(f"{k}: {what}" for k, what in SETTINGS_KEYS.items())
        + f". Any other key of params.yaml's evaluate section: {others}. "
        'Without --settings: only the rows of the evaluate stage\'s own figures ("as evaluated")',
    )
    p.add_argument(
        "--params",
        default=None,
        metavar="FILE",
        help="the params file (default: the repository's params.yaml); the task's data (shards, vocabularies, "
        "checkpoints, the evaluate stage's figures) is read under the file's own directory",
    )
    p.add_argument(
        "--columns",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the figures shown (default: the task's, by each split's metric: top1 and top<k>, or rouge1 rouge2 "
        "rougeL, bleu ...), e.g. --columns top1 n; the line under each table names the others",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write every figure of every row (all metrics, per-group figures, copy statistics, seconds) "
        "to FILE, rewritten after each row; --print FILE shows its tables again. Without it nothing is written",
    )
    p.add_argument(
        "--print",
        dest="print_json",
        type=Path,
        default=None,
        metavar="FILE",
        help="decode nothing: print the tables of FILE, a --json written earlier (--columns chooses other "
        "figures of it; the other options are not used)",
    )
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except Refused as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


def run(args) -> int:
    if args.print_json:
        report = read_report(args.print_json)
        known = {k for rows in report["rows"].values() for by_split in rows.values() for m in by_split.values()
                 for k, v in m.items() if is_figure(v)}  # fmt: skip
        check_columns(args.columns, known, str(args.print_json))
        print_tables(report, args.columns)
        return 0
    if not args.task:
        raise Refused("--task is needed (unless --print)")
    if args.json:
        check_output(args.json)
    try:
        params = check_params_file(args.params)  # every setting checked first
    except SettingsError as err:
        raise Refused(str(err)) from None
    paths = TaskPaths(args.task, project_root(args.params))
    mechanisms, settings, notes = plan(args, params, paths)
    try:
        columns = {s: list(args.columns) if args.columns else split_columns(params, args.task, s) for s in args.splits}
        check_columns(args.columns, row_columns(params, args.task, mechanisms, settings, args.splits), args.task)
    except ValueError as err:  # the task's evaluate or compare settings
        raise Refused(f"the columns of {args.task}: {err}") from err
    for note in notes:
        print(note, flush=True)
    # the evaluate stage's own figures, when it has run: read before anything is decoded
    evaluated = {m: as_evaluated(paths.evaluation(m), args.splits) for m in mechanisms}
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    report: dict = {"task": args.task, "splits": args.splits, "columns": columns, "rows": {}}
    for mechanism in mechanisms:
        eff = effective_params(params, args.task, mechanism)
        base = EvalConfig.from_params(eff)
        device = resolve_device(base.device)
        compute_settings(base.threads, base.deterministic)
        rows = {}
        if evaluated[mechanism] is not None:
            rows["as evaluated"] = evaluated[mechanism]
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
            print(progress(mechanism, label, rows[label]), flush=True)
            report["rows"][mechanism] = rows
            if args.json:  # after every row: a long run stopped half-way keeps what it scored
                write_text_atomic(args.json, json.dumps(report, indent=1))
        report["rows"][mechanism] = rows
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=1))
    print_tables(report, args.columns)
    return 0


def progress(mechanism: str, label: str, by_split: dict) -> str:
    """The line a decoded row prints: what it decoded and how long it took (its figures are in the table)."""
    done = [f"{split}, {m['n']} examples decoded in {m['seconds']} s" for split, m in by_split.items()]
    return f"{mechanism} {label}: " + "; ".join(done)


def row_columns(params: dict, task: str, mechanisms: list[str], settings: list, splits: list[str]) -> set[str]:
    """The figures any row will hold on any of ``splits``: the "as evaluated" rows' (each mechanism's
    evaluate settings) and each setting's row (a ``topk`` gives its own top<k>)."""
    known: set[str] = set()
    for mechanism in mechanisms:
        eff = effective_params(params, task, mechanism)
        for override in [{}, *({key: value} for key, value in settings)]:
            cfg = EvalConfig.from_params({**eff, "evaluate": {**eff["evaluate"], **override}})
            known |= {c for split in splits for c in metric_columns(cfg, split)}
    return known


def check_output(path: Path) -> None:
    """``--json`` can be written, checked before any decoding rather than found out after it: not a
    directory, in an existing directory where a file can be created (tried: a temporary file)."""
    if path.is_dir():
        raise Refused(f"--json {path}: is a directory; give the path of a file")
    folder = path.parent
    if not folder.is_dir():
        raise Refused(f"--json {path}: its directory {folder} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".tmp"):
            pass
    except OSError as err:
        raise Refused(f"--json {path}: cannot write in {folder} ({err.strerror or err})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise Refused(f"--json {path}: the file is not writable")


def read_report(path: Path) -> dict:
    """A ``--json`` of this script, for ``--print``; one line naming the file when it cannot be read
    or is not such a report."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise Refused(f"--print {path}: not UTF-8 (undecodable byte at offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise Refused(f"--print {path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except OSError as err:
        raise Refused(f"--print {path}: cannot be read ({err.strerror or err})") from None
    if not report_shaped(report):
        raise Refused(
            f"--print {path}: not a report of eval_options --json "
            '(a mapping with "task", "splits": [split, ...] and "rows": {mechanism: {setting: {split: {...}}}})'
        )
    return report


def report_shaped(report: object) -> bool:
    """Whether ``report`` has the keys and nesting :func:`print_tables` reads."""
    if not isinstance(report, dict) or not isinstance(report.get("task"), str):
        return False
    splits, rows, columns = report.get("splits"), report.get("rows"), report.get("columns") or {}
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        return False
    if not isinstance(columns, dict) or not all(
        isinstance(c, list) and all(isinstance(x, str) for x in c) for c in columns.values()
    ):
        return False
    if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
        return False
    by_split = [b for r in rows.values() for b in r.values()]
    return all(isinstance(b, dict) and all(isinstance(m, dict) for m in b.values()) for b in by_split)


COUNT_HEADERS = ("<unk> tokens", "lines with <unk>", "empty outputs")  # UNK_COLUMNS, as the tables head them


def print_tables(report: dict, chosen: list[str] | None) -> None:
    """One markdown table per split: ``chosen`` columns, else those the report recorded per split; then
    the counts of :func:`unk_stats` and the mean output length. Under each table, one line naming the
    figures its rows hold that it does not show (``--columns`` shows them; ``--json`` has them all)."""
    for split in report["splits"]:
        columns = chosen or (report.get("columns") or {}).get(split) or ROUGE_COLUMNS
        print(f"\n### {report['task']} {split}\n")
        print("| mechanism | setting | " + " | ".join([*columns, *COUNT_HEADERS]) + " | length |")
        print("|---|---|" + "---:|" * (len(columns) + len(COUNT_HEADERS) + 1))
        others: set[str] = set()
        for mechanism, rows in report["rows"].items():
            for label, by_split in rows.items():
                m = by_split.get(split)
                if m is None:  # the evaluate stage did not score this split
                    dashes = ["-"] * (len(columns) + len(COUNT_HEADERS) + 1)
                    print(f"| {mechanism} | {label} | " + " | ".join(dashes) + " |")
                    continue
                others |= {k for k, v in m.items() if is_figure(v)} - set(columns) - set(UNK_COLUMNS)
                cells = [shown_figure(m.get(c)) for c in columns]
                copy = m.get("copy") if isinstance(m.get("copy"), dict) else {}
                length = (copy.get("outputs") if isinstance(copy.get("outputs"), dict) else {}).get("length")
                shown_length = f"{length:.1f}" if is_figure(length) else "-"
                counts = [str(m[c]) if is_figure(m.get(c)) else "-" for c in UNK_COLUMNS]
                print(f"| {mechanism} | {label} | " + " | ".join([*cells, *counts]) + f" | {shown_length} |")
        if others:
            print(f"\nalso in these rows (--columns NAME ... shows them): {', '.join(sorted(others))}")


if __name__ == "__main__":
    sys.exit(run_command(main))
