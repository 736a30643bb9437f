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


# --------------------------------------------------------------------------- #
# The copy-analysis table
# --------------------------------------------------------------------------- #

COPY_OUT = {
    "copied": 90.0,
    "novel_1gram": 10.0,
    "novel_2gram": 25.0,
    "novel_3gram": 40.0,
    "novel_4gram": None,  # nothing to count: '-'
    "repeated_3gram": 0.0,
    "length": 5.5,
    "oov_recall": 100 / 3,
    "length_ratio": 5.5 / 3,
}
COPY_REFS = {
    "count": 3,
    "copied": 66.66,
    "novel_1gram": 33.33,
    "novel_2gram": 66.66,
    "novel_3gram": 100.0,
    "novel_4gram": 100.0,
    "repeated_3gram": 0.0,
    "length": 3.0,
    "oov": 100 / 3,
    "oov_tokens": 3,
}
EXACT = {"n": 2, "top1": 50.0, "top10": 100.0, "groups": {"x->x": {"n": 2, "top1": 50.0, "top10": 100.0}}}


def test_copy_table_one_row_per_mechanism_and_the_references():
    from pipeline.reporting.compare import CompareConfig, comparison_markdown

    metrics = {
        "copynet": {"test": {**EXACT, "copy": {"outputs": COPY_OUT, "references": COPY_REFS}}},
        "rnnsearch": {"test": EXACT},  # an old metrics.json without the analysis: no row
    }
    page = comparison_markdown("t", metrics, CompareConfig(columns=("x->x",)), NAMES, {"test": "exact_match"})
    copy = page[page.index("## test (2 examples): copy analysis") :]
    assert "The 3 references have 3 tokens (33.3%) outside the target vocabulary." in copy
    table = [line for line in copy.splitlines() if line.startswith("|")]
    assert table == [
        "| model | copied | novel 1-grams | novel 2-grams | novel 3-grams | novel 4-grams | repeated 3-grams "
        "| ref. OOV recall | length |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| CopyNet (ours) | 90.0 | 10.0 | 25.0 | 40.0 | - | 0.0 | 33.3 | 5.50 |",
        "| References | 66.7 | 33.3 | 66.7 | 100.0 | 100.0 | 0.0 | - | 3.00 |",
    ]
    # the accuracy tables come first, unchanged
    assert page.index("## test: exact-match accuracy, top1 (%)") < page.index("copy analysis")


def test_no_copy_table_for_metrics_files_without_it():
    from pipeline.reporting.compare import CompareConfig, comparison_markdown

    metrics = {"copynet": {"test": EXACT}, "rnnsearch": {"test": EXACT}}
    page = comparison_markdown("t", metrics, CompareConfig(columns=("x->x",)), NAMES, {"test": "exact_match"})
    assert "copy analysis" not in page and "| CopyNet (ours) | 50.0 | 50.0 |" in page
