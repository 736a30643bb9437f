"""A split's metrics from its prediction records (what :func:`pipeline.decoding.decode.decode_table`
writes, or a model-free baseline's records of the same shape), by the metric the evaluate settings
name for the split (:mod:`pipeline.metrics.registry`)."""

from __future__ import annotations

from pipeline.decoding.settings import EvalConfig
from pipeline.metrics.registry import exact_match_by_group, text_metrics


def score_records(records: list[dict], cfg: EvalConfig, split: str = "test") -> dict:
    """The split's metrics: exact match (top-1/top-k, per group) or the task's text metric, whose
    references are the shard's ``refs`` (every reference) when present, else ``tgt``."""
    kind = cfg.metric_for(split)
    if kind == "exact_match":
        groups = [r[cfg.group_by] for r in records] if cfg.group_by else None
        return exact_match_by_group([r["tgt"] for r in records], [r["nbest"] for r in records], groups, cfg.topk)
    refs = [r.get("refs") or [r["tgt"]] for r in records]
    refs_raw = [r["refs_raw"] for r in records] if records and all(r.get("refs_raw") for r in records) else None
    return {
        "metric": kind,
        **text_metrics(kind, [r["pred"] for r in records], refs, [r["src"] for r in records], refs_raw=refs_raw),
    }
