"""evaluate.average_last through the stages: the evaluate stage scores and registers the mean of the
training's last K step checkpoints (train.keep_checkpoints), not model.pt."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from pipeline.config.paths import TaskPaths
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.files import sha256_file
from pipeline.stages import evaluate, train, vocab
from pipeline.training.averaging import snapshots
from pipeline.training.checkpoints import load_file

pytestmark = pytest.mark.slow


def test_evaluate_scores_and_registers_the_average_of_the_last_k(tiny_project):
    from mlflow import MlflowClient

    params_path = str(tiny_project / "params.yaml")
    params = yaml.safe_load((tiny_project / "params.yaml").read_text())
    params["train"].update(epochs=3, keep_checkpoints=2)
    params["evaluate"].update(average_last=2, splits=["test"])
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_job(prepare_job("copy_rules", params_path), lambda fn, chunks: map(fn, chunks))
    vocab.run("copy_rules", params_path)
    train.run("copy_rules", "copynet", params_path)

    ckpt = tiny_project / "data/checkpoints/copy_rules/copynet"
    kept = snapshots(ckpt)
    assert len(kept) == 2  # of 3 validations after training started
    metrics = evaluate.run("copy_rules", "copynet", params_path)
    averaged = tiny_project / "data/train_state/copy_rules/copynet/averaged/model.pt"
    first, last, mean = (load_file(p)["model"] for p in (*kept, averaged))
    for key, value in mean.items():
        assert torch.equal(value, ((first[key].double() + last[key].double()) / 2).to(value.dtype)), key
    assert json.loads((tiny_project / "data/eval/runs/copy_rules/copynet/metrics.json").read_text()) == metrics

    # the registered version serves the averaged weights, not model.pt
    client = MlflowClient()
    [version] = client.search_model_versions("name='copy_rules'")
    assert version.tags["sha256.model.pt"] == sha256_file(averaged) != sha256_file(ckpt / "model.pt")

    # more than were kept: a clear error, before anything is scored
    params["evaluate"]["average_last"] = 3
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with pytest.raises(FileNotFoundError, match=r"2 step checkpoint\(s\), 3 asked for"):
        evaluate.run("copy_rules", "copynet", params_path)


def test_every_seed_is_scored_averaged_and_a_later_seed_registers_its_average(tiny_project, monkeypatch):
    """With train.seeds 2, each seed's last K step checkpoints are averaged and scored (not one seed's
    average beside another's last model); a later seed chosen by validation registers its own average."""
    from mlflow import MlflowClient

    params_path = str(tiny_project / "params.yaml")
    params = yaml.safe_load((tiny_project / "params.yaml").read_text())
    params["train"].update(epochs=3, keep_checkpoints=2, seeds=2)
    params["evaluate"].update(average_last=2, splits=["test"])
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_job(prepare_job("copy_rules", params_path), lambda fn, chunks: map(fn, chunks))
    vocab.run("copy_rules", params_path)
    train.run("copy_rules", "copynet", params_path)
    [seed] = evaluate.extra_seeds(TaskPaths("copy_rules", tiny_project), "copynet")

    monkeypatch.setattr(evaluate, "registered_seed", lambda *_: seed)
    evaluate.run("copy_rules", "copynet", params_path)
    ckpt = tiny_project / "data/checkpoints/copy_rules/copynet/seeds" / seed
    averaged = tiny_project / "data/train_state/copy_rules/copynet/seeds" / seed / "averaged/model.pt"
    first, last, mean = (load_file(p)["model"] for p in (*snapshots(ckpt), averaged))
    for key, value in mean.items():
        assert torch.equal(value, ((first[key].double() + last[key].double()) / 2).to(value.dtype)), key
    [version] = MlflowClient().search_model_versions("name='copy_rules'")
    assert version.tags["seed"] == seed
    assert version.tags["sha256.model.pt"] == sha256_file(averaged) != sha256_file(ckpt / "model.pt")
    first_average = tiny_project / "data/train_state/copy_rules/copynet/averaged/model.pt"
    assert sha256_file(first_average) != sha256_file(averaged)
