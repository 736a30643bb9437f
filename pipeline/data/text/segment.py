"""Chinese tokenisation for the LCSTS views: characters, or jieba words cached by content hash.

CopyNet (Gu et al. 2016, section 5.2) trains a character-based (+C) and a word-based (+W) model on
LCSTS; "for the word-based variant the word-segmentation is obtained with jieba". WEAN (Ma et al.
2018, section 3.2.3) splits "the Chinese sentences into characters" only. Two tokenisers:

* :func:`char_tokens`: every non-whitespace character is one token (ASCII letters and digits
  included: ``"P2P"`` -> ``P 2 P``; neither paper says otherwise);
* :class:`Segmenter`: ``jieba.lcut(text, HMM=hmm)`` with whitespace never part of a token
  (jieba emits spaces as tokens; they are dropped). The CPU-bound jieba calls run in
  :func:`jieba_chunk`, a module-level function over a chunk of texts, through the injected
  ``map_chunks`` (a process pool or Prefect tasks; jieba holds the GIL).

The cache (:class:`SegmentCache`) makes re-runs free: one SQLite file
``<cache_dir>/segments.sqlite``, table ``seg(key BLOB PRIMARY KEY, tokens TEXT)``, where ``key`` is
a 128-bit BLAKE2b of (:data:`SCHEME`, jieba version, HMM flag, text) and ``tokens`` the tokens
joined by single spaces (jieba's bundled dictionary is assumed: no user dictionaries). The calling process looks every chunk up in one batched query before it
goes to a worker, so only misses reach jieba, and writes the worker's answers back in one
transaction per chunk. SQLite rather than an Arrow/Parquet file because it gives keyed, batched
lookups without reading the whole cache into memory (LCSTS PART_I has ~4.8M texts), and its
transactions make each write all-or-nothing: a process killed mid-write leaves the last committed
state (WAL recovery), never a corrupt file. Vocabulary sizes (3,000 characters / 10,000 words for
CopyNet, 4,000 characters for WEAN) are the vocab stage's business, not this module's.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import jieba

from pipeline.io.parallel import serial_map

SCHEME = "jieba-seg/1"  # bump when the post-processing of jieba's output changes
CACHE_FILE = "segments.sqlite"
_SQL_BATCH = 900  # host parameters per SELECT (under SQLite's historic limit of 999)


# --------------------------------------------------------------------------- #
# Tokenisers (module level: they run in worker processes)
# --------------------------------------------------------------------------- #


def char_tokens(text: str) -> list[str]:
    """Every non-whitespace character of ``text``, in order."""
    return list("".join(text.split()))


def char_chunk(texts: list[str]) -> list[list[str]]:
    """:func:`char_tokens` of each text (the ``map_chunks`` function of the char view)."""
    return [char_tokens(t) for t in texts]


def _quiet_jieba() -> None:
    """Load jieba's dictionary (once per process) without its DEBUG chatter on stderr."""
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()


def jieba_chunk(hmm: bool, texts: list[str]) -> list[str]:
    """jieba's words of each text, joined by single spaces (whitespace dropped; runs in a worker).

    A joined string, not a token list: it is the cache's stored form, and one string per text
    pickles back from the worker far cheaper than a list of tiny strings.
    """
    _quiet_jieba()
    return [" ".join(" ".join(jieba.lcut(t, HMM=hmm)).split()) for t in texts]


def jieba_version() -> str:
    return jieba.__version__


def _key_prefix(hmm: bool, version: str) -> hashlib.blake2b:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{SCHEME}\x00{version}\x00{int(hmm)}\x00".encode())
    return h


def cache_key(text: str, hmm: bool, version: str | None = None) -> bytes:
    """The 16-byte cache key of ``text`` segmented by jieba ``version`` with the given HMM flag."""
    h = _key_prefix(hmm, version or jieba_version())
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.digest()


# --------------------------------------------------------------------------- #
# The persistent cache
# --------------------------------------------------------------------------- #


class SegmentCache:
    """``key -> space-joined tokens`` in ``<cache_dir>/segments.sqlite``; use as a context manager.

    Only the process that owns it reads and writes it (workers never touch it). Every
    :meth:`put_many` is one transaction.
    """

    def __init__(self, cache_dir: str | Path, timeout_s: float = 60.0) -> None:
        self.path = Path(cache_dir) / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout_s)
            self._db.execute("PRAGMA journal_mode=WAL")  # readers never block; crash-safe commits
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable up to power loss
            with self._db:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS seg (key BLOB PRIMARY KEY, tokens TEXT NOT NULL) WITHOUT ROWID"
                )
        except sqlite3.DatabaseError as err:
            raise RuntimeError(f"segment cache {self.path} is unreadable ({err}); delete it to rebuild") from err

    def __enter__(self) -> SegmentCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM seg").fetchone()[0]

    def get_many(self, keys: list[bytes]) -> dict[bytes, str]:
        """The cached entries among ``keys`` (batched queries)."""
        found: dict[bytes, str] = {}
        for start in range(0, len(keys), _SQL_BATCH):
            batch = keys[start : start + _SQL_BATCH]
            marks = ",".join("?" * len(batch))
            found.update(self._db.execute(f"SELECT key, tokens FROM seg WHERE key IN ({marks})", batch))
        return found

    def put_many(self, items: Iterable[tuple[bytes, str]]) -> None:
        """Store ``(key, joined tokens)`` pairs in one transaction (all or nothing)."""
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO seg (key, tokens) VALUES (?, ?)", items)

    def integrity_ok(self) -> bool:
        return self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# --------------------------------------------------------------------------- #
# The segmenter
# --------------------------------------------------------------------------- #


class Segmenter:
    """jieba over chunks of texts: cache lookups here, misses through ``map_chunks``, results cached.

    ``counts`` after a run: ``texts`` seen, ``cache_hits``, ``segmented`` (distinct texts sent to
    jieba), ``seconds`` spent waiting on the map. They describe the run, not the data, so readers
    log them rather than putting them into manifests.
    """

    def __init__(self, hmm: bool = True, cache_dir: str | Path | None = None) -> None:
        _quiet_jieba()
        self.hmm = hmm
        self.version = jieba_version()
        self.cache = SegmentCache(cache_dir) if cache_dir is not None else None
        self._prefix = _key_prefix(hmm, self.version)
        self.counts = {"texts": 0, "cache_hits": 0, "segmented": 0}

    def __enter__(self) -> Segmenter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def _key(self, text: str) -> bytes:
        h = self._prefix.copy()
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def segment_chunks(
        self, chunks: Iterable[list[str]], map_chunks: Callable = serial_map
    ) -> Iterator[list[list[str]]]:
        """For each chunk of texts, in order, the token list of each text."""
        pending: deque[tuple[list[bytes], dict[bytes, str], list[bytes]]] = deque()

        def misses() -> Iterator[list[str]]:
            # Runs in this process as map_chunks pulls chunks: one batched lookup per chunk.
            for texts in chunks:
                keys = [self._key(t) for t in texts]
                found = self.cache.get_many(keys) if self.cache is not None else {}
                todo: dict[bytes, str] = {}  # distinct misses, in order
                for key, text in zip(keys, texts):
                    if key not in found:
                        todo.setdefault(key, text)
                pending.append((keys, found, list(todo)))
                self.counts["texts"] += len(texts)
                self.counts["cache_hits"] += sum(k in found for k in keys)
                yield list(todo.values())  # maybe empty: keeps one task per chunk, so memory stays flat

        for joined in map_chunks(functools.partial(jieba_chunk, self.hmm), misses()):
            keys, found, todo_keys = pending.popleft()
            new = dict(zip(todo_keys, joined))
            if new and self.cache is not None:
                self.cache.put_many(new.items())
            self.counts["segmented"] += len(new)
            found.update(new)
            yield [found[k].split() for k in keys]


def segment_texts(texts: list[str], hmm: bool = True, cache_dir: str | Path | None = None) -> list[list[str]]:
    """Segment a small list of texts here (no pool); a convenience for tests and tools."""
    with Segmenter(hmm, cache_dir) as seg:
        return next(seg.segment_chunks([texts]), []) if texts else []
