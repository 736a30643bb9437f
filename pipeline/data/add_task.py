"""``python -m pipeline.data.tasks add NAME --train F --valid F --test F ...``: your own corpus as a task.

Builds the three params.yaml entries of a task read by the ``parallel`` reader
(:mod:`pipeline.data.corpora.parallel`) -- ``tasks.<name>`` (the raw input DVC watches),
``prepare.<name>`` (the reader's settings) and ``task_settings.<name>`` (metric, champion, compare
columns; with ``--group-col``, ``compare.resample_by: group``) --, checks them (files present and
inside the project, the named columns in every file, the reader's settings valid, the task
``ready``), and inserts them as text at the end of each block, so params.yaml keeps its comments
and layout. ``dvc repro`` then prepares, trains, evaluates and
compares every mechanism on it: its stages iterate over ``tasks``.

The raw input is the one file given (``--file`` with fractions: ``train_file: .``, the raw input
itself), else the directory that holds every file given; it must lie inside the project and
outside the pipeline's outputs (``data/`` itself holds them: put the files in a directory of their
own, e.g. ``data/raw/<name>/``).

Every refusal is an :class:`AddTaskError` with one message (the command exits 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.config.checks import check_serving, check_subword, check_task_name
from pipeline.config.params import load_params
from pipeline.config.params_edit import block_style, indented_yaml, insert_entries, read_params_text, with_line_endings
from pipeline.config.schema import check_params
from pipeline.config.tasks import deep_merge, effective_params
from pipeline.config.validation import SettingsError
from pipeline.config.variants import resolve
from pipeline.data.corpora import parallel, tables
from pipeline.data.corpora.inputs import NO_SUCH_FILE, unreadable
from pipeline.data.prepare import resolve_paths
from pipeline.io.files import write_text_atomic

# evaluate.metric -> (compare columns, the key of the champion metric); the keys equal
# pipeline.metrics.registry.TEXT_METRICS + exact_match (tests/pipeline/data/test_add_task.py checks)
METRICS: dict[str, tuple[list[str], str]] = {
    "rouge_f": (["rouge1", "rouge2", "rougeL"], "rouge2"),
    "rouge_f_chars": (["rouge1", "rouge2", "rougeL"], "rouge2"),
    "rouge_recall_75": (["rouge1", "rouge2", "rougeL"], "rouge2"),
    "bleu": (["bleu"], "bleu"),
    "bleu_sari": (["bleu", "sari"], "bleu"),
    "exact_match": ([], "top1"),
}
OUTPUT_DIRS = ("shards", "vocab", "checkpoints", "eval", "plots", "cache", "retrain", "train_state")


class AddTaskError(ValueError):
    """A refusal of ``add``: the message says what is wrong and what to do."""


@dataclass
class NewTask:
    """What the command line asks for (paths as given, relative to the working directory)."""

    name: str
    train: list[str] = field(default_factory=list)  # a table file, or text: source, target files
    valid: list[str] = field(default_factory=list)  # text: source, target, reference files
    test: list[str] = field(default_factory=list)
    valid_fraction: float = 0.0
    test_fraction: float = 0.0
    format: str | None = None
    header: bool = True
    delimiter: str | None = None
    src_col: str | None = None
    tgt_col: str | None = None
    ref_cols: list[str] = field(default_factory=list)
    refs_col: str | None = None
    features_col: str | None = None  # tags kept apart from the source (docs/own_data.md)
    features_sep: str = ";"
    group_col: str | None = None  # each example's group, resampled whole by compare's intervals (docs/own_data.md)
    tokenizer: str = "whitespace"
    lang: str = "en"
    lowercase: bool = False
    mask_digits: bool = False
    subword: int | None = None
    metric: str = "rouge_f"
    max_len: int | None = None
    train_option: str = "--train"  # how the command line gave the train file(s): --train, or --file


# --------------------------------------------------------------------------- #
# Checks and the entries
# --------------------------------------------------------------------------- #


def _check_name(params: dict, name: str) -> None:
    try:
        check_task_name(name)
    except SettingsError as err:
        raise AddTaskError(str(err)) from err
    where = [k for k in ("tasks", "prepare", "task_settings") if name in (params.get(k) or {})]
    if where:
        raise AddTaskError(f"task {name!r} exists already (in {', '.join(where)} of params.yaml); choose another name")


def _files(task: NewTask, root: Path) -> dict[str, list[Path]]:
    """The files of each split given, absolute; every one must be a readable file (not a directory, a
    symlink loop ...: :func:`~pipeline.data.corpora.inputs.unreadable`) inside the project."""
    out: dict[str, list[Path]] = {}
    for split in ("train", "valid", "test"):
        given = getattr(task, split)
        if not given:
            continue
        option = task.train_option if split == "train" else f"--{split}"
        problems = {g: unreadable(g) for g in given}
        missing = [g for g, why in problems.items() if why == NO_SUCH_FILE]
        if missing:
            raise AddTaskError(f"{option}: no such file {', '.join(missing)}")
        for g, why in problems.items():
            if why is not None:
                raise AddTaskError(f"{option} {g}: {why}")
        paths = [Path(p).resolve() for p in given]
        outside = [g for g, p in zip(given, paths) if not p.is_relative_to(root)]
        if outside:
            raise AddTaskError(
                f"{option}: {', '.join(outside)} is outside the project {root} (DVC watches inputs inside it): "
                "copy it into a directory of its own, e.g. data/raw/<task>/"
            )
        inside = [g for g, p in zip(given, paths) if _in_outputs(p.relative_to(root))]
        if inside:
            raise AddTaskError(
                f"{option}: {', '.join(inside)} lies in a folder the pipeline writes (data/{{{','.join(OUTPUT_DIRS)}}}/): "
                "DVC cannot watch an input inside a stage's output; copy it into a directory of its own, "
                "e.g. data/raw/<task>/"
            )
        out[split] = paths
    if "train" not in out:
        raise AddTaskError("give --train FILE (or --file FILE with --valid-fraction/--test-fraction)")
    return out


def _in_outputs(rel: Path) -> bool:
    """Whether a path relative to the project lies in a folder the pipeline writes (``data/shards`` ...)."""
    parts = rel.parts
    return len(parts) > 2 and parts[0] == "data" and parts[1] in OUTPUT_DIRS


def _raw_input(files: dict[str, list[Path]], root: Path) -> tuple[Path, bool]:
    """The raw input DVC watches (relative to ``root``) and whether it is the single file itself."""
    every = [p for paths in files.values() for p in paths]
    if len(every) == 1:
        return every[0].relative_to(root), True
    raw = Path(os.path.commonpath([str(p.parent) for p in every])).relative_to(root)
    parts = raw.parts
    if not parts or parts == ("data",) or (parts[0] == "data" and len(parts) > 1 and parts[1] in OUTPUT_DIRS):
        where = "the whole project" if not parts else f"{raw}/, where the pipeline writes its outputs"
        raise AddTaskError(
            f"the task's raw input (the directory holding all its files, which DVC watches) would be {where}: "
            "put the files in a directory of their own, e.g. data/raw/<task>/"
        )
    return raw, False


def _column(value: str | None, indexed: bool) -> str | int | None:
    if value is None or not indexed:
        return value
    if not value.isdigit():
        raise AddTaskError(f"column {value!r}: without a header (--no-header) columns are 0-based indices")
    return int(value)


def _check_columns(settings: dict, files: dict[str, list[Path]], formats: dict[str, str]) -> None:
    """Every named column exists in every table file (the message lists the columns found)."""
    if "text" in formats.values():
        return
    cfg_cols = [settings.get("src_col"), settings.get("tgt_col"), *settings.get("ref_cols", [])]
    cfg_cols += [settings[k] for k in ("refs_col", "features_col", "group_col") if settings.get(k) is not None]
    header, delimiter = settings.get("header", True), settings.get("delimiter")
    for split, paths in files.items():
        found = tables.column_names(paths[0], formats[split], header, delimiter)
        if isinstance(found, int):
            bad = [c for c in cfg_cols if not 0 <= c < found]
            if bad:
                raise AddTaskError(f"{paths[0]}: no column {bad}: its first line has {found} fields (0-based)")
            continue
        missing = [c for c in cfg_cols if (c not in found if isinstance(c, str) else not 0 <= c < len(found))]
        if missing:
            raise AddTaskError(f"{paths[0]}: no column {', '.join(map(repr, missing))}; the columns found are {found}")
        twice = [c for c in cfg_cols if isinstance(c, str) and found.count(c) > 1]
        if twice:
            raise AddTaskError(
                f"{paths[0]}: the header names column {twice[0]!r} {found.count(twice[0])} times ({found}): "
                "rename one, so the column read is the one you mean"
            )


def prepare_settings(task: NewTask, files: dict[str, list[Path]], raw: Path, single: bool, root: Path) -> dict:
    """``prepare.<name>``: the parallel reader's settings, paths relative to the raw input."""
    formats = {split: task.format or tables.detect_format(paths[0]) for split, paths in files.items()}
    fmt = formats["train"]
    if fmt == "text" and set(formats.values()) != {"text"}:
        raise AddTaskError(f"the files are in different kinds of format {formats}: text files go with text files")
    rel = lambda p: "." if single else str(p.relative_to(root / raw))
    settings: dict = {"reader": "parallel"}
    if len(set(formats.values())) == 1:
        settings["format"] = fmt
    for split, paths in files.items():
        if fmt == "text":
            if len(paths) < 2:
                raise AddTaskError(
                    f"--{split}: format text needs the source file and the target file (then references)"
                )
            settings[f"{split}_src_file"], settings[f"{split}_tgt_file"] = rel(paths[0]), rel(paths[1])
            if paths[2:]:
                if split == "train":
                    raise AddTaskError("--train: extra reference files are for valid and test")
                settings[f"{split}_ref_files"] = [rel(p) for p in paths[2:]]
        elif len(paths) != 1:
            raise AddTaskError(f"--{split}: one {fmt} file, got {len(paths)}")
        else:
            settings[f"{split}_file"] = rel(paths[0])
    for split in ("valid", "test"):
        if getattr(task, f"{split}_fraction"):
            settings[f"{split}_fraction"] = getattr(task, f"{split}_fraction")
    indexed = set(formats.values()) <= {"tsv", "csv"} and not task.header
    if set(formats.values()) <= {"tsv", "csv"}:
        if not task.header:
            settings["header"] = False
        if task.delimiter:
            settings["delimiter"] = task.delimiter
    if task.delimiter is not None and (len(task.delimiter) != 1 or not set(formats.values()) <= {"tsv", "csv"}):
        raise AddTaskError(
            f"--delimiter {task.delimiter!r}: one character, for tsv/csv files (a tab is written --delimiter $'\\t')"
        )
    if fmt != "text":
        settings["src_col"] = (
            _column(task.src_col, indexed) if task.src_col is not None else ("src" if not indexed else 0)
        )
        settings["tgt_col"] = (
            _column(task.tgt_col, indexed) if task.tgt_col is not None else ("tgt" if not indexed else 1)
        )
        if task.ref_cols:
            settings["ref_cols"] = [_column(c, indexed) for c in task.ref_cols]
        if task.refs_col is not None:
            settings["refs_col"] = task.refs_col
        if task.features_col is not None:
            settings["features_col"] = _column(task.features_col, indexed)
            if task.features_sep != ";":
                settings["features_sep"] = task.features_sep
        if task.group_col is not None:
            settings["group_col"] = _column(task.group_col, indexed)
    else:
        for option in ("features_col", "group_col"):
            if getattr(task, option) is not None:
                flag = "--" + option.replace("_", "-")
                raise AddTaskError(f"{flag} is for table files (tsv, csv, jsonl, parquet, arrow), not text files")
    settings["tokenizer"] = task.tokenizer
    if task.tokenizer == "moses":
        settings["lang"] = task.lang
    settings["lowercase"], settings["mask_digits"] = task.lowercase, task.mask_digits
    if task.subword is not None:
        settings["subword"] = {"vocab_size": task.subword}
        try:
            check_subword(settings["subword"], "--subword")
        except SettingsError as err:
            raise AddTaskError(f"{err} (the subword vocabulary size; leave it out for no subword step)") from err
    _check_columns(settings, files, formats)
    return settings


def task_settings_entry(task: NewTask, raw: Path) -> dict:
    """``task_settings.<name>``: the raw input, the metric, the champion and the compare columns (and,
    with a group column, ``compare.resample_by: group``: the intervals resample the shards' groups)."""
    if task.metric not in METRICS:
        raise AddTaskError(f"--metric {task.metric!r}: one of {sorted(METRICS)}")
    columns, key = METRICS[task.metric]
    evaluate: dict = {"metric": task.metric}
    if task.max_len is not None:
        evaluate["max_len"] = task.max_len
    entry: dict = {"raw": str(raw), "champion": f"valid.{key}"}  # chosen on validation, never on test
    entry["evaluate"] = evaluate
    compare: dict = {"columns": columns} if columns else {}
    if task.group_col is not None:
        compare["resample_by"] = parallel.GROUP
    if compare:
        entry["compare"] = compare
    return entry


def validate(params: dict, name: str, root: Path, task_status: Callable[[dict, str, Path], str]) -> None:
    """The new entries as the stages read them, checked by the stages' own checks: the reader's Config
    (paths resolved), the subword settings, the task's effective params and, for every mechanism of
    params.yaml, its evaluate settings (types, ranges, within the serving limits); then
    ``task_status`` (the ``list`` command's rule) ``ready``."""
    settings = dict(params["prepare"][name])
    settings.pop("reader")
    subword = settings.pop("subword", None)
    try:
        parallel.Config.from_dict(resolve_paths(settings, root / params["tasks"][name], root))
        check_subword(subword)
        check_params(params)  # every setting as the stages will check it (types, ranges, every row's merge)
        where = f"task_settings.{name}.evaluate"
        evaluate = effective_params(params, name)["evaluate"]
        check_serving(evaluate, params.get("serving"), where)
        for mechanism in params.get("mechanisms") or []:  # a mechanism's own overrides (task_settings, variants)
            evaluate = effective_params(params, name, mechanism)["evaluate"]
            try:
                check_serving(evaluate, params.get("serving"), where)
            except SettingsError as err:
                raise SettingsError(f"{err} (as {resolve(params, mechanism).name} is evaluated)") from err
    except (ValueError, KeyError) as err:
        raise AddTaskError(f"the settings are not valid: {err}") from err
    status = task_status(params, name, root)
    if status != "ready":
        raise AddTaskError(f"task {name} would not be ready: {status}")


def count_records(path: Path, fmt: str, header: bool) -> int | None:
    """How many records a table or text file holds, when that is cheap to know (Parquet / Arrow
    metadata, lines of an uncompressed text file); None otherwise."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        if fmt == "arrow" or path.suffix == ".gz":
            return None
        with open(path, "rb") as fh:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
            fh.seek(max(path.stat().st_size - 1, 0))
            lines += path.stat().st_size > 0 and fh.read(1) != b"\n"
    except (OSError, ValueError, ImportError):
        return None
    return max(lines - (header and fmt in ("tsv", "csv")), 0)


def check_fractions(task: NewTask, files: dict[str, list[Path]], settings: dict) -> None:
    """A fraction that selects no record of the train file (expected count below one) is refused now,
    not as an empty split in the prepare stage."""
    fmt = settings.get("format") or tables.detect_format(files["train"][0])
    if fmt == "csv":
        return  # a quoted field may span lines: lines are not records
    n = count_records(files["train"][0], fmt, settings.get("header", True))
    if not n:
        return
    for split in ("valid", "test"):
        fraction = getattr(task, f"{split}_fraction")
        if fraction and fraction * n < 1:
            raise AddTaskError(
                f"--{split}-fraction {fraction} of the {n} records of {files['train'][0].name} selects about "
                f"{fraction * n:.2f} records, so the {split} split would be empty: give at least "
                f"{min(1.0, 10 / n):.3g} (about 10 records) or --{split} FILE"
            )


def add_task(params_path: Path, task: NewTask, task_status: Callable[[dict, str, Path], str]) -> dict:
    """Check, then insert the task's entries into ``params_path``; return them
    ``{"tasks": raw, "prepare": {...}, "task_settings": {...}}``. ``task_status`` is
    :func:`pipeline.data.tasks.task_status` (given, as that module runs this one)."""
    root = params_path.parent.resolve()
    params = load_params(params_path)  # a file that is not a params file: one line naming it
    text, raw_text = read_params_text(params_path)
    _check_name(params, task.name)
    if (task.valid_fraction or task.test_fraction) and (
        task.valid and task.valid_fraction or task.test and task.test_fraction
    ):
        raise AddTaskError(
            "a split has a file and a fraction: give --valid or --valid-fraction (and --test or --test-fraction)"
        )
    files = _files(task, root)
    if "valid" not in files and not task.valid_fraction:
        raise AddTaskError("give --valid FILE or --valid-fraction F (the vocab stage reads a valid split)")
    if "test" not in files and not task.test_fraction:
        raise AddTaskError("give --test FILE or --test-fraction F (evaluate scores the test split)")
    raw, single = _raw_input(files, root)
    entries = {
        "tasks": str(raw),
        "prepare": prepare_settings(task, files, raw, single, root),
        "task_settings": task_settings_entry(task, raw),
    }
    expected = deep_merge(params, {k: {task.name: v} for k, v in entries.items()})
    validate(expected, task.name, root, task_status)
    check_fractions(task, files, entries["prepare"])
    new_text = text
    for key in entries:  # an inline block (`tasks: {}`, `tasks: {a: b}`) is rewritten as a block first
        new_text = block_style(new_text, key, params.get(key))
    new_text = insert_entries(new_text, "tasks", [f"  {task.name}: {raw}"])
    comment = f"# your corpus: python -m pipeline.data.tasks add {task.name} (docs/own_data.md)"
    for key in ("prepare", "task_settings"):
        lines = indented_yaml({task.name: entries[key]})
        lines[0] = f"{lines[0]}   {comment}"
        new_text = insert_entries(new_text, key, lines, blank_line=True)
    if yaml.safe_load(new_text) != expected:  # never write a file that does not say what was asked
        raise AddTaskError(
            f"{params_path}: could not insert the entries as text (an unusual layout?); add them by hand"
        )
    write_text_atomic(params_path, with_line_endings(raw_text, new_text))  # each kept line keeps its own ending
    return entries
