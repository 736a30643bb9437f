"""The evaluate stage's one-line copy analysis of a split (pipeline.stages.evaluate.copy_summary)."""

from __future__ import annotations

from pipeline.stages.evaluate import copy_summary

OUTPUTS = {"copied": 62.5, "novel_2gram": 12.0, "repeated_3gram": 0.0, "oov_recall": 50.0, "length": 7.4}
REFS = {"copied": 60.0, "novel_2gram": 14.0, "repeated_3gram": None, "oov_tokens": 4, "length": 7.0}


def test_the_line_gives_each_figure_beside_the_references():
    line = copy_summary({"outputs": OUTPUTS, "references": REFS})
    assert line == (
        "copied 62.5% (references 60.0%), novel 2-grams 12.0% (14.0%), repeated 3-grams 0.0% (-), "
        "reference OOV recall 50.0% of 4 tokens, length 7.4 (7.0)"
    )


def test_references_without_an_oov_token_say_so_instead_of_a_recall_of_none():
    line = copy_summary({"outputs": {**OUTPUTS, "oov_recall": None}, "references": {**REFS, "oov_tokens": 0}})
    assert "no reference token outside the target vocabulary, length" in line and "recall" not in line
