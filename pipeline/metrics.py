"""Exact-match accuracy (CopyNet Table 1: correct only when the whole sequence is identical)."""
from __future__ import annotations

from collections import defaultdict


def exact_match(golds: list[list[str]], nbests: list[list[list[str]]], k: int) -> dict:
    """top-1 and top-k exact-match accuracy in percent; nbests[i] is ranked best first."""
    n = len(golds)
    if n == 0:
        return {"n": 0, "top1": 0.0, f"top{k}": 0.0}
    top1 = sum(bool(nb) and nb[0] == g for g, nb in zip(golds, nbests))
    topk = sum(g in nb[:k] for g, nb in zip(golds, nbests))
    return {"n": n, "top1": 100.0 * top1 / n, f"top{k}": 100.0 * topk / n}


def exact_match_by_group(golds, nbests, groups: list[str] | None, k: int) -> dict:
    """Overall metrics plus the same per group (e.g. per rule type) under 'by_<group>'."""
    out = exact_match(golds, nbests, k)
    if groups is not None:
        index: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            index[g].append(i)
        out["groups"] = {
            g: exact_match([golds[i] for i in rows], [nbests[i] for i in rows], k) for g, rows in sorted(index.items())
        }
    return out
