"""prepare@<corpus>: one corpus (or generator) into Arrow shards + manifests + quarantine, as a Prefect
flow around :func:`pipeline.data.prepare.write_job` (the settings: :mod:`pipeline.data.prepare`).

CPU-bound work is mapped over chunks as Prefect tasks (retried on failure) that run in a local
process pool, or on a Dask cluster when ``parallel.task_runner: dask`` (the optional ``[dask]`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

import flows  # cli (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.config.validation import SettingsError
from pipeline.data.prepare import ParallelConfig, prepare_job, summary, write_job
from pipeline.io.dask_probe import check_dask_address
from pipeline.io.parallel import bounded_ordered_map, process_pool

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


def task_runner(parallel: ParallelConfig):
    """ThreadPoolTaskRunner (local: tasks hand chunks to a process pool) or DaskTaskRunner."""
    if parallel.task_runner == "local":
        return ThreadPoolTaskRunner(max_workers=max(1, parallel.workers))
    try:
        from prefect_dask import DaskTaskRunner  # the optional [dask] extra, heavy: only for this runner
    except ImportError as err:
        raise SettingsError(
            "parallel.task_runner is 'dask' but its optional extra is not installed: pip install -e '.[dask]'"
        ) from err
    if parallel.dask_address:
        check_dask_address(parallel.dask_address)  # a scheduler answers there (else one line, within seconds)
        return DaskTaskRunner(address=parallel.dask_address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": parallel.workers, "processes": True})


def prepare_corpus(corpus: str, params_path: str | None = None) -> dict:
    """Read ``corpus``'s settings, run its reader into ``data/shards/<corpus>``; return manifests."""
    global _POOL
    job = prepare_job(corpus, params_path)
    parallel = job.parallel

    @flow(name="prepare", flow_run_name=f"prepare-{corpus}", task_runner=task_runner(parallel))
    def prepare_flow() -> dict:
        return write_job(job, prefect_map(parallel.workers, parallel.local_pool))

    if parallel.local_pool:
        _POOL = process_pool(parallel.workers)  # started now, before any locked directory; dies with us
    try:
        manifests = prepare_flow()
    finally:
        if _POOL is not None:
            _POOL.shutdown(cancel_futures=True)
            _POOL = None
    print(summary(corpus, manifests))
    return manifests


if __name__ == "__main__":
    flows.cli(prepare_corpus, __doc__, "corpus")
