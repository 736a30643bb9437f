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


# --------------------------------------------------------------------------- #
# DUC's 75-byte budget and the paper rows a page leaves out
# --------------------------------------------------------------------------- #

R75 = {"n": 2, "metric": "rouge_recall_75", "rouge1": 11.45, "rouge2": 3.07, "rougeL": 10.58}
BUDGET = {"output_bytes": 41.5, "outputs_under_budget": 100.0, "ref_bytes": 70.25, "refs_under_budget": 62.5}


def test_a_75_byte_split_shows_the_outputs_bytes_against_the_budget():
    from pipeline.reporting.compare import CompareConfig, comparison_markdown

    metrics = {
        "copynet": {"valid": {**R75, **BUDGET}},
        "lead8": {"valid": {**R75, "rouge1": 14.56, **BUDGET, "output_bytes": 47.0, "outputs_under_budget": 50.0}},
    }
    names = {**NAMES, "lead8": "Lead-8"}
    cfg = CompareConfig(splits=("valid",), columns=("rouge1", "rouge2", "rougeL"))
    page = comparison_markdown("t", metrics, cfg, names, {"valid": "rouge_recall_75"})
    budget = page[page.index("Length against the 75-byte budget") :]
    assert [line for line in budget.splitlines() if line.startswith("|")] == [
        "| model | mean output bytes | outputs under 75 bytes (%) |",
        "|---|---:|---:|",
        "| CopyNet (ours) | 41.5 | 100.0 |",
        "| Lead-8 (ours) | 47.0 | 50.0 |",
        "| References | 70.2 | 62.5 |",
    ]
    assert page.index("| Lead-8 (ours) | 14.56 |") < page.index("Length against")  # under the ROUGE table
    # metrics files written before the bytes were measured render as before; other metrics never show it
    old = {m: {"valid": R75} for m in metrics}
    assert "75-byte budget" not in comparison_markdown("t", old, cfg, names, {"valid": "rouge_recall_75"})
    full = {m: {"valid": {**R75, **BUDGET, "metric": "rouge_f"}} for m in metrics}
    assert "75-byte budget" not in comparison_markdown("t", full, cfg, names, {"valid": "rouge_f"})


def test_paper_rows_left_out_are_named_with_the_reason():
    from pipeline.reporting.compare import CompareConfig, comparison_markdown

    names = {**NAMES, "read_again": "Read-Again + copy"}
    cfg = CompareConfig(splits=("duc2004",), paper_tables={"read_again_table2_duc2004": "duc2004"})
    metrics = {"copynet": {"duc2004": R75}}
    page = comparison_markdown("gigaword", metrics, cfg, names, {"duc2004": "rouge_recall_75"})
    lines = page.splitlines()
    assert "| Ours-Opt-2 (C), 15K (paper) | 29.74 | 9.44 | 25.94 |" in lines  # not a mechanism: always shown
    assert not any(line.startswith("| Ours-LSTM (C), 15K (paper)") for line in lines)
    assert lines[-1] == (
        "Not shown: Zeng et al. 2016 (Read-Again), Table 2 row 'Ours-LSTM (C), 15K' (read_again not in `mechanisms`)."
    )
    # trained but not scored on the split: that reason instead
    metrics["read_again"] = {"duc2004": {"skipped": "no shards at data/shards/gigaword/duc2004 (optional split)"}}
    page = comparison_markdown("gigaword", metrics, cfg, names, {"duc2004": "rouge_recall_75"})
    assert "row 'Ours-LSTM (C), 15K' (read_again not evaluated on duc2004)." in page
    # with the mechanism's row of ours, the paper's row is shown and nothing is listed
    metrics["read_again"] = {"duc2004": R75}
    page = comparison_markdown("gigaword", metrics, cfg, names, {"duc2004": "rouge_recall_75"})
    assert "| Ours-LSTM (C), 15K (paper) | 29.89 | 9.37 | 25.93 |" in page and "Not shown" not in page
