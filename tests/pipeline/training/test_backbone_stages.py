"""Every copy head and the backbone alone, on each backbone family (BART, T5, Marian with its own slow
tokenizer), through the stages as `dvc repro` runs them: vocab (the tokenizer recorded), train,
evaluate (scored, registered), compare (a row each); and the registered model serves what the
evaluate stage predicted. params.yaml's own rows, on tiny backbones made from the task's text."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from models.registry import DISPLAY_NAMES
from pipeline.config.params import load_params
from pipeline.config.paths import TaskPaths
from pipeline.config.variants import display_names, resolve
from pipeline.data.prepare import prepare_job, write_job
from pipeline.stages import compare, evaluate, train, vocab
from pipeline.tracking.handoff import RunRecord
from pipeline.vocab.tiny_backbone import make_tiny_backbone, shard_texts

pytestmark = pytest.mark.slow

HEADS = {"backbone_lm", "backbone_pointer_generator", "backbone_copynet", "backbone_pointer_softmax"}


@pytest.mark.parametrize("kind", ["bart", "t5", "marian"])
def test_every_head_on_each_family_runs_through_the_stages_and_serves_what_it_scored(tiny_project, kind):
    import mlflow

    params_path = str(tiny_project / "params.yaml")
    params = yaml.safe_load((tiny_project / "params.yaml").read_text())
    backbone = f"data/backbones/tiny_{kind}"
    rows = [n for n, v in params["variants"].items() if (v.get("model") or {}).get("backbone") == backbone]
    assert {resolve(params, n).mechanism for n in rows} == HEADS  # params.yaml's rows: all four on this family
    params["mechanisms"] = rows
    params["evaluate"]["splits"] = ["test"]
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    write_job(prepare_job("copy_rules", params_path), lambda fn, chunks: map(fn, chunks))
    train_split = tiny_project / "data/shards/copy_rules/train"
    sources, targets = shard_texts(train_split, ("src",)), shard_texts(train_split, ("tgt",))
    make_tiny_backbone(kind, sources + targets, tiny_project / backbone, target_texts=targets, d_model=16, layers=1)
    vocab.run("copy_rules", params_path)
    [record] = (tiny_project / "data/vocab/copy_rules/backbones").glob("*/backbone.json")
    assert json.loads(record.read_text())["backbone"] == backbone

    versions = {}
    for row in rows:
        train.run("copy_rules", row, params_path)
        metrics = evaluate.run("copy_rules", row, params_path)
        assert metrics["test"]["n"] > 0 and 0.0 <= metrics["test"]["top1"] <= 100.0
        run_id, _ = RunRecord.of(TaskPaths("copy_rules", tiny_project).train_state(row)).training_run()
        versions[row] = mlflow.MlflowClient().get_run(run_id).data.tags["registered_version"]
    assert len(set(versions.values())) == len(rows)  # one registered version each

    page = compare.run(params_path)["copy_rules"]
    labels = display_names(load_params(params_path), DISPLAY_NAMES)
    assert all(f"| {labels[row]} (ours) |" in page for row in rows), page

    # the registered model of each copy head answers raw text with what the evaluate stage predicted
    for row in rows:
        predictions = tiny_project / f"data/eval/runs/copy_rules/{row}/predictions/test.jsonl"
        records = [json.loads(line) for line in predictions.read_text().splitlines()[:4]]
        served = mlflow.pyfunc.load_model(f"models:/copy_rules/{versions[row]}").predict(
            pd.DataFrame({"text": [" ".join(r["src"]) for r in records]}), params={"pretokenized": True}
        )
        assert [o.split() for o in served["output"]] == [r["pred"] for r in records], row
        assert list(served["copied"]) == [r["copied"] for r in records], row
