"""Baselines without a model, scored exactly like a mechanism's predictions.

``lead``: the first N source tokens as the output (Rush et al. 2015's and the summarisation
literature's lead / prefix baseline; on Gigaword the lead-8 row says how much of a headline is the
article's opening words). ``compare.lead: [8]`` adds a ``lead8`` row to a task's comparison; the
compare stage scores it on the same shards, rows (``evaluate.max_examples``) and metric per split as
the evaluate stage scores the mechanisms (:func:`pipeline.decoding.scoring.score_records`).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import first_rows, read_split


def lead_name(n: int) -> str:
    """The row's key in the comparison (``lead8``) and its display name."""
    return f"lead{n}"


def lead_display(n: int) -> str:
    return f"Lead-{n} (first {n} source tokens)"


def baseline_names(keys) -> dict[str, str]:
    """Display names of the baseline rows among ``keys`` (``lead8`` -> ``Lead-8 (...)``)."""
    return {k: lead_display(int(k[4:])) for k in keys if k.startswith("lead") and k[4:].isdigit()}


def lead_records(table: pa.Table, n: int) -> list[dict]:
    """Prediction records (the shape :func:`pipeline.decoding.decode.decode_table` writes) whose output is
    the first ``n`` source tokens of each row."""
    if n < 1:
        raise ValueError(f"lead baseline: n must be >= 1, got {n}")
    cols = table.to_pydict()
    records = []
    for i, src in enumerate(cols["src"]):
        pred = list(src[:n])
        rec = {name: values[i] for name, values in cols.items()}  # refs, refs_raw, groups (rule_type)
        rec.update(pred=pred, nbest=[pred])
        records.append(rec)
    return records


def lead_metrics(split_dirs: dict[str, Path], n: int, cfg: EvalConfig) -> dict:
    """``{split: metrics}`` of the lead-``n`` baseline on each split directory (as metrics.json)."""
    return {
        split: score_records(lead_records(first_rows(read_split(d), cfg.max_examples), n), cfg, split)
        for split, d in split_dirs.items()
    }
