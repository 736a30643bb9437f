"""A task with a features column through the vocab, train, evaluate and compare stages (the library
calls `dvc repro` runs): the tags' vocabulary is written and used, the checkpoints are chosen on the
validation metric, the predictions carry the tags, and no output holds one."""

from __future__ import annotations

import json

import pytest
import yaml

from pipeline.data.prepare import prepare_job, write_job
from tests.helpers import FEATURES_TASK, add_features_task

pytestmark = pytest.mark.slow


def test_the_stages_carry_the_features(tmp_path, monkeypatch):
    from pipeline.stages import compare, evaluate, train
    from pipeline.stages.vocab import run as vocab_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    path = add_features_task(tmp_path, {"train": 400, "valid": 30, "test": 30})
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["tasks"] = {FEATURES_TASK: params["tasks"][FEATURES_TASK]}
    params["mechanisms"] = ["copynet"]
    params["model"].update(emb=16, hidden=24)
    params["train"].update(epochs=2, threads=1)
    params["evaluate"].update(beam_size=3, threads=1)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    write_job(prepare_job(FEATURES_TASK, path), lambda fn, chunks: map(fn, chunks))

    vocab_run(FEATURES_TASK, path)
    tags = (tmp_path / "data/vocab" / FEATURES_TASK / "features.vocab").read_text().split()
    assert {"REV", "COPY"} <= set(tags)
    train.run(FEATURES_TASK, "copynet", path)
    curve = json.loads((tmp_path / "data/checkpoints" / FEATURES_TASK / "copynet/history.json").read_text())
    assert "valid_top1_greedy" in curve[-1]  # exact match: checkpoints chosen on the validation metric
    metrics = evaluate.run(FEATURES_TASK, "copynet", path)
    assert metrics["test"]["n"] == 30 and "valid" in metrics
    preds = tmp_path / "data/eval/runs" / FEATURES_TASK / "copynet/predictions/test.jsonl"
    records = [json.loads(line) for line in preds.read_text().splitlines()]
    assert all(r["features"] in (["REV"], ["COPY"]) for r in records)
    assert not any(tok in ("REV", "COPY") for r in records for hyp in r["nbest"] for tok in hyp)
    compare.run(path)
    assert (tmp_path / "data/eval/intervals" / f"{FEATURES_TASK}.json").exists()
