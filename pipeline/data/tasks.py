"""Which tasks can run here, switching them on, adding your own: ``copyseq tasks list|enable|add``.

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
import itertools
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

import yaml

from pipeline.config.arguments import Once, OneLineParser, run_command
from pipeline.config.arguments import refuse as refuse_command
from pipeline.config.params import REPO_ROOT, UniqueKeyLoader, load_params, section
from pipeline.config.params_edit import read_params_text, with_line_endings
from pipeline.config.tasks import task_names, task_settings
from pipeline.config.validation import SettingsError
from pipeline.data.add_task import METRICS, AddTaskError, NewTask, add_task
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.data.corpora.parallel import TOKENIZERS
from pipeline.data.corpora.tables import FORMATS
from pipeline.data.prepare import raw_input_paths
from pipeline.io.files import write_text_atomic

PROG = "copyseq tasks"  # how users run this module (python -m pipeline.data.tasks is the same)


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


def with_tasks_block(text: str, block: str, where: Path) -> str:
    """``text`` (params.yaml) with its top-level ``tasks:`` block (and the comment lines just above it) replaced."""
    pattern = re.compile(r"(?:^#[^\n]*\n)*^tasks:[^\n]*\n(?:^(?:[ \t]+[^\n]*|[ \t]*)\n)*", re.M)
    match = pattern.search(text)
    if match is None:
        refuse(f"{where}: no top-level 'tasks:' block to rewrite; add a line `tasks:` and run enable again")
    return text[: match.start()] + block + "\n" + text[match.end() :]


def with_preset(text: str, preset: str, where: Path) -> str:
    """``text`` (params.yaml) with its top-level ``preset:`` line set to ``preset``."""
    new_text, n = re.subn(r"^preset:[ \t]*[^\s#]*", f"preset: {preset}", text, count=1, flags=re.M)
    if n != 1:
        refuse(f"{where}: no top-level 'preset:' line for --preset {preset}; add a line `preset: cpu` and run again")
    return new_text


def rewrite_tasks_block(params_path: Path, block: str, preset: str | None = None) -> None:
    """Replace the ``tasks:`` block (and with ``preset``, the ``preset:`` line) in one write: a refusal
    leaves params.yaml as it was, never with the block rewritten and the preset not."""
    text, raw = read_params_text(params_path)
    text = with_tasks_block(text, block, params_path)
    if preset:
        text = with_preset(text, preset, params_path)
    yaml.load(text, Loader=UniqueKeyLoader)  # never write a file YAML cannot read (a SafeLoader)
    write_text_atomic(params_path, with_line_endings(raw, text))  # each kept line keeps its own ending


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", action=Once, default=str(REPO_ROOT / "params.yaml"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every known task and whether it can run here")
    enable = sub.add_parser("enable", help="rewrite params.yaml's tasks block (name the tasks, or --available)")
    enable.add_argument("names", nargs="*", help="tasks to enable (or --available; with neither, nothing is changed)")
    enable.add_argument("--available", action="store_true", help="every task whose data is present")
    enable.add_argument("--preset", action=Once, choices=["paper", "cpu"], help="also set params.yaml's preset")
    add_arguments(
        sub.add_parser(
            "add",
            help="your own corpus as a task (docs/own_data.md)",
            description="Make your own corpus a task of params.yaml (the parallel reader), checked as the stages "
            "will read it. Keep its files in a directory of their own inside the project (data/raw/<task>/): "
            "that directory is the task's raw input, which DVC watches. Example: copyseq tasks add qa "
            "--train data/raw/qa/train.tsv --valid data/raw/qa/valid.tsv --test data/raw/qa/test.tsv "
            "--src-col question --tgt-col answer",
        )
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    params_path = Path(args.params).resolve()
    if args.command == "add":
        return run_add(params_path, args)
    try:
        params = load_params(params_path)
    except SettingsError as err:
        refuse(str(err))
    known = list(dict.fromkeys(task_names(params) + list(params.get("task_settings") or {})))
    statuses = {t: task_status(params, t, params_path.parent) for t in known}
    if args.command == "list":
        width = max(map(len, known))
        for task in known:
            mark = "*" if task in task_names(params) else " "
            print(f"{mark} {task:<{width}}  {statuses[task]}")
        print(f"(* enabled; preset: {params.get('preset')})")
        return 0
    if not args.names and not args.available:  # a bare `enable` would switch every task off
        refuse(
            "enable: name the tasks to enable (enable NAME ...) or give --available (every task whose data is "
            f"present); {params_path.name} is unchanged"
        )
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        refuse(f"unknown tasks {unknown}; known: {known}")
    enabled = [t for t in known if (t in args.names or (args.available and statuses[t] == "ready"))]
    blocked = {t: statuses[t] for t in args.names if statuses[t] != "ready"}
    if blocked:
        refuse("cannot enable: " + "; ".join(f"{t}: {s}" for t, s in blocked.items()))
    rewrite_tasks_block(params_path, tasks_block(params, enabled, statuses), args.preset)
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
    """The ``add`` subcommand's options (:class:`pipeline.data.add_task.NewTask`); each but the flags and
    ``--ref-col`` (repeated on purpose) is refused when given twice (:class:`Once`)."""
    add.add_argument("name", help="the task's name (lowercase letters, digits, _)")
    files = "a tsv/csv/jsonl/parquet/arrow file, or for --format text: source file, target file"
    add.add_argument("--train", action=Once, nargs="+", default=[], metavar="FILE", help=f"training data: {files}")
    add.add_argument(
        "--file", action=Once, nargs="+", default=[], metavar="FILE", help="one file for every split (with fractions)"
    )
    add.add_argument(
        "--valid", action=Once, nargs="+", default=[], metavar="FILE", help=f"validation data ({files}, references)"
    )
    add.add_argument(
        "--test", action=Once, nargs="+", default=[], metavar="FILE", help=f"test data ({files}, references)"
    )
    add.add_argument(
        "--valid-fraction",
        action=Once,
        type=float,
        default=0.0,
        help="carve valid from the train file (hash of the source)",
    )
    add.add_argument("--test-fraction", action=Once, type=float, default=0.0, help="carve test from the train file")
    add.add_argument("--format", action=Once, choices=FORMATS, help="default: by the file name")
    add.add_argument(
        "--no-header", dest="header", action="store_false", help="tsv/csv without a header: columns by index"
    )
    add.add_argument("--delimiter", action=Once, help="tsv/csv field delimiter (default tab / comma)")
    add.add_argument("--src-col", action=Once, help="source column (name, or index with --no-header; default src / 0)")
    add.add_argument("--tgt-col", action=Once, help="target column (default tgt / 1)")
    add.add_argument(
        "--ref-col", dest="ref_cols", action="append", default=[], help="a further reference column (repeat)"
    )
    add.add_argument(
        "--refs-col", action=Once, help="a column holding a list of further references (jsonl, parquet, arrow)"
    )
    add.add_argument(
        "--features-col", action=Once, help="a column of tags kept apart from the source (V;PST;3;SG), never copied"
    )
    add.add_argument(
        "--features-sep", action=Once, default=";", help="what separates the tags of --features-col (default ;)"
    )
    add.add_argument(
        "--group-col",
        action=Once,
        help="a column of each example's group (the same lemma, the same document): compare's intervals resample "
        "whole groups",
    )
    add.add_argument(
        "--tokenizer",
        action=Once,
        choices=TOKENIZERS,
        default="whitespace",
        help="how text becomes tokens (default whitespace)",
    )
    add.add_argument("--lang", action=Once, default="en", help="the language of --tokenizer moses (default en)")
    add.add_argument("--lowercase", action="store_true", help="lowercase the text")
    add.add_argument("--mask-digits", action="store_true", help="every digit #")
    add.add_argument(
        "--subword", action=Once, type=int, metavar="VOCAB_SIZE", help="sentencepiece on top, this vocabulary size"
    )
    add.add_argument(
        "--metric",
        action=Once,
        choices=sorted(METRICS),
        default="rouge_f",
        help="how evaluate scores the outputs (default rouge_f); the champion is chosen by its validation figure",
    )
    add.add_argument(
        "--max-len", action=Once, type=int, help="longest output evaluate decodes (default: evaluate.max_len)"
    )
    add.add_argument(
        "--mechanisms",
        action=Once,
        nargs="+",
        metavar="ROW",
        help="the rows to run it with (the printed command; default: every row)",
    )


def refuse(message: str) -> NoReturn:
    """A refusal: its one message on stderr (no usage block, no traceback), exit code 2, nothing written."""
    refuse_command(PROG, message)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # a missing or unreadable file: add_task names it
        return False


def check_splits_differ(given: dict[str, list[str]]) -> None:
    """No file serves two splits (a link or another spelling of the path included): a model chosen on
    its validation data or scored on its test data must not have seen them, and valid and test must
    differ, or the champion is chosen on the data it is scored on."""
    for (first, files), (second, others) in itertools.combinations(given.items(), 2):
        for a, b in itertools.product(files, others):
            if _same_file(a, b):
                same = a if a == b else f"{a} and {b}"
                refuse(f"{first} and {second} name the same file ({same}): each split must be data of its own")


def run_add(params_path: Path, args: argparse.Namespace) -> int:
    """``add``: write the task's entries, print them and what to run next (exit 2 on a refusal)."""
    if args.file and args.train:
        refuse("give --train or --file, not both")
    given = {"--file" if args.file else "--train": args.file or args.train, "--valid": args.valid, "--test": args.test}
    given = {option: files for option, files in given.items() if files}
    check_splits_differ(given)
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
    print(
        f"next: copyseq run {task.name}{chosen}   (this task alone: nothing else is trained; --dry shows the stages; "
        "--compare then names its champion)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
