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

A row with a ``features`` column (tags kept apart from the source) has (src, features) as its
source for both: the same lemma under other tags is another example, not a duplicate or a leak.

Evaluation splits are written first so their sources are known when train streams through. The
writer keeps one 8-byte hash per distinct train pair (a :class:`~pipeline.data.corpora.keyset.KeySet`:
8 bytes each, ~30 MB for Gigaword's 3.8M pairs) and per evaluation source (a dict: evaluation
splits are small); everything else streams. Every split is
finished in its temporary directory before any is published, and a split left without rows (an
empty input, or every record quarantined) raises :class:`EmptySplitError` naming its input files
(unless the reader declares the split optional): a failed run publishes nothing.

What every reader applies to hostile input (opening files, absurd lines and tokens) is in
:mod:`pipeline.data.corpora.inputs`.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from pipeline.config.validation import InputError
from pipeline.data.corpora.keyset import KeySet
from pipeline.io.shards import ShardWriter

WRITE_CHUNK = 10_000  # rows handed to the shard writer at once


class CorpusFormatError(InputError):
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
            seen_pairs = KeySet()  # 8 bytes a distinct train pair (a Python set: ~75)
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
                source = (item["src"], item["features"]) if "features" in item else (item["src"],)
                src_key = pair_key(*source)
                if is_train and dedup_train:
                    leak = eval_sources.get(src_key)
                    if leak is not None:
                        writer.quarantine({"where": item["id"], "record": _brief(item)}, f"src_in_{leak}")
                        continue
                    if not seen_pairs.add(pair_key(*source, item["tgt"])):
                        writer.quarantine({"where": item["id"], "record": _brief(item)}, "duplicate_pair")
                        continue
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
    return f"the {split} split would have no rows: {every} quarantined ({reasons}){first}{_hint(manifest)}"


def _hint(manifest: dict) -> str:
    """What to do when every record was quarantined for one reason that has a usual cause."""
    reasons = set(manifest["quarantine_reasons"])
    if reasons == {"invalid_utf8"}:
        return ": the file is not UTF-8 (Latin-1? convert it, e.g. iconv -f LATIN1 -t UTF-8)"
    if len(reasons) == 1 and next(iter(reasons)).startswith("src_in_"):
        other = next(iter(reasons)).removeprefix("src_in_")
        return f": every source is also in the {other} split (the same file twice?); give another file for one of them"
    return ""


def _brief(row: dict) -> dict:
    brief = {"src": " ".join(row["src"]), "tgt": " ".join(row["tgt"])}
    if "features" in row:
        brief["features"] = ";".join(row["features"])
    return brief
