"""Corpus BLEU (Papineni et al. 2002) exactly as Moses' ``multi-bleu.perl`` prints it, via sacrebleu.

``multi-bleu.perl`` scores pre-tokenised text: whitespace-split tokens, no lowercasing, clipped
n-gram counts (n = 1..4) against the per-n-gram maximum over the references, the closest reference
length per sentence (the shorter one on ties) for the brevity penalty, no smoothing (any n with
zero matches gives BLEU 0). sacrebleu 2.6 with ``tokenize="none"``, ``smooth_method="none"`` and
``force=True`` (the input *is* tokenised) computes the same statistics; multi-bleu.perl then
prints the score rounded to 2 decimals, we return it unrounded.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU

__all__ = ["corpus_bleu"]

_BLEU = BLEU(tokenize="none", smooth_method="none", force=True, lowercase=False)


def corpus_bleu(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU in percent; ``refs[i]`` holds the references of ``hyps[i]`` (any number >= 1).

    Sentences with fewer references than the most are padded with ``None``, which sacrebleu
    skips (a missing reference, not an empty one that would pull the closest length to 0).
    """
    if len(hyps) != len(refs):
        raise ValueError(f"BLEU: {len(hyps)} hypotheses but {len(refs)} reference sets")
    if not hyps:
        return 0.0
    width = max(len(r) for r in refs)
    for i, r in enumerate(refs):
        if isinstance(r, str) or len(r) == 0:
            raise ValueError(f"BLEU: reference set {i} must be a non-empty list of strings, got {r!r}")
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(width)]
    return float(_BLEU.corpus_score(list(hyps), streams).score)
