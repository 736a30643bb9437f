"""A split's metrics from its prediction records (what :func:`pipeline.decoding.decode.decode_table`
writes, or a model-free baseline's records of the same shape), by the metric the evaluate settings
name for the split (:mod:`pipeline.metrics.registry`; for ``rouge_recall_75`` also the outputs' and
references' bytes against its 75-byte budget, :mod:`pipeline.metrics.byte_budget`), plus, given the
target vocabulary, the copy analysis of the outputs and the references
(:mod:`pipeline.metrics.copy_analysis`)."""

from __future__ import annotations

from collections.abc import Container

from pipeline.decoding.settings import EvalConfig
from pipeline.metrics.bootstrap import ExampleScores, exact_match_scores, text_example_scores
from pipeline.metrics.byte_budget import BUDGET_BYTES, byte_budget
from pipeline.metrics.copy_analysis import copy_analysis
from pipeline.metrics.registry import exact_match_by_group, text_metrics


def references(records: list[dict]) -> list[list[list[str]]]:
    """Every example's references: the shard's ``refs`` (every reference) when present, else ``tgt``."""
    return [r.get("refs") or [r["tgt"]] for r in records]


def score_records(
    records: list[dict], cfg: EvalConfig, split: str = "test", tgt_vocab: Container[str] | None = None
) -> dict:
    """The split's metrics: exact match (top-1/top-k, per group) or the task's text metric, whose
    references are the shard's ``refs`` (every reference) when present, else ``tgt``. With
    ``tgt_vocab`` (the task's target vocabulary) also ``copy``: the copy analysis of the best
    outputs and of those references, for exact-match tasks too."""
    kind = cfg.metric_for(split)
    refs = references(records)
    if kind == "exact_match":
        groups = [r[cfg.group_by] for r in records] if cfg.group_by else None
        out = exact_match_by_group([r["tgt"] for r in records], [r["nbest"] for r in records], groups, cfg.topk)
    else:
        refs_raw = [r["refs_raw"] for r in records] if records and all(r.get("refs_raw") for r in records) else None
        out = {
            "metric": kind,
            **text_metrics(kind, [r["pred"] for r in records], refs, [r["src"] for r in records], refs_raw=refs_raw),
        }
        if kind == "rouge_recall_75":  # how much of the 75 bytes the outputs use (and the references)
            scored = refs_raw or [[" ".join(t) for t in rs] for rs in refs]
            out.update(byte_budget([r["pred"] for r in records], scored, BUDGET_BYTES))
    if tgt_vocab is not None:
        out["copy"] = copy_analysis([r["pred"] for r in records], refs, [r["src"] for r in records], tgt_vocab)
    return out


def example_scores(records: list[dict], cfg: EvalConfig, split: str = "test") -> dict[str, ExampleScores]:
    """Per-example scores of every headline number score_records gives for the split (not the per-group or copy-analysis ones)."""
    kind = cfg.metric_for(split)
    if kind == "exact_match":
        return exact_match_scores([r["tgt"] for r in records], [r["nbest"] for r in records], cfg.topk)
    refs_raw = [r["refs_raw"] for r in records] if records and all(r.get("refs_raw") for r in records) else None
    return text_example_scores(
        kind, [r["pred"] for r in records], references(records), [r["src"] for r in records], refs_raw=refs_raw
    )
