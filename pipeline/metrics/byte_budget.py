"""The outputs' length against the byte budget of a recall metric cut at a fixed size (DUC's 75 bytes).

``rouge_recall_75`` (:mod:`pipeline.metrics.registry`) cuts every hypothesis and reference at 75
bytes and scores recall, so an output shorter than the budget gives away recall that a longer one
could earn: a model that learnt Gigaword's short headlines loses to Lead-8 on DUC although it beats
it on Gigaword. :func:`byte_budget` measures that, on the very text ROUGE cuts: the output tokens
joined by single spaces (what ``text_metrics`` scores), in UTF-8 bytes; the references as scored
(the raw text as written, when given, else their tokens joined by spaces).
"""

from __future__ import annotations

from collections.abc import Sequence

BUDGET_BYTES = 75  # DUC 2004 task 1's limit (ROUGE-1.5.5 -b 75)


def text_bytes(text: str) -> int:
    """UTF-8 bytes of ``text``, the unit of ROUGE-1.5.5's ``-b`` cut."""
    return len(text.encode("utf-8"))


def byte_budget(
    hyps: Sequence[Sequence[str]], refs: Sequence[Sequence[str]] | None = None, limit: int = BUDGET_BYTES
) -> dict:
    """``output_bytes``: the mean UTF-8 bytes of the outputs (tokens joined by spaces);
    ``outputs_under_budget``: the percent of outputs shorter than ``limit`` bytes; with ``refs``
    (each example's reference texts as scored) ``ref_bytes`` and ``refs_under_budget``, the same
    over every reference."""
    sizes = [text_bytes(" ".join(h)) for h in hyps]
    out = {
        "output_bytes": sum(sizes) / len(sizes) if sizes else 0.0,
        "outputs_under_budget": 100.0 * sum(s < limit for s in sizes) / len(sizes) if sizes else 0.0,
    }
    if refs is not None:
        ref_sizes = [text_bytes(r) for rs in refs for r in rs]
        out["ref_bytes"] = sum(ref_sizes) / len(ref_sizes) if ref_sizes else 0.0
        out["refs_under_budget"] = 100.0 * sum(s < limit for s in ref_sizes) / len(ref_sizes) if ref_sizes else 0.0
    return out
