"""Experiment tables (pipeline/reporting/experiments.py): mean ± sd over seeds, learning curves and their fit."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.reporting.experiments import (
    curve_markdown,
    curve_rows,
    load_runs,
    log_linear_fit,
    mean_sd,
    seed_markdown,
    seed_rows,
)


def exact(all_top1, groups):
    return {"test": {"n": 10, "top1": all_top1, "groups": {g: {"n": 5, "top1": v} for g, v in groups.items()}}}


def test_mean_and_sample_sd_by_hand():
    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)  # sd = sqrt((1 + 0 + 1) / 2)
    assert mean_sd([90.0]) == (90.0, 0.0)


def test_log_linear_fit_by_hand():
    # 10 at 1,000 pairs and 20 at 10,000: +10 per decade, so 30 at 100,000 and 10 log10(2) per doubling
    a, b = log_linear_fit([1000, 10000], [10.0, 20.0])
    assert b == pytest.approx(10 / math.log(10))
    assert a + b * math.log(100000) == pytest.approx(30.0)
    # three points off a line: the least-squares slope of (ln s, v) = (0, 0), (1, 2), (2, 1) is 0.5
    a, b = log_linear_fit([1, math.e, math.e**2], [0.0, 2.0, 1.0])
    assert (a, b) == (pytest.approx(0.5), pytest.approx(0.5))
    with pytest.raises(ValueError, match="two or more distinct sizes"):
        log_linear_fit([5, 5], [1.0, 2.0])


def test_seed_table_mean_sd_and_paper_row(tmp_path):
    for seed, (all_top1, xx) in {"seed1": (90.0, 80.0), "seed2": (92.0, 84.0)}.items():
        (tmp_path / seed).mkdir()
        (tmp_path / seed / "copynet.json").write_text(json.dumps(exact(all_top1, {"x->xx": xx})))
    runs = load_runs(tmp_path)
    rows = seed_rows(runs, "test", ["x->xx"])
    assert rows == {"copynet": {"x->xx": [80.0, 84.0], "all": [90.0, 92.0]}}
    paper = {"columns": ["x->xx"], "rows": {"copynet": [98.3], "rnnsearch": [22.3]}}
    md = seed_markdown(rows, ["x->xx", "all"], {"copynet": "CopyNet"}, paper)
    # sd of (80, 84) = sqrt(8) = 2.83; of (90, 92) = 1.41; the paper's row only for mechanisms we ran
    assert "| CopyNet (ours, 2 seeds) | 82.0 ± 2.8 | 91.0 ± 1.4 |" in md
    assert "| CopyNet (paper) | 98.3 | - |" in md
    assert "rnnsearch" not in md


def test_curve_table_fits_each_mechanism_and_metric():
    runs = {
        "1000": {"copynet": {"test": {"n": 3, "rouge1": 10.0}}},
        "10000": {"copynet": {"test": {"n": 3, "rouge1": 20.0}}, "lead8": {"test": {"n": 3, "rouge1": 21.0}}},
    }
    rows = curve_rows(runs, "test", ["rouge1"])
    assert rows == {"copynet": {"rouge1": {1000: 10.0, 10000: 20.0}}, "lead8": {"rouge1": {10000: 21.0}}}
    md = curve_markdown(rows, ["rouge1"], {"copynet": "CopyNet"}, target=100000)
    per_doubling = 10 * math.log10(2)  # 3.01
    assert f"| CopyNet | rouge1 | 10.00 | 20.00 | +{per_doubling:.2f} | 30.00 |" in md
    assert "| lead8 | rouge1 | - | 21.00 | - | - |" in md  # one size: no fit
    assert "fit at 100,000 (extrapolated)" in md


def test_validation_curves_one_column_pair_per_run(tmp_path):
    from pipeline.reporting.experiments import validation_curves

    header = "step,epoch,train_loss,lr,tokens_per_s,processes,valid_loss,valid_ppl\n"
    for run, rows in {
        "seed1": ["0,0,,0.002,0,1,6.5,665", "10,1,1.2,0.002,9,1,0.25,1.28"],
        "seed2": ["0,0,,0.002,0,1,6.4,600"],
    }.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "copynet.csv").write_text(header + "\n".join(rows) + "\n")
    md = validation_curves(tmp_path, "copynet")
    assert "| 0 | 6.5000 | 0.002 | 6.4000 | 0.002 |" in md
    assert "| 1 | 0.2500 | 0.002 | - | - |" in md  # seed2 stopped earlier
    assert validation_curves(tmp_path, "rnnsearch") == ""


def test_curve_table_sets_the_papers_row_beside_ours():
    rows = {"read_again": {"rouge1": {1000: 10.0, 2000: 12.0}}, "copynet": {"rouge1": {1000: 9.0, 2000: 9.5}}}
    paper = {"columns": ["rouge1"], "rows": {"read_again": [27.37]}, "labels": {"read_again": "Ours-LSTM (C), 15K"}}
    md = curve_markdown(rows, ["rouge1"], {}, 8000, paper, {"read_again": "read_again"})
    assert md.splitlines()[0].endswith("| fit at 8,000 (extrapolated) | paper |")
    assert "| read_again | rouge1 | 10.00 | 12.00 | +2.00 | 16.00 | 27.37 (Ours-LSTM (C), 15K) |" in md
    assert "| copynet | rouge1 | 9.00 | 9.50 | +0.50 | 10.50 | - |" in md  # no paper row for it


def test_sizes_table_keeps_model_order_when_a_row_has_one_size_only(tmp_path):
    """A row measured at the largest size only (a variant trained later) sits among the models,
    not after the baselines that every size has, and carries the label it is given."""
    from pipeline.reporting.experiments import render_experiment

    (tmp_path / "experiment.yaml").write_text("kind: sizes\ntask: t\nsplit: test\ncolumns: [rouge1]\ntarget: 100000\n")
    sizes = {
        "1000": {"copynet": 10.0, "lead8": 21.0},
        "10000": {"copynet": 20.0, "lead8": 21.0, "copynet_transformer": 22.0},
    }
    for size, per_mech in sizes.items():
        (tmp_path / size).mkdir()
        for mech, r1 in per_mech.items():
            (tmp_path / size / f"{mech}.json").write_text(json.dumps({"test": {"n": 3, "rouge1": r1}}))
    display = {"copynet": "CopyNet", "copynet_transformer": "CopyNet (Transformer decoder)"}
    lines = [line.split(" | ")[0] for line in render_experiment(tmp_path, display).splitlines()[2:]]
    assert lines == ["| CopyNet", "| CopyNet (Transformer decoder)", "| Lead-8 (first 8 source tokens)"]
