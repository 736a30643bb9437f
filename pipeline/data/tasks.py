"""Which tasks can run here, switching them on, adding your own: ``python -m pipeline.data.tasks list|enable|add``.

``list`` shows every task of ``params.yaml`` (``tasks`` and ``task_settings``) and whether its data
is present: the raw input and every path its reader settings name (the rule of
:func:`pipeline.data.prepare.resolve_paths`), the optional Python modules it needs, a training
split. ``enable --available`` (or ``enable NAME ...``) rewrites the ``tasks`` block of params.yaml
to the tasks whose data is present (the others stay as comments, with the reason they are
skipped), so `dvc repro` never fails on a corpus that is not there; ``--preset`` also sets
``preset``. ``add NAME --train F --valid F --test F --src-col C --tgt-col C ...`` makes your own
corpus a task (:mod:`pipeline.data.add_task`: the ``parallel`` reader's settings, written into
params.yaml with its comments kept). What a task's settings mean: :mod:`pipeline.config.tasks`.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import re
import sys
from pathlib import Path

import yaml

from pipeline.config.params import REPO_ROOT, load_params, section
from pipeline.config.tasks import task_names, task_settings
from pipeline.config.validation import SettingsError
from pipeline.data.add_task import METRICS, AddTaskError, NewTask, add_task
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.data.corpora.parallel import TOKENIZERS
from pipeline.data.corpora.tables import FORMATS
from pipeline.data.prepare import raw_input_paths
from pipeline.io.files import write_text_atomic


def _exists(path: Path) -> bool:
    try:
        return path.exists() or bool(glob.glob(str(path)))
    except OSError:  # a name too long for the file system: not there either
        return False


def missing_inputs(params: dict, task: str, raw: str | None, root: Path = REPO_ROOT) -> list[str]:
    """The raw files/directories ``task``'s reader settings name that are absent (relative paths
    resolve against ``raw``, as :func:`pipeline.data.prepare.resolve_paths` resolves them; absolute
    ones, a corpus outside the project, are checked where they are)."""
    if raw is None:
        return [f"task_settings.{task}.raw is not set"]
    raw_root = root / raw  # an absolute raw stays itself
    if not _exists(raw_root):
        return [str(raw_root)]
    settings = section(params, "prepare", task)
    missing = []
    for values in raw_input_paths(settings).values():
        missing += [str(raw_root / v) for v in values if not _exists(raw_root / v)]
    for name, extra in (settings.get("extra_splits") or {}).items():
        if not extra.get("optional") and not _exists(raw_root / extra["raw"]):
            missing.append(f"{raw_root / extra['raw']} (split {name})")
    return missing


def task_status(params: dict, task: str, root: Path = REPO_ROOT) -> str:
    """'ready', or why the task cannot run here."""
    settings = task_settings(params, task)
    raw = (params.get("tasks") or {}).get(task) or settings.get("raw")
    if "prepare" not in params or task not in params["prepare"]:
        return f"no prepare.{task} reader settings"
    missing = missing_inputs(params, task, raw, root)
    if missing:
        return "data absent: " + ", ".join(missing)
    for module in settings.get("needs_modules", []):
        if importlib.util.find_spec(module) is None:
            return f"needs the Python module {module!r} ({settings.get('needs_hint', 'an optional extra')})"
    if settings.get("trainable") is False:
        return f"no training split: {settings.get('why_not_trainable', '')}".rstrip(": ")
    return "ready"


def tasks_block(params: dict, enabled: list[str], statuses: dict[str, str]) -> str:
    """The ``tasks:`` block of params.yaml for ``enabled`` tasks, the others listed as comments."""
    raws = {t: (params.get("tasks") or {}).get(t) or task_settings(params, t).get("raw") for t in statuses}
    lines = [
        "# The tasks `dvc repro` runs: task -> its raw input (the file or directory DVC watches; the",
        "# reader settings prepare.<task> resolve their *_dir/*_file paths against it). Rewritten by",
        "# `python -m pipeline.data.tasks enable ...`; editing it by hand is fine too.",
        "tasks:",
    ]
    for task in enabled:
        lines.append(f"  {task}: {raws[task]}")
    for task, status in statuses.items():
        if task not in enabled:
            lines.append(f"  # {task}: {raws[task]}   # {status}")
    return "\n".join(lines) + "\n"


def rewrite_tasks_block(params_path: Path, block: str) -> None:
    """Replace the top-level ``tasks:`` block (and the comment lines just above it) in place."""
    text = params_path.read_text(encoding="utf-8")
    pattern = re.compile(r"(?:^#[^\n]*\n)*^tasks:[^\n]*\n(?:^(?:[ \t]+[^\n]*|[ \t]*)\n)*", re.M)
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"{params_path}: no top-level 'tasks:' block to rewrite")
    new_text = text[: match.start()] + block + "\n" + text[match.end() :]
    yaml.safe_load(new_text)  # never write a file YAML cannot read
    write_text_atomic(params_path, new_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.data.tasks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default=str(REPO_ROOT / "params.yaml"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every known task and whether it can run here")
    enable = sub.add_parser("enable", help="rewrite params.yaml's tasks block")
    enable.add_argument("names", nargs="*", help="tasks to enable (default: --available)")
    enable.add_argument("--available", action="store_true", help="every task whose data is present")
    enable.add_argument("--preset", choices=["paper", "cpu"], help="also set params.yaml's preset")
    add_arguments(sub.add_parser("add", help="your own corpus as a task (docs/own_data.md)"))
    args = parser.parse_args(argv)

    params_path = Path(args.params).resolve()
    if args.command == "add":
        return run_add(parser, params_path, args)
    params = load_params(params_path)
    known = list(dict.fromkeys(task_names(params) + list(params.get("task_settings") or {})))
    statuses = {t: task_status(params, t, params_path.parent) for t in known}
    if args.command == "list":
        width = max(map(len, known))
        for task in known:
            mark = "*" if task in task_names(params) else " "
            print(f"{mark} {task:<{width}}  {statuses[task]}")
        print(f"(* enabled; preset: {params.get('preset')})")
        return 0
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        refuse(f"unknown tasks {unknown}; known: {known}")
    enabled = [t for t in known if (t in args.names or (args.available and statuses[t] == "ready"))]
    blocked = {t: statuses[t] for t in args.names if statuses[t] != "ready"}
    if blocked:
        refuse("cannot enable: " + "; ".join(f"{t}: {s}" for t, s in blocked.items()))
    rewrite_tasks_block(params_path, tasks_block(params, enabled, statuses))
    if args.preset:
        text = params_path.read_text(encoding="utf-8")
        new_text, n = re.subn(r"^preset:[ \t]*[^\s#]*", f"preset: {args.preset}", text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"{params_path}: no top-level 'preset:' line")
        write_text_atomic(params_path, new_text)
    print(f"enabled: {', '.join(enabled) or '(none)'}" + (f"; preset {args.preset}" if args.preset else ""))
    for line in not_enabled_lines(enabled, task_names(params), statuses):
        print(line)
    return 0


def not_enabled_lines(enabled: list[str], before: list[str], statuses: dict[str, str]) -> list[str]:
    """What ``enable`` says of each task it leaves out: switched off (it was in the ``tasks`` block
    before) or not enabled, and whether its data is here (then the command that enables it) or why
    it cannot run."""
    lines = []
    for task, status in statuses.items():
        if task in enabled:
            continue
        state = "switched off" if task in before else "not enabled"
        if status == "ready":
            again = "again " if task in before else ""
            command = " ".join(["python -m pipeline.data.tasks enable", *enabled, task])
            lines.append(f"  {task}: {state} (its data is here: enable it {again}with `{command}`)")
        else:
            lines.append(f"  {task}: {state}, cannot run here: {status}")
    return lines


def add_arguments(add: argparse.ArgumentParser) -> None:
    """The ``add`` subcommand's options (:class:`pipeline.data.add_task.NewTask`)."""
    add.add_argument("name", help="the task's name (lowercase letters, digits, _)")
    files = "a tsv/csv/jsonl/parquet/arrow file, or for --format text: source file, target file"
    add.add_argument("--train", nargs="+", default=[], metavar="FILE", help=f"training data: {files}")
    add.add_argument("--file", nargs="+", default=[], metavar="FILE", help="one file for every split (with fractions)")
    add.add_argument("--valid", nargs="+", default=[], metavar="FILE", help=f"validation data ({files}, references)")
    add.add_argument("--test", nargs="+", default=[], metavar="FILE", help=f"test data ({files}, references)")
    add.add_argument(
        "--valid-fraction", type=float, default=0.0, help="carve valid from the train file (hash of the source)"
    )
    add.add_argument("--test-fraction", type=float, default=0.0, help="carve test from the train file")
    add.add_argument("--format", choices=FORMATS, help="default: by the file name")
    add.add_argument(
        "--no-header", dest="header", action="store_false", help="tsv/csv without a header: columns by index"
    )
    add.add_argument("--delimiter", help="tsv/csv field delimiter (default tab / comma)")
    add.add_argument("--src-col", help="source column (name, or index with --no-header; default src / 0)")
    add.add_argument("--tgt-col", help="target column (default tgt / 1)")
    add.add_argument(
        "--ref-col", dest="ref_cols", action="append", default=[], help="a further reference column (repeat)"
    )
    add.add_argument("--refs-col", help="a column holding a list of further references (jsonl, parquet, arrow)")
    add.add_argument("--features-col", help="a column of tags kept apart from the source (V;PST;3;SG), never copied")
    add.add_argument("--features-sep", default=";", help="what separates the tags of --features-col (default ;)")
    add.add_argument(
        "--group-col",
        help="a column of each example's group (the same lemma, the same document): compare's intervals resample "
        "whole groups",
    )
    add.add_argument("--tokenizer", choices=TOKENIZERS, default="whitespace")
    add.add_argument("--lang", default="en", help="the language of --tokenizer moses")
    add.add_argument("--lowercase", action="store_true")
    add.add_argument("--mask-digits", action="store_true", help="every digit #")
    add.add_argument("--subword", type=int, metavar="VOCAB_SIZE", help="sentencepiece on top, this vocabulary size")
    add.add_argument("--metric", choices=sorted(METRICS), default="rouge_f")
    add.add_argument("--max-len", type=int, help="longest output evaluate decodes (default: evaluate.max_len)")
    add.add_argument(
        "--mechanisms",
        nargs="+",
        metavar="ROW",
        help="the rows to run it with (the printed command; default: every row)",
    )


def refuse(message: str) -> None:
    """A refusal: its one message on stderr (no usage block, no traceback), exit code 2, nothing written."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_add(parser: argparse.ArgumentParser, params_path: Path, args: argparse.Namespace) -> int:
    """``add``: write the task's entries, print them and what to run next (exit 2 on a refusal)."""
    if args.file and args.train:
        refuse("give --train or --file, not both")
    fields = {k: v for k, v in vars(args).items() if k not in {"command", "params", "file", "train", "mechanisms"}}
    task = NewTask(train=args.file or args.train, train_option="--file" if args.file else "--train", **fields)
    try:
        entries = add_task(params_path, task, task_status)
    except (AddTaskError, CorpusFormatError, SettingsError, yaml.YAMLError) as err:
        refuse(str(err))
    prepare = entries["prepare"]
    splits = [s for s in ("train", "valid", "test") if any(k.startswith(f"{s}_") for k in prepare)]
    print(
        f"added task {task.name} to {params_path.name}: raw input {entries['tasks']}, reader parallel "
        f"({prepare.get('format', 'formats by file name')}, tokenizer {prepare['tokenizer']}), splits {', '.join(splits)}, "
        f"metric {entries['task_settings']['evaluate']['metric']}, champion {entries['task_settings']['champion']}"
    )
    if prepare.get("group_col") is not None:
        print(
            f"groups: column {prepare['group_col']!r} -> the shards' group column; the comparison's intervals "
            f"resample whole groups (task_settings.{task.name}.compare.resample_by: group)"
        )
    rows = args.mechanisms or []
    known = load_params(params_path).get("mechanisms") or []
    unknown = [row for row in rows if row not in known]
    if unknown:  # the task is added; only the printed command would be wrong
        print(
            f"warning: --mechanisms {', '.join(unknown)} not under `mechanisms` in {params_path.name}", file=sys.stderr
        )
        rows = [row for row in rows if row in known]
    chosen = "".join(f" -m {row}" for row in rows)
    print(f"next: copyseq run {task.name}{chosen}   (this task alone: nothing else is trained; --dry shows the stages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
