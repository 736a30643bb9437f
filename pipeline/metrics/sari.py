"""SARI (Xu, Napoles, Pavlick, Chen & Callison-Burch 2016, TACL, section 4.1) as the reference code computes it.

Reference implementation: ``SARI.py`` of github.com/cocoxu/simplification (``SARIngram`` /
``SARIsent``), which EASSE's ``sentence_sari(..., tokenizer='none')`` and most simplification
papers reproduce. Hand-written because no maintained PyPI package provides it offline with
these exact conventions (EASSE is not on PyPI; tensor2tensor's ``sari_hook`` weights deletion
differently); ``tests/pipeline/metrics/test_bleu_sari.py`` checks the paper's example values (26.8278, 58.8999,
50.7161, also asserted in EASSE's tests) and the reference code's values on a fixture.

Per n = 1..4, with source S, candidate C and references R_1..R_k (k = ``numref``):

* counts of S and C are multiplied by k; reference counts are summed over references;
* KEEP: ``sys = S & C``, ``good = sys & R``, ``all = S & R`` (multiset minimum);
  precision = mean over n-grams g of sys of ``good[g] / sys[g]``, recall = mean over g of all of
  ``good[g] / all[g]``; F1 of the two;
* DELETE: ``sys = S - C``, ``good = sys - R``, ``all = S - R`` (positive part); only the
  precision ``mean_g good[g] / sys[g]`` enters SARI (eq. 5-6: deletion uses precision);
* ADD (sets): ``sys = C \\ S``, ``good = sys & R``, ``all = R \\ S``; F1 of ``|good|/|sys|`` and
  ``|good|/|all|``;
* sentence SARI = (mean_n F_keep + mean_n P_del + mean_n F_add) / 3. Corpus SARI = mean of the
  sentence scores, in percent.

Tokens come from ``text.lower().split(" ")`` exactly like the reference (an empty string is one
empty token there, and so here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["sari_ngram", "sentence_sari", "corpus_sari"]


def _grams(tokens: list[str], n: int) -> list[str]:
    return [" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p > 0 or r > 0 else 0.0


def sari_ngram(s: list[str], c: list[str], refs: list[list[str]]) -> tuple[float, float, float]:
    """(keep F1, deletion precision, addition F1) for one n-gram order (``SARIngram``)."""
    k = len(refs)
    r_cnt = Counter(g for ref in refs for g in ref)
    s_cnt, c_cnt = Counter(s), Counter(c)
    s_rep = Counter({g: v * k for g, v in s_cnt.items()})
    c_rep = Counter({g: v * k for g, v in c_cnt.items()})

    keep_sys = s_rep & c_rep
    keep_good = keep_sys & r_cnt
    keep_all = s_rep & r_cnt
    keep_p = sum(keep_good[g] / keep_sys[g] for g in keep_good) / len(keep_sys) if keep_sys else 0.0
    keep_r = sum(keep_good[g] / keep_all[g] for g in keep_good) / len(keep_all) if keep_all else 0.0

    del_sys = s_rep - c_rep
    del_good = del_sys - r_cnt
    del_p = sum(del_good[g] / del_sys[g] for g in del_good) / len(del_sys) if del_sys else 0.0

    add_sys = set(c_cnt) - set(s_cnt)
    add_good = add_sys & set(r_cnt)
    add_all = set(r_cnt) - set(s_cnt)
    add_p = len(add_good) / len(add_sys) if add_sys else 0.0
    add_r = len(add_good) / len(add_all) if add_all else 0.0
    return _f1(keep_p, keep_r), del_p, _f1(add_p, add_r)


def sentence_sari(src: str, hyp: str, refs: Sequence[str]) -> float:
    """SARI of one sentence as a fraction in [0, 1] (``SARIsent``)."""
    if isinstance(refs, str) or len(refs) == 0:
        raise ValueError(f"SARI: references must be a non-empty list of strings, got {refs!r}")
    s1 = src.lower().split(" ")
    c1 = hyp.lower().split(" ")
    r1 = [r.lower().split(" ") for r in refs]
    keep = dele = add = 0.0
    for n in (1, 2, 3, 4):
        k, d, a = sari_ngram(_grams(s1, n), _grams(c1, n), [_grams(r, n) for r in r1])
        keep += k
        dele += d
        add += a
    return (keep / 4 + dele / 4 + add / 4) / 3


def corpus_sari(srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean sentence SARI in percent; ``refs[i]`` are the references of sentence i."""
    if not len(srcs) == len(hyps) == len(refs):
        raise ValueError(f"SARI: {len(srcs)} sources, {len(hyps)} hypotheses, {len(refs)} reference sets")
    if not hyps:
        return 0.0
    return 100.0 * sum(sentence_sari(s, h, r) for s, h, r in zip(srcs, hyps, refs)) / len(hyps)
