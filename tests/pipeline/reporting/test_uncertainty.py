"""The comparison's intervals (pipeline.reporting.uncertainty) on hand-made prediction records, and
how the page, the ranking line and the chart show them."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.decoding.settings import EvalConfig
from pipeline.reporting.compare import CompareConfig, comparison_markdown, ranking_line
from pipeline.reporting.plots import interval_dots
from pipeline.reporting.uncertainty import split_intervals

CFG = EvalConfig(topk=2, group_by="rule_type")
RULES = [r for r in range(10) for _ in range(4)]  # 10 rules x 4 instances
TYPES = ["a" if r < 5 else "b" for r in RULES]


def _records(correct: list[bool]) -> list[dict]:
    """Exact-match records: right or wrong at the top, the gold second otherwise."""
    return [
        {
            "id": str(i),
            "src": ["s"],
            "tgt": ["g"],
            "pred": ["g"] if ok else ["w"],
            "rule_type": t,
            "nbest": [["g"], ["w"]] if ok else [["w"], ["g"]],
        }
        for i, (ok, t) in enumerate(zip(correct, TYPES))
    ]


def _by_rule(rules_right: set[int]) -> list[bool]:
    return [r in rules_right for r in RULES]


def test_cells_figures_seeds_and_groups():
    good = [_records(_by_rule(set(range(9)))), _records(_by_rule(set(range(8))))]  # two seeds: 90%, 80%
    bad = [_records(_by_rule({0, 1}))]  # one seed: 20%
    out = split_intervals({"good": good, "bad": bad}, CFG, "test", columns=["a", "b"], groups=RULES)
    assert out["unit"] == "10 groups" and out["resamples"] == 1000
    g, b = out["cells"]["top1"]["good"], out["cells"]["top1"]["bad"]
    assert g["mean"] == pytest.approx(85.0) and g["sd"] == pytest.approx(np.std([90, 80], ddof=1)) and g["seeds"] == 2
    assert b["mean"] == pytest.approx(20.0) and b["sd"] is None and b["seeds"] == 1
    assert g["best"] and not g["significant"] and g["p_value"] == 1.0
    assert b["significant"] and b["p_value"] < 0.05 and b["low"] <= 20.0 <= b["high"]
    assert out["cells"]["top2"]["good"]["mean"] == 100.0  # the gold is always in the 2-best
    # the "a" column: rules 0-4 only (good: 5/5 and 5/5; bad: 2/5)
    assert out["cells"]["a.top1"]["good"]["mean"] == 100.0 and out["cells"]["a.top1"]["bad"]["mean"] == 40.0
    assert out["cells"]["b.top1"]["good"]["mean"] == pytest.approx((80 + 60) / 2)


def test_rows_that_differ_by_one_example_are_not_significant():
    one = _records(_by_rule(set(range(5))))
    other = [dict(r) for r in one]
    other[-1] = _records([True] * 40)[-1]  # one more example right
    out = split_intervals({"x": [one], "y": [other]}, CFG, "test", groups=RULES)
    cells = out["cells"]["top1"]
    assert cells["y"]["best"] and not cells["x"]["significant"] and cells["x"]["p_value"] > 0.05


def test_grouping_widens_the_interval():
    records = [_records(_by_rule({0, 1, 2, 3, 4}))]  # all-or-nothing by rule: instances are not independent
    grouped = split_intervals({"r": records}, CFG, "test", groups=RULES)["cells"]["top1"]["r"]
    examples = split_intervals({"r": records}, CFG, "test")["cells"]["top1"]["r"]
    assert grouped["high"] - grouped["low"] > examples["high"] - examples["low"]


def test_rows_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="different numbers of records"):
        split_intervals({"x": [_records([True] * 40)], "y": [_records([True] * 40)[:39]]}, CFG, "test")


def test_the_page_shows_intervals_bold_ties_and_says_what_they_are():
    good = [_records(_by_rule(set(range(9))))]
    tied = [_records(_by_rule(set(range(8))))]
    bad = [_records(_by_rule({0}))]
    intervals = {
        "test": {
            "resample_by": "rule_id",
            **split_intervals({"good": good, "tied": tied, "bad": bad}, CFG, "test", columns=["a"], groups=RULES),
        }
    }
    metrics = {
        row: {"test": {"n": 40, "top1": c["mean"], "top2": 0.0, "groups": {"a": {"n": 20, "top1": 0.0, "top2": 0.0}}}}
        for row, c in intervals["test"]["cells"]["top1"].items()
    }
    page = comparison_markdown(
        "t", metrics, CompareConfig(columns=("a",), topk=2), {}, {"test": "exact_match"}, intervals
    )
    cells = intervals["test"]["cells"]["top1"]
    assert "| good (ours) | **100.0** [" in page  # the a column: best, bold
    assert f"**{cells['good']['mean']:.1f}** [{cells['good']['low']:.1f}, {cells['good']['high']:.1f}] |" in page
    assert f"**{cells['tied']['mean']:.1f}** [" in page and not cells["tied"]["significant"]
    assert f"| {cells['bad']['mean']:.1f} [" in page and cells["bad"]["significant"]  # not bold
    assert "bootstrap resamples of the test set's 10 groups (`rule_id`)" in page
    assert "With one seed the interval leaves out training variance" in page
    line = ranking_line(metrics, "test", "top1", True, {}, digits=1, cells=cells)
    assert line.startswith(f"test top1: good **{cells['good']['mean']:.1f}** [")


def test_the_chart_draws_every_row(tmp_path):
    cell = {"best": True, "significant": False, "low": 40.0, "high": 60.0}
    rows = {"A (ours)": {"x": 50.0, "all": 55.0}, "A (paper)": {"x": 70.0, "all": 71.0}}
    intervals = {"A (ours)": {"x": cell, "all": {**cell, "best": False, "significant": True}}}
    interval_dots(rows, intervals, ["x", "all"], tmp_path / "c.png", "t", "accuracy (%)")
    assert (tmp_path / "c.png").stat().st_size > 5000
