"""pipeline.decoding.validation: the task's metric on the validation rows, which chooses checkpoints
(``train.select_by: metric``, what ``auto`` resolves to for the exact-match tasks).

A tiny CopyNet (random weights, dropout 0.5) on the toy copy task's vocabulary and six validation rows.
Its greedy outputs are random, so three rows' targets are set to what it outputs: the scorer's top-1
is then known by hand (3 of 6 rows right: 50), and every other figure is checked against
``score_records(decode_table(...))`` with the settings the scorer promises to use.
"""

from __future__ import annotations

import dataclasses
import random

import pyarrow as pa
import pytest
import torch

from benchmarks.toy import PREPARE, TASK, TOY_SEEN, toy_copy_example, toy_copy_vocab, write_toy_task
from pipeline.config.paths import TaskPaths
from pipeline.config.schema import check_params
from pipeline.config.tasks import effective_params
from pipeline.config.validation import SettingsError
from pipeline.decoding.decode import decode_table
from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.decoding.validation import ValidationScorer, job_scorer, validation_scorer
from pipeline.io.shards import make_schema, read_split
from pipeline.training.job import TrainJob
from pipeline.vocab.vocabulary import SPECIALS, Vocab
from tests.helpers import toy_model

CPU = torch.device("cpu")
VOCAB = toy_copy_vocab()
EVAL = EvalConfig.from_dict({"beam_size": 5, "topk": 10, "max_len": 8, "batch_size": 40, "device": "cpu"})
RIGHT = (0, 2, 3)  # the rows whose target is the model's greedy output


def _model(training: bool = False):
    """The toy CopyNet, with dropout: in training mode its outputs are others (dropout draws)."""
    model = toy_model("copynet", VOCAB, VOCAB, seed=0, scale=2.0, config={"dropout": 0.5})
    return model.train(training)


def _rows() -> list[dict]:
    rng = random.Random(0)
    return [
        {"id": f"valid:{i}", "src": src, "tgt": tgt, "refs": [tgt]}
        for i, (src, tgt) in enumerate(toy_copy_example(rng, TOY_SEEN) for _ in range(6))
    ]


@pytest.fixture(scope="module")
def table() -> pa.Table:
    """Six rows; rows 0, 2 and 3 have the model's greedy output as their target, the others the
    toy task's target, which the untrained model does not output."""
    rows = _rows()
    greedy = dataclasses.replace(EVAL, beam_size=1, topk=1)
    preds = [
        r["pred"] for r in decode_table(_model(), pa.Table.from_pylist(rows, make_schema()), VOCAB, VOCAB, greedy, CPU)
    ]
    for i in RIGHT:
        assert preds[i] and preds[i] != rows[i]["tgt"]  # a real change of target
        rows[i]["tgt"] = rows[i]["refs"][0] = preds[i]
    for i in set(range(6)) - set(RIGHT):
        assert preds[i] != rows[i]["tgt"]
    return pa.Table.from_pylist(rows, make_schema())


def _expected(model, table: pa.Table, cfg: EvalConfig, key: str) -> float:
    return score_records(decode_table(model.eval(), table, VOCAB, VOCAB, cfg, CPU), cfg, "valid")[key]


def test_greedy_top1_is_the_decoded_tables_exact_match(table):
    """Beam 1 (greedy): the name says so, the search is narrowed to it (top-k with it), the rest of
    the evaluate settings are kept, and the value is exact-match top-1 of the decoded rows: 3 of 6."""
    scorer = validation_scorer(table, (VOCAB, VOCAB), EVAL, "top1", 1, CPU)
    assert isinstance(scorer, ValidationScorer) and scorer.name == "valid_top1_greedy"
    assert (scorer.cfg.beam_size, scorer.cfg.topk) == (1, 1)
    assert dataclasses.replace(scorer.cfg, beam_size=EVAL.beam_size, topk=EVAL.topk) == EVAL
    assert scorer.table is table  # no limit: every row
    assert scorer(_model()) == 50.0
    assert scorer(_model()) == _expected(_model(), table, scorer.cfg, "top1")


@pytest.mark.parametrize(("topk", "beam", "kept"), [(10, 3, 3), (2, 5, 2), (4, 4, 4)])
def test_a_wider_beam_keeps_the_top_k_within_it(table, topk, beam, kept):
    """``topk = min(evaluate.topk, beam)``: the metric's top-k key exists whatever the two settings, and
    its value is that of the evaluate stage's decode with that beam."""
    cfg = dataclasses.replace(EVAL, topk=topk)
    scorer = validation_scorer(table, (VOCAB, VOCAB), cfg, f"top{kept}", beam, CPU)
    assert (scorer.cfg.beam_size, scorer.cfg.topk) == (beam, kept)
    assert scorer.name == f"valid_top{kept}_beam{beam}"
    value = scorer(_model())
    assert value == _expected(_model(), table, dataclasses.replace(cfg, beam_size=beam, topk=kept), f"top{kept}")
    top1 = validation_scorer(table, (VOCAB, VOCAB), cfg, "top1", beam, CPU)(_model())
    assert value >= top1  # (top-k counts every row top-1 does)


@pytest.mark.parametrize(("limit", "rows", "top1"), [(2, 2, 50.0), (4, 4, 75.0), (6, 6, 50.0), (100, 6, 50.0)])
def test_limit_scores_the_first_rows_only(table, limit, rows, top1):
    """``limit`` (``train.max_valid_examples``): the first ``limit`` rows, in order (rows 0-1: one right;
    rows 0-3: three right); a limit past the table keeps it whole."""
    scorer = validation_scorer(table, (VOCAB, VOCAB), EVAL, "top1", 1, CPU, limit=limit)
    assert scorer.table.column("id").to_pylist() == [f"valid:{i}" for i in range(rows)]
    assert scorer(_model()) == top1


def test_a_model_in_training_mode_is_scored_in_eval_mode_and_left_training(table):
    """Dropout 0.5 changes this model's outputs in training mode (checked): the scorer decodes in eval
    mode, so a training model scores as the same model in eval mode, and is given back in training
    mode (the training loop continues with dropout); a model in eval mode stays in eval mode."""
    scorer = validation_scorer(table, (VOCAB, VOCAB), EVAL, "top1", 1, CPU)
    model = _model(training=True)
    with torch.inference_mode():
        dropped = decode_table(model, table, VOCAB, VOCAB, scorer.cfg, CPU)
    assert score_records(dropped, scorer.cfg, "valid")["top1"] != 50.0  # dropout would change the figure
    model = _model(training=True)
    assert scorer(model) == 50.0
    assert model.training and all(m.training for m in model.modules())
    model = _model(training=False)
    assert scorer(model) == 50.0
    assert not model.training and not any(m.training for m in model.modules())


def test_the_metric_is_the_validation_splits(table):
    """The rows are scored as the validation split (``split_metrics.valid``), not by the test split's
    metric: with BLEU for valid and exact match elsewhere, ``bleu`` is the scorer's figure."""
    cfg = dataclasses.replace(EVAL, split_metrics=(("valid", "bleu"),))
    scorer = validation_scorer(table, (VOCAB, VOCAB), cfg, "bleu", 1, CPU)
    assert scorer.name == "valid_bleu_greedy"
    value = scorer(_model())
    assert value == _expected(_model(), table, scorer.cfg, "bleu")
    assert 0.0 < value < 100.0  # three rows right, three wrong


def test_a_features_column_is_decoded_with_the_features_vocabulary():
    """A task with a features column: the scorer batches the rows with the task's features
    vocabulary (without it the rows cannot be batched), and scores as decode_table given it."""
    features = Vocab([*SPECIALS, "F1", "F2"], [0] * len(SPECIALS) + [1, 1])
    schema = make_schema([pa.field("features", pa.list_(pa.string()))])
    rows = [{**row, "features": [["F1"], ["F2", "F1"], []][i % 3]} for i, row in enumerate(_rows())]
    table = pa.Table.from_pylist(rows, schema)
    model = toy_model("copynet", VOCAB, VOCAB, seed=0, scale=2.0, config={"features_vocab": len(features)})
    scorer = validation_scorer(table, (VOCAB, VOCAB), EVAL, "top1", 2, CPU, features_vocab=features)
    records = decode_table(model, table, VOCAB, VOCAB, scorer.cfg, CPU, features_vocab=features)
    assert [r["features"] for r in records] == [["F1"], ["F2", "F1"], [], ["F1"], ["F2", "F1"], []]
    assert scorer(model) == score_records(records, scorer.cfg, "valid")["top1"]
    with pytest.raises(ValueError, match="features column"):
        validation_scorer(table, (VOCAB, VOCAB), EVAL, "top1", 2, CPU)(model)


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory):
    """The toy copy task's shards and vocabularies as the stages write them (64 validation rows)."""
    root = tmp_path_factory.mktemp("validation_task")
    write_toy_task(root)
    return root


def _job(root, train: dict, evaluate: dict | None = None, champion: str | None = None) -> TrainJob:
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": ["copynet"],
        "prepare": {TASK: PREPARE},
        "model": {"emb": 8, "hidden": 8},
        "train": {"device": "cpu", **train},
        "evaluate": {"beam_size": 4, "topk": 3, "max_len": 9, **(evaluate or {})},
    }
    if champion:
        params["task_settings"] = {TASK: {"champion": champion}}
    return TrainJob(TaskPaths(TASK, root), "copynet", effective_params(params, TASK, "copynet"))


def test_job_scorer_reads_the_jobs_validation_rows_settings_and_metric(toy_task):
    """A job choosing checkpoints by the metric gets a scorer over its valid split's first
    ``max_valid_examples`` rows, its vocabularies, its evaluate settings with the search narrowed to
    ``select_beam``, and the task's champion key (``valid.top1`` by default)."""
    job = _job(toy_task, {"select_by": "metric", "select_beam": 2, "max_valid_examples": 5})
    scorer = job_scorer(job)
    assert isinstance(scorer, ValidationScorer)
    assert scorer.table.to_pylist() == read_split(job.paths.split("valid")).slice(0, 5).to_pylist()
    assert scorer.vocabs == (job.src_vocab, job.tgt_vocab) and scorer.device == CPU
    assert (scorer.key, scorer.name) == ("top1", "valid_top1_beam2")
    evaluate = EvalConfig.from_params(job.params)
    assert scorer.cfg == dataclasses.replace(evaluate, beam_size=2, topk=2)
    assert scorer.tokenizer is None and scorer.features_vocab is None

    whole = job_scorer(_job(toy_task, {"select_by": "metric", "select_beam": 3}, champion="valid.top3"))
    assert whole.table.num_rows == 64 and whole.key == "top3" and whole.name == "valid_top3_beam3"
    assert (whole.cfg.beam_size, whole.cfg.topk) == (3, 3)
    model = _model()
    assert whole(model) == _expected(model, read_split(job.paths.split("valid")), whole.cfg, "top3")


def test_a_top_k_champion_is_refused_with_a_narrower_selection_beam_and_scored_with_a_wide_one(toy_task):
    """``champion: valid.top3`` (``evaluate.topk`` 3) chooses the checkpoints of an exact-match task
    (``select_by: auto``), decoded with a beam of ``train.select_beam``: the default 1 gives no top-3,
    so the settings check refuses the pair before any work, naming both; ``select_beam: 3`` scores it."""
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": ["copynet"],
        "prepare": {TASK: PREPARE},
        "train": {"device": "cpu"},
        "evaluate": {"topk": 3},
        "task_settings": {TASK: {"champion": "valid.top3"}},
    }
    with pytest.raises(SettingsError, match=r"champion is 'valid\.top3' .* train\.select_beam is 1"):
        check_params(params)
    params["train"]["select_beam"] = 3
    check_params(params)
    job = TrainJob(TaskPaths(TASK, toy_task), "copynet", effective_params(params, TASK, "copynet"))
    scorer = job_scorer(job)
    assert scorer is not None and scorer.key == "top3" and scorer.cfg.beam_size == scorer.cfg.topk == 3
    value = scorer(_model())
    assert isinstance(value, float) and 0.0 <= value <= 100.0


def test_job_scorer_follows_select_by(toy_task):
    """``select_by: loss`` -> no scorer; ``auto`` -> one for an exact-match task (the default) and none
    for a task scored by a text metric on its validation split."""
    assert job_scorer(_job(toy_task, {"select_by": "loss"})) is None
    assert isinstance(job_scorer(_job(toy_task, {})), ValidationScorer)  # auto, exact match
    assert job_scorer(_job(toy_task, {}, {"metric": "rouge_f"})) is None
    assert job_scorer(_job(toy_task, {}, {"split_metrics": {"valid": "bleu"}})) is None
