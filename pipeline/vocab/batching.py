"""Batches from Arrow shards: token lists -> padded id tensors in source and extended vocabularies.

The shard table stays in Arrow (memory-mapped); only the rows of one batch become Python lists.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from models.batch import Batch
from pipeline.vocab.extended import extend_example
from pipeline.vocab.vocabulary import BOS, EOS, FEATURES, PAD, Vocab


def _pad(rows: list[list[int]], value: int = PAD) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate(
    src: list[list[str]],
    tgt: list[list[str]] | None,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    ids: list[str] | None = None,
    extra: dict | None = None,
    max_src_len: int | None = None,
    pointers: list[list[int]] | None = None,
    switches: list[list[bool]] | None = None,
    features: list[list[str]] | None = None,
    features_vocab: Vocab | None = None,
) -> Batch:
    """Build a Batch; ``tgt`` may be None at prediction time (targets are then empty).

    ``features``: each example's tags (the shard's ``features`` column), encoded with
    ``features_vocab`` into ``Batch.features`` (B, F), <pad>-padded (a tag it lacks: <unk>).

    ``pointers``/``switches`` are the shard's ``tgt_pointer``/``tgt_switch`` columns (one entry per
    target token); </s> gets pointer -1 and switch False, and a pointer past a truncated source
    becomes -1 with its switch off (the word is no longer in the source).
    """
    if max_src_len:
        src = [s[:max_src_len] for s in src]
    src = [s if s else [tgt_vocab.itos[EOS]] for s in src]  # an empty source still needs one position
    tgt = tgt if tgt is not None else [[] for _ in src]
    ext = [extend_example(s, t, tgt_vocab) for s, t in zip(src, tgt)]
    tgt_pointer = tgt_switch = None
    if pointers is not None and switches is not None:
        # A pointer cut off by max_src_len points nowhere: switch off (the word is then <unk> on the
        # shortlist side, as without annotations); an annotated -1 keeps its switch.
        cut = [[p >= len(s) for p in ptr] for ptr, s in zip(pointers, src)]
        tgt_pointer = _pad(
            [[-1 if c else p for p, c in zip(ptr, cs)] + [-1] for ptr, cs in zip(pointers, cut)], value=-1
        )
        tgt_switch = _pad(
            [[int(z and not c) for z, c in zip(sw, cs)] + [0] for sw, cs in zip(switches, cut)], value=0
        ).bool()
    return Batch(
        src=_pad([src_vocab.encode(s) for s in src]),
        src_len=torch.tensor([len(s) for s in src], dtype=torch.long),
        src_ext=_pad([e.src_ext for e in ext]),
        tgt_in=_pad([[BOS] + e.tgt_ext for e in ext]),
        tgt_out=_pad([e.tgt_ext + [EOS] for e in ext]),
        n_ext=max(len(e.oovs) for e in ext),
        oovs=[e.oovs for e in ext],
        ids=list(ids) if ids is not None else [str(i) for i in range(len(src))],
        src_tokens=src,
        tgt_tokens=tgt,
        extra=extra or {},
        tgt_pointer=tgt_pointer,
        tgt_switch=tgt_switch,
        features=None if features is None else _pad([features_vocab.encode(f) for f in features]),
    )


def batch_from_rows(
    table: pa.Table,
    rows: list[int],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    extra_columns: tuple[str, ...] = (),
    max_src_len: int | None = None,
    features_vocab: Vocab | None = None,
) -> Batch:
    """The Batch of ``rows`` of a shard table; its ``features`` column, when it has one, needs the
    task's ``features_vocab``."""
    part = table.take(pa.array(rows, type=pa.int64()))
    features = part.column(FEATURES).to_pylist() if FEATURES in part.column_names else None
    if features is not None and features_vocab is None:
        raise ValueError("the rows have a features column: batch them with the task's features vocabulary")
    extra = {c: part.column(c).to_pylist() for c in extra_columns if c in part.column_names}
    annotated = "tgt_pointer" in part.column_names and "tgt_switch" in part.column_names
    return collate(
        part.column("src").to_pylist(),
        part.column("tgt").to_pylist(),
        src_vocab,
        tgt_vocab,
        ids=part.column("id").to_pylist(),
        extra=extra,
        max_src_len=max_src_len,
        pointers=part.column("tgt_pointer").to_pylist() if annotated else None,
        switches=part.column("tgt_switch").to_pylist() if annotated else None,
        features=features,
        features_vocab=features_vocab,
    )


def token_batches(
    src_len: np.ndarray,
    tgt_len: np.ndarray,
    batch_size: int,
    max_tokens: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    bucket: int = 50,
) -> list[np.ndarray]:
    """Row indices grouped into batches of similar length (less padding), as fairseq's batches.

    Rows are shuffled (by ``seed``), cut into blocks of ``bucket`` x ``batch_size`` rows, each block
    sorted by source + target length and cut greedily: a batch ends before it would exceed
    ``batch_size`` rows or ``max_tokens`` padded positions, rows x (longest source + longest target)
    (fairseq's ``--max-tokens``; a single row over the budget is a batch of its own). The batch order
    is shuffled again. Everything is a function of ``seed``, so a resumed run sees the same batches.
    """
    n = len(src_len)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n) if shuffle else np.arange(n)
    total = src_len + tgt_len
    block = batch_size * bucket
    batches: list[np.ndarray] = []
    for start in range(0, n, block):
        rows = order[start : start + block]
        rows = rows[np.argsort(total[rows], kind="stable")]
        batches += _cut(rows, src_len[rows], tgt_len[rows], batch_size, max_tokens)
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _cut(
    rows: np.ndarray, src: np.ndarray, tgt: np.ndarray, batch_size: int, max_tokens: int | None
) -> list[np.ndarray]:
    """Greedy cut of length-sorted rows under the row and padded-token budgets."""
    if max_tokens is None:
        return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
    out, start, longest_src, longest_tgt = [], 0, 0, 0
    # A loop over the rows of one block (Python ints): O(rows) per epoch, a few seconds for 4M rows.
    for i, (s, t) in enumerate(zip(src.tolist(), tgt.tolist())):
        longest_src, longest_tgt = max(longest_src, s), max(longest_tgt, t)
        count = i - start + 1
        if count > 1 and (count > batch_size or count * (longest_src + longest_tgt) > max_tokens):
            out.append(rows[start:i])
            start, longest_src, longest_tgt = i, s, t
    out.append(rows[start:])
    return out


def row_lengths(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(source length, target length) per row, computed in Arrow (no Python loop over tokens)."""
    import pyarrow.compute as pc

    def length(column: str) -> np.ndarray:
        return np.asarray(pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False), dtype=np.int64)

    return length("src"), length("tgt")
