"""Lead-N baseline (pipeline/reporting/baselines.py): the first N source tokens, scored like a mechanism."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.data.corpora import duc
from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.metrics.registry import text_metrics
from pipeline.reporting.baselines import lead_metrics, lead_records
from tests.helpers import FIXTURES


def table(srcs, tgts, **extra) -> pa.Table:
    return pa.table({"src": srcs, "tgt": tgts, **extra})


def test_lead_takes_the_first_n_source_tokens_and_keeps_the_references():
    t = table([list("abcde"), list("xy")], [list("abc"), list("z")], refs=[[list("abc")], [list("z"), list("y")]])
    recs = lead_records(t, 3)
    assert [r["pred"] for r in recs] == [list("abc"), list("xy")]  # shorter sources: the whole source
    assert [r["nbest"] for r in recs] == [[list("abc")], [list("xy")]]
    assert recs[1]["refs"] == [list("z"), list("y")]
    with pytest.raises(ValueError, match="n must be >= 1"):
        lead_records(t, 0)


def test_lead_rouge_by_hand():
    # a b c d e vs reference a b c: lead-3 matches it exactly (F1 100); lead-5 has P 3/5, R 1,
    # F1 2 * 0.6 / 1.6 = 75; bigrams P 2/4, R 1, F1 2 * 0.5 / 1.5 = 66.67.
    t = table([list("abcde")], [list("abc")])
    cfg = EvalConfig(metric="rouge_f")
    assert score_records(lead_records(t, 3), cfg)["rouge1"] == pytest.approx(100.0)
    m5 = score_records(lead_records(t, 5), cfg)
    assert m5["rouge1"] == pytest.approx(75.0)
    assert m5["rouge2"] == pytest.approx(200 / 3, abs=1e-3)  # metrics keep 3 decimals


def test_lead_exact_match_by_group():
    # rule x->x copies the source: lead-2 is right on the 2-token row, wrong on the 3-token one
    t = table([list("ab"), list("abc"), list("ab")], [list("ab"), list("abc"), list("zz")], rule_type=["x", "x", "y"])
    m = score_records(lead_records(t, 2), EvalConfig(group_by="rule_type", topk=10))
    assert m["top1"] == pytest.approx(100 / 3)
    assert m["groups"]["x"]["top1"] == pytest.approx(50.0)
    assert m["groups"]["y"]["top1"] == pytest.approx(0.0)


def test_lead_metrics_read_the_split_and_score_duc_at_75_bytes(tmp_path):
    duc.write_splits(
        duc.Config.from_dict({"docs_dir": str(FIXTURES / "duc/docs"), "models_dir": str(FIXTURES / "duc/models")}),
        tmp_path,
    )
    cfg = EvalConfig(metric="rouge_recall_75", max_examples=1)
    got = lead_metrics({"test": tmp_path / "test"}, 8, cfg)["test"]
    assert got["n"] == 1  # evaluate.max_examples: the same rows as the mechanisms
    # the first document's lead sentence starts "farmers whose orchards could n't survive the frosts"
    hyp = ["farmers", "whose", "orchards", "could", "n't", "survive", "the", "frosts"]
    row = read_split(tmp_path / "test").to_pylist()[0]
    want = text_metrics("rouge_recall_75", [hyp], [row["refs"]], refs_raw=[row["refs_raw"]])
    assert got["rouge1"] == pytest.approx(want["rouge1"]) and got["rouge1"] > 0
