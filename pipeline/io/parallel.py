"""Ordered, bounded mapping of CPU-bound work over chunks of records.

Readers take a ``map_chunks(fn, chunks)`` argument: ``fn`` is a picklable function (module level,
or a ``functools.partial`` of one) applied to every chunk; results come back *in input order*
as an iterator. ``serial_map`` runs in the calling process; ``ProcessMap`` fans chunks out to a
process pool (the GIL makes threads useless for tokenisation and segmentation). At most
``max_in_flight`` chunks are pending at once, so memory stays flat however long the input is.
The ``prepare`` flow wraps the same idea in Prefect tasks (retries, optional Dask runner).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")


def serial_map(fn: Callable[[A], R], chunks: Iterable[A]) -> Iterator[R]:
    """Apply ``fn`` to each chunk here, lazily, in order."""
    for chunk in chunks:
        yield fn(chunk)


def chunked(items: Iterable[A], size: int) -> Iterator[list[A]]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    chunk: list[A] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def bounded_ordered_map(
    submit: Callable[[Callable[[A], R], A], object],
    result: Callable[[object], R],
    fn: Callable[[A], R],
    chunks: Iterable[A],
    max_in_flight: int,
) -> Iterator[R]:
    """Submit chunks as futures, keep at most ``max_in_flight`` pending, yield results in order."""
    pending: deque = deque()
    for chunk in chunks:
        pending.append(submit(fn, chunk))
        if len(pending) >= max_in_flight:
            yield result(pending.popleft())
    while pending:
        yield result(pending.popleft())


PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent() -> None:
    """A pool worker's initializer: the kernel kills this process (SIGKILL) when the process that
    started it dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing). Without it, workers of a
    prepare killed with SIGKILL live on, orphaned, holding memory and any locked directory handle
    they inherited, so the next run could not tell the dead run's scratch from a live one."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call: nobody will signal us
        os._exit(1)


def _ready(_: int) -> int:
    return os.getpid()


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process (:func:`die_with_parent`), all started now:
    forked before the caller opens any locked scratch or temporary directory, they inherit none of
    those handles (a worker holding a copy would keep a dead run's lock alive)."""
    pool = ProcessPoolExecutor(workers, initializer=die_with_parent)
    list(pool.map(_ready, range(workers)))
    return pool


class ProcessMap:
    """``map_chunks`` over a process pool; a context manager that shuts the pool down.

    ``workers=0`` means one per CPU core; ``workers=1`` runs serially (no pool, no pickling).
    """

    def __init__(self, workers: int = 0, max_in_flight: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.max_in_flight = max_in_flight or 2 * self.workers
        self._pool: Executor | None = None

    def __enter__(self) -> ProcessMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __call__(self, fn: Callable[[A], R], chunks: Iterable[A]) -> Iterator[R]:
        if self.workers == 1:
            return serial_map(fn, chunks)
        if self._pool is None:
            self._pool = process_pool(self.workers)
        pool = self._pool
        return bounded_ordered_map(pool.submit, lambda f: f.result(), fn, chunks, self.max_in_flight)
