"""What every corpus reader shares: bad-input errors, quarantine records, and the split writer.

A reader turns raw files into a stream of *rows* (dicts with the shard columns: ``id``, ``src``,
``tgt``, ``refs`` and the corpus's extra columns) and :class:`Quarantined` items (a raw record
that could not become a row, with its reason and ``file:line``). :func:`write_corpus` sends each
stream through :class:`~pipeline.io.shards.ShardWriter`, so ``rows_in == rows + rows_quarantined``
holds per split and lands in the manifest, and removes from *train* (into the quarantine, with a
reason, never silently):

* ``duplicate_pair``: an exact (src, tgt) duplicate of an earlier train row;
* ``src_in_<split>``: a train row whose source is identical to a source of an evaluation split
  (train/test leakage).

Evaluation splits are written first so their sources are known when train streams through. The
writer keeps one 8-byte hash per distinct train pair and evaluation source (a Python set: about
70 bytes each, ~270 MB for Gigaword's 3.8M pairs); everything else streams. Every split is
finished in its temporary directory before any is published, and a split left without rows (an
empty input, or every record quarantined) raises :class:`EmptySplitError` naming its input files
(unless the reader declares the split optional): a failed run publishes nothing.

What every reader applies to hostile input, through the helpers here:

* :func:`open_input` -- the one way readers open an input file: gzip data (the ``.gz`` suffix or
  the gzip magic bytes) is decompressed, and a truncated or corrupt stream raises
  ``CorpusFormatError`` naming the file and the line reached (never a bare ``EOFError``);
  :func:`resolve_input` finds ``name.gz`` where a reader builds the file name ``name`` itself;
* :class:`TextLimits` -- ``max_line_chars`` / ``max_token_chars`` (every reader's ``Config`` has
  both): a record with a NUL character (``nul_byte``), a line over ``max_line_chars`` characters
  (``line_too_long``) or a whitespace-separated token over ``max_token_chars`` characters
  (``token_too_long``) is quarantined with its ``file:line``, never written to a shard.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import pickle
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from pipeline.io.shards import ShardWriter

WRITE_CHUNK = 10_000  # rows handed to the shard writer at once
MAX_LINE_CHARS = 10_000  # default per-line limit (characters): longer lines are absurd input
MAX_TOKEN_CHARS = 500  # default per-token limit: the longest token in ../shared/data has 154 (a URL)
GZIP_MAGIC = b"\x1f\x8b"
PREVIEW_CHARS = 300  # characters of a hostile line kept in its quarantine record


class CorpusFormatError(ValueError):
    """A malformed input *file* (not a single bad record): the message names file and line."""

    def __init__(self, path: str | Path, line: int | None, what: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {what}")
        self.path, self.line, self.what = str(path), line, what

    def __reduce__(self):  # picklable, so an error raised in a worker process arrives intact
        return (type(self), (self.path, self.line, self.what))


class EmptySplitError(CorpusFormatError):
    """A split that would be written without rows: its input is empty, or every record of it was
    quarantined. Names the split's input files; nothing is published."""

    def __init__(self, split: str, paths: Sequence[str | Path], what: str) -> None:
        self.split, self.paths = split, [str(p) for p in paths]
        super().__init__(", ".join(self.paths) or f"split {split!r}", None, what)

    def __reduce__(self):
        return (type(self), (self.split, self.paths, self.what))


@dataclass(frozen=True)
class Quarantined:
    """A raw record set aside: why, where (``file:line``) and the raw content (JSON-able)."""

    reason: str
    where: str
    record: Any = None


@dataclass
class SplitStats:
    """Counters a reader adds to a split's manifest (e.g. filter rules applied, pointer counts)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


# --------------------------------------------------------------------------- #
# Hostile input: NUL characters, absurd lines and tokens
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TextLimits:
    """A reader's ``max_line_chars`` / ``max_token_chars`` (picklable, for worker specs).

    :meth:`problem` is the check: the first rule a decoded line breaks, in this order --
    ``nul_byte`` (a NUL character: binary data, not text), ``line_too_long`` (more than
    ``max_line_chars`` characters), ``token_too_long`` (a whitespace-separated token of more than
    ``max_token_chars`` characters). A line no longer than ``max_token_chars`` is not split, so the
    check costs one ``in`` and one ``len`` on ordinary lines.
    """

    max_line_chars: int = MAX_LINE_CHARS
    max_token_chars: int = MAX_TOKEN_CHARS

    def __post_init__(self) -> None:
        for name in ("max_line_chars", "max_token_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @classmethod
    def of(cls, cfg: Any) -> TextLimits:
        """The limits of a reader ``Config`` (its ``max_line_chars`` and ``max_token_chars``)."""
        return cls(cfg.max_line_chars, cfg.max_token_chars)

    def problem(self, text: str) -> tuple[str, dict] | None:
        """``(reason, details)`` for the first rule ``text`` (one decoded line) breaks, or None."""
        found = self.line_problem(text)
        if found is None and len(text) > self.max_token_chars:
            return self.token_problem(text.split())
        return found

    def line_problem(self, text: str) -> tuple[str, dict] | None:
        """The NUL and ``max_line_chars`` rules only (for text whose tokens are not whitespace
        separated, e.g. Chinese: its tokens are checked with :meth:`token_problem` once made)."""
        if "\x00" in text:
            return "nul_byte", {"char_offset": text.index("\x00")}
        if len(text) > self.max_line_chars:
            return "line_too_long", {"chars": len(text), "max_line_chars": self.max_line_chars}
        return None

    def token_problem(self, tokens: Iterable[str]) -> tuple[str, dict] | None:
        """``("token_too_long", details)`` if a token is over ``max_token_chars``, else None."""
        longest = max(tokens, key=len, default="")
        if len(longest) > self.max_token_chars:
            return "token_too_long", {
                "token_chars": len(longest),
                "max_token_chars": self.max_token_chars,
                "token_head": longest[:50],
            }
        return None

    def check(self, text: str, where: str, record: dict | None = None) -> Quarantined | None:
        """A ``Quarantined`` for ``text`` (one line, found at ``where``) if it breaks a rule."""
        found = self.problem(text)
        if found is None:
            return None
        reason, details = found
        return Quarantined(reason, where, {**details, **(record if record is not None else {"line": _head(text)})})

    def check_lines(
        self, text: str, path: str | Path, first_line: int, record: dict | None = None
    ) -> Quarantined | None:
        """The first line of multi-line ``text`` (starting at line ``first_line`` of ``path``)
        that breaks a rule, quarantined at ``path:<its line>``; None if none does."""
        if "\x00" not in text and len(text) <= min(self.max_line_chars, self.max_token_chars):
            return None  # no line can break a rule (fast path for ordinary records)
        for offset, line in enumerate(text.split("\n")):
            bad = self.check(line.removesuffix("\r"), f"{path}:{first_line + offset}", record)
            if bad is not None:
                return bad
        return None


DEFAULT_LIMITS = TextLimits()


def _head(text: str) -> str:
    return text[:PREVIEW_CHARS].replace("\x00", "\\x00")


# --------------------------------------------------------------------------- #
# Opening input files (plain or gzip)
# --------------------------------------------------------------------------- #

_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


class GzipInput:
    """A gzip input file read as bytes, like ``open(path, "rb")``: iteration by lines, ``read``,
    ``readline``, a context manager. Decompression errors (a truncated or corrupt stream) become
    ``CorpusFormatError`` at ``path:<line being read>`` (lines counted by iteration/readline)."""

    def __init__(self, path: Path, raw: IO[bytes]) -> None:
        self.path, self.name = path, str(path)
        self._raw = raw
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self.lines = 0  # complete lines handed out so far

    def _error(self, err: Exception) -> CorpusFormatError:
        what = "truncated or corrupt gzip data" if not isinstance(err, gzip.BadGzipFile) else "not valid gzip data"
        return CorpusFormatError(self.path, self.lines + 1, f"{what} ({type(err).__name__}: {err})")

    def __iter__(self) -> Iterator[bytes]:
        try:
            for line in self._gz:
                self.lines += 1
                yield line
        except _GZIP_ERRORS as err:
            raise self._error(err) from err

    def readline(self, size: int = -1) -> bytes:
        try:
            line = self._gz.readline(size)
        except _GZIP_ERRORS as err:
            raise self._error(err) from err
        self.lines += line.endswith(b"\n")
        return line

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._gz.read(size)
        except _GZIP_ERRORS as err:
            raise self._error(err) from err
        self.lines += data.count(b"\n")
        return data

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            self._raw.close()

    def __enter__(self) -> GzipInput:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_input(path: str | Path) -> IO[bytes] | GzipInput:
    """Open a reader's input file for reading bytes: gzip data (a ``.gz`` name or the gzip magic
    bytes) is decompressed on the fly, with errors naming the file (:class:`GzipInput`); anything
    else is the plain file. Every reader opens its inputs here (counting lines too)."""
    path = Path(path)
    raw = open(path, "rb")
    try:
        if path.name.endswith(".gz") or raw.peek(2)[:2] == GZIP_MAGIC:
            return GzipInput(path, raw)
    except BaseException:
        raw.close()
        raise
    return raw


def read_input(path: str | Path) -> bytes:
    """The whole (decompressed) content of an input file, through :func:`open_input`."""
    with open_input(path) as fh:
        return fh.read()


def count_lines(path: str | Path) -> int:
    """Lines of an input file (a last line without its newline counts), read in 1 MiB blocks
    through :func:`open_input` (so a ``.gz`` counts its decompressed lines)."""
    n, last = 0, b"\n"
    with open_input(path) as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def resolve_input(path: str | Path) -> Path:
    """``path``, or ``path.gz`` when only the gzipped file exists (for readers that build their
    file names from a directory and a stem)."""
    path = Path(path)
    if not path.exists():
        gz = path.with_name(path.name + ".gz")
        if gz.exists():
            return gz
    return path


def row_name(name: str) -> str:
    """A file name as it appears in row ids: without a ``.gz`` suffix, so compressing an input
    does not change its rows (quarantine ``where`` keeps the real file name)."""
    return name[:-3] if name.endswith(".gz") else name


# --------------------------------------------------------------------------- #
# Spilling and keys
# --------------------------------------------------------------------------- #


def spill_by_split(pairs: Iterable[tuple[str, Any]], handles: Mapping[str, IO[bytes]]) -> None:
    """Append one chunk's ``(split, item)`` pairs to per-split scratch files: one pickle per split
    per chunk, read back in order by :func:`read_spill`. Scratch files are private to the process
    that wrote them; pickle keeps rows and ``Quarantined`` records together."""
    by_split: dict[str, list] = {}
    for split, item in pairs:
        by_split.setdefault(split, []).append(item)
    for split, items in by_split.items():
        pickle.dump(items, handles[split], protocol=pickle.HIGHEST_PROTOCOL)


def read_spill(path: str | Path) -> Iterator[list]:
    """The chunks a reader spilled to a private scratch file with ``pickle.dump``, one per call,
    in order (a two-pass reader keeps pass 1's output on disk, not in memory)."""
    with open(path, "rb") as fh:
        while True:
            try:
                yield pickle.load(fh)
            except EOFError:
                return


def pair_key(*sequences: Iterable[str]) -> bytes:
    """A stable 8-byte hash of token sequences (for duplicate and leakage detection)."""
    digest = hashlib.blake2b(digest_size=8)
    for seq in sequences:
        digest.update("\x1f".join(seq).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.digest()


def write_corpus(
    out_root: str | Path,
    splits: Mapping[str, Iterable[dict | Quarantined]],
    schema: pa.Schema,
    params: dict | None = None,
    train_split: str = "train",
    stats: Mapping[str, SplitStats] | None = None,
    dedup_train: bool = True,
    rows_per_part: int = 50_000,
    sources: Mapping[str, Sequence[str | Path]] | None = None,
    optional_splits: Collection[str] = (),
) -> dict[str, dict]:
    """Write every split under ``out_root/<split>/``; return the manifests by split.

    ``splits`` maps split names to iterables (generators are consumed lazily, evaluation splits
    first). ``stats[split].counts`` is read *after* the split's iterable is exhausted, so a
    reader may fill it while it streams, and lands in the manifest under ``"stats"``.

    Every split is finished in its temporary directory first; only when all are complete are
    they published, so an error in any split (a malformed file, an empty split) leaves
    ``out_root`` as it was. A split that would have no rows raises :class:`EmptySplitError`
    naming ``sources[split]`` (its input files), unless it is in ``optional_splits``.
    """
    out_root = Path(out_root)
    stats = dict(stats or {})
    sources = dict(sources or {})
    order = [s for s in splits if s != train_split] + [s for s in splits if s == train_split]
    eval_sources: dict[bytes, str] = {}
    writers: dict[str, ShardWriter] = {}
    created = not out_root.exists()
    try:
        for split in order:
            seen_pairs: set[bytes] = set()
            is_train = split == train_split
            writer = writers[split] = ShardWriter(
                out_root / split, schema, rows_per_part=rows_per_part, params=params or {}
            )
            first_quarantined: list[str] = []  # where the first few quarantined records were (for errors)
            chunk: list[dict] = []
            for item in splits[split]:
                if isinstance(item, Quarantined):
                    writer.quarantine({"where": item.where, "record": item.record}, item.reason)
                    if len(first_quarantined) < 3:
                        first_quarantined.append(f"{item.where} ({item.reason})")
                    continue
                src_key = pair_key(item["src"])
                if is_train and dedup_train:
                    leak = eval_sources.get(src_key)
                    if leak is not None:
                        writer.quarantine({"where": item["id"], "record": _brief(item)}, f"src_in_{leak}")
                        continue
                    key = pair_key(item["src"], item["tgt"])
                    if key in seen_pairs:
                        writer.quarantine({"where": item["id"], "record": _brief(item)}, "duplicate_pair")
                        continue
                    seen_pairs.add(key)
                elif not is_train:
                    eval_sources.setdefault(src_key, split)
                chunk.append(item)
                if len(chunk) >= WRITE_CHUNK:
                    writer.write(chunk)
                    chunk = []
            writer.write(chunk)
            split_stats = stats.get(split)
            if split_stats is not None:
                writer.stats.update(split_stats.counts)
            manifest = writer.finish()
            if manifest["rows"] == 0 and split not in optional_splits:
                raise EmptySplitError(
                    split, sources.get(split, ()), _empty_split_reason(split, manifest, first_quarantined)
                )
        manifests = {split: writers[split].publish() for split in order}
    except BaseException:
        for writer in writers.values():
            writer.abort()
        if created:
            with contextlib.suppress(OSError):
                out_root.rmdir()  # made for this run, and empty again
        raise
    return {s: manifests[s] for s in splits}


def _empty_split_reason(split: str, manifest: dict, first_quarantined: list[str]) -> str:
    n = manifest["rows_in"]
    if n == 0:
        return (
            f"the {split} split would have no rows: no record reached it (an empty input file, or every "
            "record left out by the reader's filters)"
        )
    reasons = ", ".join(f"{reason} {k}" for reason, k in manifest["quarantine_reasons"].items())
    first = f"; first: {', '.join(first_quarantined)}" if first_quarantined else ""
    every = "its only record was" if n == 1 else f"all {n} records were"
    return f"the {split} split would have no rows: {every} quarantined ({reasons}){first}"


def _brief(row: dict) -> dict:
    return {"src": " ".join(row["src"]), "tgt": " ".join(row["tgt"])}
