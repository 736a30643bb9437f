"""Rare-word replacement by a training-frequency threshold (Rush et al. 2015, ``make_dict.py``).

Rush et al. count the words of the *filtered training* pairs (articles and titles separately),
keep every word seen at least ``UNK = 5`` times (``construct_data.sh``), and ``pull.py`` writes every
other word of every split as ``<unk>``. These helpers do the three steps; the readers decide which
tokens feed the counts (train only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence


def count_tokens(token_lists: Iterable[Sequence[str]]) -> Counter:
    """Token frequencies over many token lists."""
    counts: Counter = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    return counts


def keep_vocab(counter: Counter, min_count: int) -> set[str]:
    """Words seen at least ``min_count`` times (``make_dict.py`` stops at ``count < limit``)."""
    return {word for word, n in counter.items() if n >= min_count}


def unk_replace(tokens: Sequence[str], vocab: set[str] | frozenset[str], unk: str = "<unk>") -> list[str]:
    """``tokens`` with every word outside ``vocab`` replaced by ``unk``."""
    return [t if t in vocab else unk for t in tokens]
