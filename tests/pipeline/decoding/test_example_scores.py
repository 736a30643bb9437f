"""pipeline.decoding.scoring.example_scores: per-example scores whose unweighted score is each
headline number of score_records, for every metric kind and the split override."""

from __future__ import annotations

import pytest

from pipeline.decoding.scoring import example_scores, score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.metrics.byte_budget import byte_budget
from pipeline.metrics.registry import TEXT_METRIC_KINDS

RECORDS = [
    {
        "src": "the cat sat on the mat in the sun".split(),
        "tgt": "the cat sat on the mat".split(),
        "pred": "the cat sat on the mat".split(),
        "nbest": ["the cat sat on the mat".split(), "a cat sat".split()],
        "refs": ["the cat sat on the mat".split(), "a cat sat on the mat in the sun".split()],
        "refs_raw": ["The cat sat on the mat.", "A cat sat on the mat in the sun."],
    },
    {
        "src": "dogs bark loudly at night in the town".split(),
        "tgt": "dogs bark at night".split(),
        "pred": "dog barks at night in town".split(),
        "nbest": ["dog barks at night in town".split(), "dogs bark at night".split()],
        "refs": ["dogs bark at night".split()],
        "refs_raw": ["Dogs barked all night, neighbours said."],  # not the tokens: the raw text counts
    },
    {
        "src": "stocks rose sharply on monday as markets rallied".split(),
        "tgt": "stocks rose on monday".split(),
        "pred": "markets rallied".split(),
        "nbest": ["markets rallied".split()],
    },
]
BYTE_KEYS = set(byte_budget([], []))  # the 75-byte diagnostics: not a score of the examples


@pytest.mark.parametrize("kind", ("exact_match", *TEXT_METRIC_KINDS))
def test_example_scores_give_the_headline_numbers(kind):
    cfg = EvalConfig.from_dict({"metric": "rouge_f", "split_metrics": {"valid": kind}, "topk": 2})
    out = score_records(RECORDS, cfg, "valid")
    es = example_scores(RECORDS, cfg, "valid")
    assert set(es) == set(out) - {"n", "metric", "groups"} - BYTE_KEYS
    for key, scores in es.items():
        assert len(scores) == len(RECORDS)
        assert scores.score() == pytest.approx(out[key], abs=1e-9), key
    if kind == "exact_match":
        assert set(es) == {"top1", "top2"} and es["top2"].score() == pytest.approx(200 / 3)


def test_refs_raw_only_when_every_record_has_them():
    cfg = EvalConfig.from_dict({"metric": "rouge_recall_75"})
    two = RECORDS[:2]  # both have refs_raw: the cut is taken on the raw text
    raw = example_scores(two, cfg)["rouge1"].score()
    assert raw == pytest.approx(score_records(two, cfg)["rouge1"], abs=1e-9)
    tokens = [{k: v for k, v in r.items() if k != "refs_raw"} for r in two]
    assert raw != pytest.approx(example_scores(tokens, cfg)["rouge1"].score())
