"""Ordered, bounded mapping of CPU-bound work over chunks of records.

Readers take a ``map_chunks(fn, chunks)`` argument: ``fn`` is a picklable function (module level,
or a ``functools.partial`` of one) applied to every chunk; results come back *in input order*
as an iterator. ``serial_map`` runs in the calling process; ``ProcessMap`` fans chunks out to a
process pool (the GIL makes threads useless for tokenisation and segmentation). At most
``max_in_flight`` chunks are pending at once, so memory stays flat however long the input is.
The ``prepare`` flow wraps the same idea in Prefect tasks (retries, optional Dask runner).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Protocol, TypeVar

A = TypeVar("A")
R = TypeVar("R")


class MapChunks(Protocol):
    def __call__(self, fn: Callable[[A], R], chunks: Iterable[A]) -> Iterator[R]: ...


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
            self._pool = ProcessPoolExecutor(self.workers)
        pool = self._pool
        return bounded_ordered_map(pool.submit, lambda f: f.result(), fn, chunks, self.max_in_flight)
