"""pipeline.reporting.compare's one-line ranking (the MLflow experiment's description)."""

from __future__ import annotations

from pipeline.reporting.compare import ranking_line

METRICS = {
    "rnnsearch": {"test": {"top1": 20.0, "rouge_1": 5.7}},
    "copynet": {"test": {"top1": 76.954, "rouge_1": 12.6}},
    "wean": {"test": {"top1": 22.857}},  # no rouge_1: left out of that ranking
    "lead": {"valid": {"top1": 99.0}},  # not scored on test: left out
}
NAMES = {"copynet": "CopyNet", "rnnsearch": "RNNSearch"}


def test_best_first_rounded_with_display_names():
    line = ranking_line(METRICS, "test", "top1", True, NAMES)
    assert line == "test top1: CopyNet 76.95 · wean 22.86 · RNNSearch 20.00"


def test_lower_is_better_and_missing_keys_left_out():
    assert (
        ranking_line(METRICS, "test", "rouge_1", False, NAMES, digits=1) == "test rouge_1: RNNSearch 5.7 · CopyNet 12.6"
    )
