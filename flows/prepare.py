"""prepare@<corpus>: turn one corpus (or generator) into Arrow shards + manifests + quarantine.

``params.yaml``: ``tasks`` maps each task (= the corpus it is trained on) to its raw input (the
file or directory DVC watches); ``prepare.<corpus>`` holds the reader's settings, ``reader`` naming
the module in ``pipeline/data/corpora``. Settings whose names end in ``_dir``/``_file`` (or ``_files``, a list) are
paths relative to that raw input, except ``cache_dir`` (a working cache, e.g. jieba's
segmentations), which is relative to the project root.

Optional ``extra_splits: {<split>: {corpus: <other prepare section>, split: <its split>, raw: <its raw
input, relative to this corpus's>, optional: <bool>}}`` adds splits that another reader prepares, e.g.
Gigaword's ``valid`` = DUC 2003 and its ``duc2004`` test set (Read-Again 4.2); an ``optional`` one
whose raw input is absent is skipped with a message (DUC 2004 when the user has not supplied it).

Optional ``subword: {vocab_size: N, model_type: unigram|bpe, drop_columns: [...]}`` in any
corpus's settings re-tokenises its shards with sentencepiece, trained on the train split only; the
model (``subword.model``/``.vocab``) is written beside the splits, so it is versioned with them. CPU-bound work is mapped over chunks as Prefect tasks (retried
on failure) that run in a local process pool, or on a Dask cluster when
``parallel.task_runner: dask`` (the optional ``[dask]`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # cli (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.data.corpora import reader_module
from pipeline.io.files import write_json_atomic
from pipeline.io.parallel import bounded_ordered_map

PATH_SUFFIXES = ("_dir", "_file")


def resolve_paths(settings: dict, raw_root: Path, root: Path) -> dict:
    """Make every ``*_dir``/``*_file``/``*_files`` setting absolute, relative to ``raw_root``
    (``cache_dir``: relative to the project ``root``)."""

    def resolve(value: Any, base: Path = raw_root) -> Any:
        return value if value is None or os.path.isabs(value) else str(base / value)

    out = dict(settings)
    for key, value in settings.items():
        if key == "cache_dir":
            out[key] = resolve(value, root)
        elif key.endswith(PATH_SUFFIXES):
            out[key] = resolve(value)
        elif key.endswith("_files") and value is not None:
            out[key] = [resolve(v) for v in value]
    return out


# --------------------------------------------------------------------------- #
# Chunk mapping as Prefect tasks
# --------------------------------------------------------------------------- #

_POOL: ProcessPoolExecutor | None = None  # the local process pool behind the thread-pool runner


@task(retries=2, retry_delay_seconds=1, cache_policy=NONE)
def run_chunk(fn: Callable, chunk: Any, local_pool: bool) -> Any:
    """One chunk of CPU-bound work; with the local runner it runs in the flow's process pool."""
    if local_pool and _POOL is not None:
        return _POOL.submit(fn, chunk).result()
    return fn(chunk)


def prefect_map(workers: int, local_pool: bool) -> Callable[[Callable, Iterable], Iterator]:
    """``map_chunks`` for readers: every chunk a Prefect task, results in order, bounded in flight."""

    def map_chunks(fn: Callable, chunks: Iterable) -> Iterator:
        return bounded_ordered_map(
            lambda f, c: run_chunk.submit(f, c, local_pool), lambda fut: fut.result(), fn, chunks, 2 * workers
        )

    return map_chunks


def task_runner(runtime: dict):
    """ThreadPoolTaskRunner (local: tasks hand chunks to a process pool) or DaskTaskRunner."""
    kind = runtime.get("task_runner", "local")
    if kind == "local":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=max(1, runtime["workers"]))
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as err:  # optional extra
            raise RuntimeError("parallel.task_runner: dask needs the optional extra: pip install -e '.[dask]'") from err
        address = runtime.get("dask_address")
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": runtime["workers"], "processes": True})
    raise ValueError(f"parallel.task_runner must be 'local' or 'dask', got {kind!r}")


def runtime_settings(params: dict) -> dict:
    runtime = {"task_runner": "local", "workers": 0, "dask_address": None, **params.get("parallel", {})}
    runtime["workers"] = int(runtime["workers"]) or os.cpu_count() or 1
    return runtime


# --------------------------------------------------------------------------- #
# The flow
# --------------------------------------------------------------------------- #


def write_subword_splits(module, cfg, out_root: Path, subword: dict, map_chunks) -> dict:
    """The reader's word-level splits go to a hidden sibling; sentencepiece, trained on its train
    split, re-tokenises them into ``out_root``, which also receives the model."""
    import shutil

    from pipeline.data.text.subword import retokenize_corpus, train_sentencepiece_from_corpus

    words_root = out_root.parent / f".{out_root.name}.words"
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
    import json
    import shutil

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
    scratch = out_root.parent / f".{out_root.name}.{name}"
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
        manifest["prepared_as"] = {
            "corpus": extra["corpus"],
            "split": extra.get("split", "test"),
            "raw": str(other_raw),
        }
        write_json_atomic(manifest_path, manifest)
        shutil.rmtree(out_root / name, ignore_errors=True)
        source.rename(out_root / name)
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class PrepareJob:
    """What prepare@<corpus> runs: the reader module, its ``Config``, the optional ``subword`` and
    ``extra_splits`` settings, and where the raw input and the shards are."""

    corpus: str
    module: ModuleType
    cfg: Any
    subword: dict | None
    extra_splits: dict
    params: dict
    root: Path
    raw_root: Path
    out_root: Path


def prepare_job(corpus: str, params_path: str | None = None) -> PrepareJob:
    """Read ``corpus``'s settings: its reader (``reader_module``), the reader's ``Config`` (paths
    resolved against the task's raw input), and ``data/shards/<corpus>`` as the output."""
    params = load_params(params_path)
    root = project_root(params_path)
    settings = dict(section(params, "prepare", corpus))
    module = reader_module(settings.pop("reader", None) or "")
    subword = settings.pop("subword", None)
    extra_splits = settings.pop("extra_splits", None) or {}
    raw = (params.get("tasks") or {}).get(corpus)
    raw_root = root / raw if raw is not None else root
    cfg = module.Config.from_dict(resolve_paths(settings, raw_root, root))
    return PrepareJob(
        corpus, module, cfg, subword, extra_splits, params, root, raw_root, TaskPaths(corpus, root).shards
    )


def write_job(job: PrepareJob, map_chunks: Callable) -> dict:
    """The prepare flow's work, with no Prefect in it: the reader's splits (re-tokenised when
    ``subword`` is set), then the extra splits; return the manifests by split."""
    if not job.subword:
        manifests = job.module.write_splits(job.cfg, job.out_root, map_chunks=map_chunks)
    else:
        manifests = write_subword_splits(job.module, job.cfg, job.out_root, dict(job.subword), map_chunks)
    for name, extra in job.extra_splits.items():
        manifest = write_extra_split(job.params, job.root, job.raw_root, job.out_root, name, extra, map_chunks)
        if manifest is not None:
            manifests[name] = manifest
    return manifests


def prepare_corpus(corpus: str, params_path: str | None = None) -> dict:
    """Read ``corpus``'s settings, run its reader into ``data/shards/<corpus>``; return manifests."""
    global _POOL
    job = prepare_job(corpus, params_path)
    runtime = runtime_settings(job.params)
    local_pool = runtime["task_runner"] == "local" and runtime["workers"] > 1

    @flow(name="prepare", flow_run_name=f"prepare-{corpus}", task_runner=task_runner(runtime))
    def prepare_flow() -> dict:
        return write_job(job, prefect_map(runtime["workers"], local_pool))

    if local_pool:
        _POOL = ProcessPoolExecutor(runtime["workers"])
    try:
        manifests = prepare_flow()
    finally:
        if _POOL is not None:
            _POOL.shutdown(cancel_futures=True)
            _POOL = None
    for split, m in manifests.items():
        reasons = ", ".join(f"{r} {n}" for r, n in m["quarantine_reasons"].items())
        print(
            f"{corpus}/{split}: {m['rows']} rows, {m['rows_quarantined']} quarantined"
            + (f" ({reasons})" if reasons else "")
        )
    return manifests


if __name__ == "__main__":
    flows.cli(prepare_corpus, __doc__, "corpus")
