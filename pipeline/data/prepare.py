"""The prepare stage's job, without Prefect: one corpus (or generator) into Arrow shards, manifests and
quarantine (``flows/prepare.py`` runs :func:`write_job` as a Prefect flow, mapping the CPU-bound chunks
as Prefect tasks).

``params.yaml``: ``tasks`` maps each task (= the corpus it is trained on) to its raw input (the file
or directory DVC watches); ``prepare.<corpus>`` holds the reader's settings, ``reader`` naming the
module in ``pipeline/data/corpora``. Settings whose names end in ``_dir``/``_file`` (or ``_files``, a
list) are paths relative to that raw input, except ``cache_dir`` (a working cache, e.g. jieba's
segmentations), which is relative to the project root (:func:`resolve_paths`). Any of these, the raw
input itself and an extra split's ``raw`` may be absolute (a corpus outside the project): an
absolute path is used as it is.

Optional ``extra_splits: {<split>: {corpus: <other prepare section>, split: <its split>, raw: <its raw
input, relative to this corpus's or absolute>, optional: <bool>}}`` adds splits that another reader prepares, e.g.
Gigaword's ``valid`` = DUC 2003 and its ``duc2004`` test set (Read-Again 4.2); an ``optional`` one
whose raw input is absent is skipped with a message (DUC 2004 when the user has not supplied it).

Optional ``subword: {vocab_size: N, model_type: unigram|bpe, drop_columns: [...]}`` in any corpus's
settings re-tokenises its shards with sentencepiece, trained on the train split only; the model
(``subword.model``/``.vocab``) is written beside the splits, so it is versioned with them.

``parallel`` (:class:`ParallelConfig`): how the flow maps CPU-bound chunks: Prefect tasks on a local
process pool, or on a Dask cluster with ``task_runner: dask`` (the optional ``[dask]`` extra).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic.dataclasses import dataclass as pydantic_dataclass

from pipeline.config.checks import check_subword, check_task_name
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.schema import SETTINGS, ParallelSettings, build
from pipeline.config.validation import SettingsError
from pipeline.data.corpora import reader_module
from pipeline.data.text.subword import retokenize_corpus, train_sentencepiece_from_corpus
from pipeline.io.files import copy_dir_atomic, write_json_atomic
from pipeline.io.shards import portable, portable_paths, remove_stale_scratch, scratch_in, scratch_parent

PATH_SUFFIXES = ("_dir", "_file")


def raw_input_paths(settings: dict) -> dict[str, list[str]]:
    """The reader settings that name paths relative to the task's raw input, with their paths:
    ``*_dir``/``*_file`` (one each) and ``*_files`` (a list); ``cache_dir`` (relative to the project
    root) and unset settings are left out."""
    out = {}
    for key, value in settings.items():
        if key == "cache_dir" or value is None:
            continue
        if key.endswith(PATH_SUFFIXES):
            out[key] = [value]
        elif key.endswith("_files"):
            out[key] = list(value)
    return out


def resolve_paths(settings: dict, raw_root: Path, root: Path) -> dict:
    """Make every path setting absolute: those of :func:`raw_input_paths` relative to ``raw_root``,
    ``cache_dir`` relative to the project ``root``."""

    def resolve(value: str, base: Path) -> str:
        return value if os.path.isabs(value) else str(base / value)

    out = dict(settings)
    for key, values in raw_input_paths(settings).items():
        resolved = [resolve(v, raw_root) for v in values]
        out[key] = resolved if key.endswith("_files") else resolved[0]
    if settings.get("cache_dir") is not None:
        out["cache_dir"] = resolve(settings["cache_dir"], root)
    return out


@pydantic_dataclass(frozen=True, config=SETTINGS)
class ParallelConfig(ParallelSettings):
    """The ``parallel`` section of params.yaml (the schema's :class:`~pipeline.config.schema.ParallelSettings`),
    ``workers: 0`` made concrete: one per CPU core."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", int(self.workers) or os.cpu_count() or 1)

    @classmethod
    def from_params(cls, params: dict) -> ParallelConfig:
        return build(cls, params.get("parallel"), "parallel")

    @property
    def local_pool(self) -> bool:
        """Whether chunks go to a local process pool (the local runner with more than one worker)."""
        return self.task_runner == "local" and self.workers > 1


def write_subword_splits(module, cfg, out_root: Path, subword: dict, map_chunks) -> dict:
    """The reader's word-level splits go to a scratch directory (:func:`scratch_parent`); sentencepiece,
    trained on its train split, re-tokenises them into ``out_root``, which also receives the model."""
    words_root = scratch_parent(out_root) / f".{out_root.name}.words"
    shutil.rmtree(words_root, ignore_errors=True)
    try:
        module.write_splits(cfg, words_root, map_chunks=map_chunks)
        drop = subword.pop("drop_columns", ())
        model = train_sentencepiece_from_corpus(words_root, words_root / "subword", **subword)
        manifests = retokenize_corpus(words_root, out_root, model, drop_columns=drop, map_chunks=map_chunks)
        for suffix in (".model", ".vocab"):
            shutil.copy2(model.with_suffix(suffix), out_root / f"subword{suffix}")
        return manifests
    finally:
        shutil.rmtree(words_root, ignore_errors=True)


def write_extra_split(
    params: dict, root: Path, raw_root: Path, out_root: Path, name: str, extra: dict, map_chunks
) -> dict | None:
    """Prepare ``extra['corpus']`` with its own reader into a scratch directory and move its split
    ``extra['split']`` to ``out_root/<name>``; None when an optional raw input is absent."""
    unknown = sorted(set(extra) - {"corpus", "split", "raw", "optional"})
    if unknown or "corpus" not in extra or "raw" not in extra:
        raise ValueError(f"extra_splits.{name}: needs corpus and raw (optional: split, optional), got {sorted(extra)}")
    other_raw = raw_root / extra["raw"]
    if not other_raw.exists():
        if extra.get("optional"):
            print(f"extra split {name}: {other_raw} is absent; skipped (optional)")
            shutil.rmtree(out_root / name, ignore_errors=True)
            return None
        raise FileNotFoundError(f"extra split {name}: raw input {other_raw} does not exist")
    settings = dict(section(params, "prepare", extra["corpus"]))
    module = reader_module(settings.pop("reader", None) or "")
    cfg = module.Config.from_dict(resolve_paths(settings, other_raw, root))
    scratch = scratch_parent(out_root) / f".{out_root.name}.{name}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        module.write_splits(cfg, scratch, map_chunks=map_chunks)
        source = scratch / extra.get("split", "test")
        if not source.is_dir():
            raise ValueError(
                f"extra split {name}: reader {extra['corpus']} wrote no split {extra.get('split', 'test')!r}"
            )
        manifest_path = source / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest["prepared_as"] = portable(
            {"corpus": extra["corpus"], "split": extra.get("split", "test"), "raw": str(other_raw)}
        )
        write_json_atomic(manifest_path, manifest)
        shutil.rmtree(out_root / name, ignore_errors=True)
        try:
            source.rename(out_root / name)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            copy_dir_atomic(source, out_root / name)  # the scratch folder is on another file system
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class PrepareJob:
    """What prepare@<corpus> runs: the reader module, its ``Config``, the optional ``subword`` and
    ``extra_splits`` settings, the ``parallel`` settings, and where the raw input and the shards are."""

    corpus: str
    module: ModuleType
    cfg: Any
    subword: dict | None
    extra_splits: dict
    params: dict
    root: Path
    raw_root: Path
    out_root: Path
    parallel: ParallelConfig = ParallelConfig()


def prepare_job(corpus: str, params_path: str | None = None) -> PrepareJob:
    """Read ``corpus``'s settings: its reader (``reader_module``), the reader's ``Config`` (paths
    resolved against the task's raw input), and ``data/shards/<corpus>`` as the output."""
    params = load_params(params_path)
    root = project_root(params_path)
    check_task_name(corpus)
    try:
        settings = dict(section(params, "prepare", corpus))
        module = reader_module(settings.pop("reader", None) or "")
        subword = settings.pop("subword", None)
        check_subword(subword, f"prepare.{corpus}.subword")
        extra_splits = settings.pop("extra_splits", None) or {}
        raw = (params.get("tasks") or {}).get(corpus)
        raw_root = root / raw if raw is not None else root
        cfg = module.Config.from_dict(resolve_paths(settings, raw_root, root))
    except SettingsError:
        raise
    except (KeyError, ValueError, TypeError) as err:  # the reader's own checks: a setting's message
        raise SettingsError(f"prepare.{corpus}: {err.args[0] if err.args else err}") from err
    out_root = TaskPaths(corpus, root).shards
    parallel = ParallelConfig.from_params(params)
    return PrepareJob(corpus, module, cfg, subword, extra_splits, params, root, raw_root, out_root, parallel)


def scratch_prefixes(out_root: Path) -> list[str]:
    """The names of the scratch directories a prepare of ``out_root`` makes: ``.<task>.words``
    (subword), ``.<task>.<extra split>``, readers' ``.<task>.spill-*`` / ``.<task>.stage-*``, and a
    spill of the words' splits (``..<task>.words.spill-*``). Task names have no dots, so another
    task's never match."""
    return [f".{out_root.name}.", f"..{out_root.name}."]


def scratch_folder(root: Path) -> Path:
    """Where the prepare stage keeps its scratch (:func:`pipeline.io.shards.scratch_in`): ``data/tmp/prepare``,
    gitignored and outside every DVC output, so neither ``git status`` nor a DVC restore ever meets a
    scratch directory a killed run left in ``data/shards/``."""
    return Path(root) / "data" / "tmp" / "prepare"


def write_job(job: PrepareJob, map_chunks: Callable) -> dict:
    """The prepare stage's work: the reader's splits (re-tokenised when ``subword`` is set), then the
    extra splits; return the manifests by split. Scratch goes to :func:`scratch_folder`. First, whatever
    scratch an earlier run of this task left there, or beside ``data/shards/<task>`` where it went before
    (a run killed with SIGKILL cannot remove its own), is removed; a live run's locked scratch is left
    alone (DVC runs one prepare of a task at a time)."""
    scratch = scratch_folder(job.root)
    for parent in (job.out_root.parent, scratch):
        remove_stale_scratch(parent, scratch_prefixes(job.out_root))
    # A manifest names a scratch path as it was named when scratch went beside the output
    # (data/shards/.<task>.words/...): the same data keeps giving the same manifest bytes.
    beside = ("/".join(job.out_root.parent.relative_to(job.root).parts), scratch)
    with portable_paths([*path_bases(job.params, job.root), beside]), scratch_in(scratch):
        return _write_job(job, map_chunks)


def path_bases(params: dict, root: Path) -> list[tuple[str, Path]]:
    """What paths in a manifest are written relative to (:func:`pipeline.io.shards.portable_paths`):
    ``data.shared_root`` (as ``{data.shared_root}/...``) and the project root (plain relative paths)."""
    bases: list[tuple[str, Path]] = [("", root)]
    shared = (params.get("data") or {}).get("shared_root")
    if isinstance(shared, str) and shared:
        bases.append(("{data.shared_root}", root / shared))
    return bases


def _write_job(job: PrepareJob, map_chunks: Callable) -> dict:
    if not job.subword:
        manifests = job.module.write_splits(job.cfg, job.out_root, map_chunks=map_chunks)
    else:
        manifests = write_subword_splits(job.module, job.cfg, job.out_root, dict(job.subword), map_chunks)
    for name, extra in job.extra_splits.items():
        manifest = write_extra_split(job.params, job.root, job.raw_root, job.out_root, name, extra, map_chunks)
        if manifest is not None:
            manifests[name] = manifest
    return manifests


def summary(corpus: str, manifests: dict) -> str:
    """One line per split: rows written and quarantined, by reason."""
    lines = []
    for split, m in manifests.items():
        reasons = ", ".join(f"{r} {n}" for r, n in m["quarantine_reasons"].items())
        lines.append(
            f"{corpus}/{split}: {m['rows']} rows, {m['rows_quarantined']} quarantined"
            + (f" ({reasons})" if reasons else "")
        )
    return "\n".join(lines)
