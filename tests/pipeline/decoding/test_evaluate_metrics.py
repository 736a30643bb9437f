"""pipeline.decoding.scoring.score_records: each split scored by the task's metric, with every reference."""

from __future__ import annotations

from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.metrics.registry import text_metrics

RECORDS = [
    {
        "src": ["the", "cat", "sat", "on", "the", "mat"],
        "tgt": ["cat", "sat"],
        "pred": ["the", "cat", "sat"],
        "nbest": [["the", "cat", "sat"]],
        "refs": [["cat", "sat"], ["a", "cat", "sat", "down"]],
        "refs_raw": ["Cat sat.", "A cat sat down."],
    },
    {
        "src": ["dogs", "bark", "loudly"],
        "tgt": ["dogs", "bark"],
        "pred": ["dog", "barks"],
        "nbest": [["dog", "barks"]],
        "refs": [["dogs", "bark"], ["dogs", "barking"]],
        "refs_raw": ["Dogs bark.", "Dogs barking."],
    },
]


def test_text_metric_uses_all_references_and_the_split_override():
    cfg = EvalConfig.from_dict(
        {"metric": "rouge_f", "split_metrics": {"valid": "rouge_recall_75"}, "splits": ["test", "valid"]}
    )
    test = score_records(RECORDS, cfg, "test")
    expected = text_metrics("rouge_f", [r["pred"] for r in RECORDS], [r["refs"] for r in RECORDS])
    assert test == {"metric": "rouge_f", **expected}
    # with one reference only the score differs: the second reference counts
    single = text_metrics("rouge_f", [r["pred"] for r in RECORDS], [[r["tgt"]] for r in RECORDS])
    assert single["rouge1"] != test["rouge1"]
    valid = score_records(RECORDS, cfg, "valid")  # DUC convention on the raw references
    assert valid["metric"] == "rouge_recall_75"
    assert (
        valid["rouge1"]
        == text_metrics(
            "rouge_recall_75",
            [r["pred"] for r in RECORDS],
            [r["refs"] for r in RECORDS],
            refs_raw=[r["refs_raw"] for r in RECORDS],
        )["rouge1"]
    )


def test_exact_match_stays_the_default():
    """Without a ``metric`` the split is scored by exact match against ``tgt``: top-1 counts the rows
    whose best output is the target, top-k those with the target among the first k, and no text metric
    (no ``metric`` key, no ROUGE) is added. Two rows right (one at rank 1, one at rank 2) of four, so
    a scorer that always answers 0, or reads the wrong rank, gives another dict."""
    cfg = EvalConfig.from_dict({"topk": 2})
    assert cfg.metric_for("test") == "exact_match"
    right = [
        {"src": ["x", "y"], "tgt": ["y"], "pred": ["y"], "nbest": [["y"], ["x"]]},  # right at rank 1
        {"src": ["x", "y"], "tgt": ["x"], "pred": ["y"], "nbest": [["y"], ["x"]]},  # right at rank 2
    ]
    # RECORDS: neither best output is its tgt ("the cat sat" is not "cat sat"), nor any later one
    out = score_records(RECORDS + right, cfg, "test")
    assert out == {"n": 4, "top1": 25.0, "top2": 50.0}


def test_copy_analysis_beside_the_metric_given_the_target_vocabulary():
    from pipeline.metrics.copy_analysis import copy_analysis

    vocab = {"the", "cat", "sat", "on", "mat", "a", "dogs", "bark"}  # "dog", "barks", "down", "barking" are OOV
    for cfg in (EvalConfig.from_dict({"topk": 1}), EvalConfig.from_dict({"metric": "rouge_f"})):
        out = score_records(RECORDS, cfg, "test", tgt_vocab=vocab)
        # every reference of refs (not tgt alone), the best output, the source the model read
        assert out["copy"] == copy_analysis(
            [r["pred"] for r in RECORDS], [r["refs"] for r in RECORDS], [r["src"] for r in RECORDS], vocab
        )
        # outputs: the cat sat (3 of 3 in the source) + dog barks (0 of 2): 3 of 5 copied
        assert out["copy"]["outputs"]["copied"] == 60.0
        # reference OOV tokens: down (ref 2 of example 1), barking (ref 2 of example 2); neither output has them
        assert out["copy"]["references"]["oov_tokens"] == 2 and out["copy"]["outputs"]["oov_recall"] == 0.0
        assert out["copy"]["references"]["count"] == 4  # two references per example
    assert "copy" not in score_records(RECORDS, EvalConfig.from_dict({"topk": 1}), "test")


def test_a_75_byte_split_records_the_bytes_of_outputs_and_references():
    """The text ROUGE cuts at 75 bytes: 'the cat sat' (11 bytes), 'dog barks' (9); the references as
    written: 'Cat sat.' 8, 'A cat sat down.' 15, 'Dogs bark.' 10, 'Dogs barking.' 13."""
    cfg = EvalConfig.from_dict({"metric": "rouge_f", "split_metrics": {"valid": "rouge_recall_75"}})
    valid = score_records(RECORDS, cfg, "valid")
    assert (valid["output_bytes"], valid["outputs_under_budget"]) == (10.0, 100.0)
    assert (valid["ref_bytes"], valid["refs_under_budget"]) == (11.5, 100.0)
    assert "output_bytes" not in score_records(RECORDS, cfg, "test")  # full-length F1: no budget
