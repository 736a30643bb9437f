"""A set of 8-byte keys at 8 bytes a key, for deduplicating corpora of millions of pairs (shared by
readers, not a reader itself: ``NOT_READERS``).

A Python ``set`` of 8-byte ``bytes`` costs about 75 bytes a key (the object, its hash slot and the
table's spare room): 145 MB for two million pairs, the whole of the parallel reader's memory growth
from 200,000 to 2,000,000 pairs (docs/corpora.md, "Scale"). Here the keys live as ``uint64`` in one
sorted numpy array, plus a small Python set of the keys added since the last merge; a lookup is a
set probe and a binary search. The pending keys are merged in every ``pending_limit`` keys: 31
merges for two million keys (tests/pipeline/data/test_keyset.py; the time is in the benchmark's
prepare rows).

No library does this: pyarrow/polars deduplicate whole tables (the corpus in memory), and Bloom
filters answer "maybe" (a false positive would quarantine a row that is not a duplicate).
"""

from __future__ import annotations

import numpy as np


class KeySet:
    """``add`` (True when new) / ``in`` / ``len`` for 8-byte keys (``bytes`` of length 8)."""

    def __init__(self, pending_limit: int = 65_536) -> None:
        self._merged = np.empty(0, dtype=np.uint64)  # sorted, distinct
        self._pending: set[int] = set()
        self._pending_limit = pending_limit

    @staticmethod
    def _as_int(key: bytes) -> int:
        if len(key) != 8:
            raise ValueError(f"KeySet holds 8-byte keys, got {len(key)} bytes")
        return int.from_bytes(key, "little")

    def __contains__(self, key: bytes) -> bool:
        value = self._as_int(key)
        if value in self._pending:
            return True
        merged = self._merged
        i = int(np.searchsorted(merged, np.uint64(value)))
        return i < merged.size and int(merged[i]) == value

    def add(self, key: bytes) -> bool:
        """Add ``key``; True when it was not there yet (one lookup for the test and the insert)."""
        if key in self:
            return False
        self._pending.add(self._as_int(key))
        if len(self._pending) >= self._pending_limit:
            self._merge()
        return True

    def _merge(self) -> None:
        fresh = np.fromiter(self._pending, dtype=np.uint64, count=len(self._pending))
        combined = np.concatenate([self._merged, fresh])
        combined.sort()  # in place: at most the old and the new array at once
        self._merged, self._pending = combined, set()

    def __len__(self) -> int:
        return int(self._merged.size) + len(self._pending)

    @property
    def nbytes(self) -> int:
        """The merged array's bytes (the pending set adds at most ``pending_limit`` Python ints)."""
        return int(self._merged.nbytes)
