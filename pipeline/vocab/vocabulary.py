"""Vocabularies: token <-> id maps stored as plain text with counts.

File format (UTF-8), one entry per line, specials first with count 0::

    <pad>\t0
    <unk>\t0
    <s>\t0
    </s>\t0
    the\t1532
    ...

Line ``i`` (0-based) holds the token with id ``i``. A corpus with a features column (tags kept
apart from the source, ``prepare.<task>.features_col``) also gets ``features.vocab``, every tag of
the train split, in the same format (:func:`save_features_vocab`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.ipc
from pydantic.dataclasses import dataclass as pydantic_dataclass

from models.specials import (  # noqa: F401 (re-exported: the file format's specials)
    BOS,
    EOS,
    PAD,
    SPECIALS,
    UNK,
)
from pipeline.config.params import section
from pipeline.config.schema import SETTINGS, VocabSettings, build
from pipeline.io.files import write_text_atomic
from pipeline.io.shards import read_manifest

if TYPE_CHECKING:
    import polars as pl


@pydantic_dataclass(frozen=True, config=SETTINGS)
class VocabConfig(VocabSettings):
    """The ``vocab`` section of params.yaml (the schema's :class:`~pipeline.config.schema.VocabSettings`)."""

    @classmethod
    def from_params(cls, params: dict) -> VocabConfig:
        return build(cls, section(params, "vocab"), "vocab")


@dataclass
class Vocab:
    """An ordered token list with counts; ids are positions, specials occupy 0..3."""

    itos: list[str]
    counts: list[int]
    stoi: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.itos) != len(self.counts):
            raise ValueError(f"{len(self.itos)} tokens but {len(self.counts)} counts")
        if tuple(self.itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with the specials {SPECIALS}")
        self.stoi = {}
        for i, tok in enumerate(self.itos):
            if tok in self.stoi:
                raise ValueError(f"duplicate token {tok!r} at ids {self.stoi[tok]} and {i}")
            self.stoi[tok] = i

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, tok: str) -> bool:
        return tok in self.stoi

    def id(self, tok: str) -> int:
        """Id of ``tok``, or ``UNK`` if it is not in the vocabulary."""
        return self.stoi.get(tok, UNK)

    def encode(self, toks: Iterable[str]) -> list[int]:
        """Ids of ``toks`` (OOV -> ``UNK``); adds no ``<s>``/``</s>``."""
        get = self.stoi.get
        return [get(t, UNK) for t in toks]

    def token(self, i: int) -> str:
        """Token with id ``i`` (IndexError if out of range)."""
        if not 0 <= i < len(self.itos):
            raise IndexError(f"token id {i} out of range for a vocabulary of {len(self.itos)}")
        return self.itos[i]

    def save(self, path: str | Path) -> None:
        """Atomically write ``token<TAB>count`` lines, specials first."""
        lines = []
        for tok, count in zip(self.itos, self.counts):
            if not tok or any(c in tok for c in "\t\n\r"):
                raise ValueError(f"token {tok!r} cannot be stored (empty or has tab/newline)")
            lines.append(f"{tok}\t{count}\n")
        write_text_atomic(path, "".join(lines))

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Read a file written by :meth:`save`; ValueError naming ``file:line`` if malformed."""
        path = Path(path)
        itos: list[str] = []
        counts: list[int] = []
        seen: dict[str, int] = {}
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline
        for lineno, line in enumerate(lines, start=1):

            def bad(msg: str, lineno: int = lineno, line: str = line) -> ValueError:
                return ValueError(f"{path}:{lineno}: {msg}: {line!r}")

            parts = line.split("\t")
            if len(parts) != 2 or not parts[0]:
                raise bad("expected 'token<TAB>count'")
            tok, raw_count = parts
            if not (raw_count.isascii() and raw_count.isdigit()):
                raise bad("count is not a non-negative integer")
            if lineno <= len(SPECIALS) and tok != SPECIALS[lineno - 1]:
                raise bad(f"must be the special token {SPECIALS[lineno - 1]!r}")
            if tok in seen:
                raise bad(f"duplicate token (first on line {seen[tok]})")
            seen[tok] = lineno
            itos.append(tok)
            counts.append(int(raw_count))
        if len(itos) < len(SPECIALS):
            raise ValueError(f"{path}:{len(lines) + 1}: file ends before the specials {SPECIALS} are all listed")
        return cls(itos, counts)


def _count_frame(table: pa.Table, column: str) -> pl.DataFrame:
    """(token, count) of a list<string> (or nested list) column, via polars explode/group."""
    import polars as pl  # here, not at module level: batching and decoding import this module, polars only counting

    if column not in table.column_names:
        raise KeyError(f"column {column!r} not in table (has {table.column_names})")
    series = pl.from_arrow(table.select([column])).get_column(column)
    while isinstance(series.dtype, pl.List):
        series = series.explode()
    return series.drop_nulls().to_frame("token").group_by("token").len(name="count").cast({"count": pl.Int64})


def _as_dict(counted: pl.DataFrame) -> dict[str, int]:
    return dict(zip(counted.get_column("token").to_list(), counted.get_column("count").to_list()))


def count_tokens(table: pa.Table, column: str) -> dict[str, int]:
    """Token frequencies of a list<string> (or nested list) column."""
    return _as_dict(_count_frame(table, column))


def count_split_tokens(split_dir: str | Path, column: str) -> dict[str, int]:
    """Token frequencies of a shard split's column, one memory-mapped part at a time (memory stays
    flat in the corpus size: only the counts of distinct tokens are held)."""
    import polars as pl

    split_dir = Path(split_dir)
    total = pl.DataFrame(schema={"token": pl.String, "count": pl.Int64})
    for part in read_manifest(split_dir)["parts"]:
        with pa.memory_map(str(split_dir / part["file"]), "r") as source:
            counts = _count_frame(pa.ipc.open_file(source).read_all(), column)
        total = pl.concat([total, counts]).group_by("token").agg(pl.col("count").sum())
    return _as_dict(total)


FEATURES = "features"  # the shard column of tags kept apart from the source
FEATURES_VOCAB = "features.vocab"  # beside src.vocab and tgt.vocab


def split_columns(split_dir: str | Path) -> list[str]:
    """The column names of a shard split (its first part's schema)."""
    split_dir = Path(split_dir)
    parts = read_manifest(split_dir)["parts"]
    if not parts:
        return []
    with pa.memory_map(str(split_dir / parts[0]["file"]), "r") as source:
        return pa.ipc.open_file(source).schema.names


def save_features_vocab(train_split: str | Path, vocab_dir: str | Path) -> Vocab | None:
    """``vocab_dir/features.vocab``: every tag of the train split's ``features`` column (specials
    first, as every vocabulary), returned; None, with a stale file removed, when the split has none."""
    path = Path(vocab_dir) / FEATURES_VOCAB
    if FEATURES not in split_columns(train_split):
        path.unlink(missing_ok=True)
        return None
    vocab = build_vocab(count_split_tokens(train_split, FEATURES))
    vocab.save(path)
    return vocab


def load_features_vocab(vocab_dir: str | Path) -> Vocab | None:
    """The task's features vocabulary (``features.vocab``), or None when the task has no features."""
    path = Path(vocab_dir) / FEATURES_VOCAB
    return Vocab.load(path) if path.is_file() else None


def build_vocab(counts: dict[str, int], max_size: int | None = None, min_count: int = 1) -> Vocab:
    """Specials, then tokens with ``count >= min_count`` by count desc, ties by token string.

    ``max_size`` bounds the total size *including* the specials. Specials found
    in ``counts`` are not ranked again (they keep their fixed ids, count 0).
    """
    if max_size is not None and max_size < len(SPECIALS):
        raise ValueError(f"max_size={max_size} leaves no room for the {len(SPECIALS)} specials")
    ranked = sorted(
        ((tok, c) for tok, c in counts.items() if c >= min_count and tok not in SPECIALS),
        key=lambda tc: (-tc[1], tc[0]),
    )
    if max_size is not None:
        ranked = ranked[: max_size - len(SPECIALS)]
    itos = [*SPECIALS, *(tok for tok, _ in ranked)]
    return Vocab(itos, [0] * len(SPECIALS) + [c for _, c in ranked])
