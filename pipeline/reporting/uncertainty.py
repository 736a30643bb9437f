"""The uncertainty of every cell of a comparison table: a 95% interval that counts the training seeds
and the test set (:class:`pipeline.metrics.bootstrap.Bootstrap`: its natural groups resampled where it
has them), and each row against the column's best row by a paired bootstrap over the same resamples.

The result is plain data (``intervals.json``, git-tracked beside the metrics files), which the
comparison page, the chart, MLflow and the generated docs tables read:

    {split: {"unit": "35 groups", "resamples": 1000, "seed": 0, "level": 0.95,
             "cells": {cell: {row: {"mean", "sd", "low", "high", "seeds", "best", "p_value", "significant"}}}}}

A cell is a metric key (``top1``, ``rouge2``, ``bleu``), or ``<group>.<key>`` for an exact-match
column of one group of examples (``x->xx.top1``: the rule type's examples, resampled by their own
groups). ``significant``: the row differs from the column's best row (p < 0.05, two-sided).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.decoding.scoring import example_scores
from pipeline.decoding.settings import EvalConfig
from pipeline.metrics.bootstrap import Bootstrap, ExampleScores

RESAMPLES = 1000
SEED = 0  # the bootstrap's own seed: the same replicates on every machine and run


def _subset(scores: ExampleScores, index: np.ndarray) -> ExampleScores:
    return ExampleScores(scores.aggregate_kind, scores.values[index])


def _cells_for(boot: Bootstrap, rows: dict[str, list[ExampleScores]]) -> dict[str, dict]:
    """One column: every row's interval, then each row against the best (highest mean) row."""
    intervals = {row: boot.interval(seeds) for row, seeds in rows.items()}
    best = max(intervals, key=lambda row: intervals[row].mean)
    out = {}
    for row, iv in intervals.items():
        test = boot.paired(iv, intervals[best])
        out[row] = {
            "mean": iv.mean,
            "sd": iv.sd,
            "low": iv.low,
            "high": iv.high,
            "seeds": iv.seeds,
            "best": row == best,
            "p_value": test.p_value if row != best else 1.0,
            "significant": test.significant if row != best else False,
        }
    return out


def split_intervals(
    records: dict[str, list[list[dict]]],
    cfg: EvalConfig,
    split: str,
    columns: Sequence[str] = (),
    groups: Sequence | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict:
    """Intervals of one split. ``records``: row -> one list of prediction records per seed, every list
    the split's rows in the same order; ``groups``: the resampling group of each of those rows (None:
    examples); ``columns``: exact match's group columns (values of ``cfg.group_by``)."""
    if not records:
        return {}
    lengths = {len(seed_records) for per_row in records.values() for seed_records in per_row}
    if len(lengths) != 1:
        raise ValueError(f"{split}: the rows' prediction files have different numbers of records {sorted(lengths)}")
    (n,) = lengths
    scores = {row: [example_scores(recs, cfg, split) for recs in per_row] for row, per_row in records.items()}
    keys = list(next(iter(scores.values()))[0])  # every headline key (top1/top10, rouge1/2/L, bleu, sari)
    boot = Bootstrap(n, groups, resamples, seed)
    cells = {key: _cells_for(boot, {row: [s[key] for s in seeds] for row, seeds in scores.items()}) for key in keys}
    if cfg.metric_for(split) == "exact_match" and cfg.group_by:
        first = next(iter(records.values()))[0]
        labels = np.array([str(r.get(cfg.group_by)) for r in first])
        for column in columns:
            index = np.flatnonzero(labels == column)
            if not len(index):
                continue
            sub = Bootstrap(len(index), None if groups is None else [groups[i] for i in index], resamples, seed)
            for key in keys:
                rows = {row: [_subset(s[key], index) for s in seeds] for row, seeds in scores.items()}
                cells[f"{column}.{key}"] = _cells_for(sub, rows)
    return {"unit": boot.unit, "resamples": resamples, "seed": seed, "level": 0.95, "cells": cells}
