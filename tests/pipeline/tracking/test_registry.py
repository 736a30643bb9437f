"""Registry (versions with metric tags, the champion alias) and parent/child tracking runs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.helpers import EVALUATE, OOV_TEXT, PREPARE, REPO, TASK, local, serving_config


@pytest.fixture(scope="module")
def project(toy_project) -> Path:
    return toy_project


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """A fresh SQLite MLflow store per test (artifacts under tmp_path/mlruns)."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(uri)
    return tmp_path


def test_metric_tags_and_names() -> None:
    from pipeline.tracking.registry import metric_tag, metric_tags, model_name

    metrics = {
        "test": {
            "n": 20,
            "top1": 76.9,
            "top10": 92.1,
            "metric": "exact_match",
            "groups": {"x->xx": {"n": 4, "top1": 50.0}},
        },
        "test_unseen": {"top1": 38.6},
        "valid_loss": 0.5,
    }
    assert metric_tags(metrics) == {
        "metric.test.n": "20.0",
        "metric.test.top1": "76.9",
        "metric.test.top10": "92.1",
        "metric.test_unseen.top1": "38.6",
        "metric.valid_loss": "0.5",
    }
    assert metric_tag("test", "rouge-l") == "metric.test.rouge-l"
    assert model_name("copy_rules") == "copy_rules" and model_name("copy_rules", "copyseq-") == "copyseq-copy_rules"


def _log_and_register(project: Path, mech: str, metrics: dict) -> str:
    import mlflow

    from pipeline.serving.pyfunc import log_pyfunc_model
    from pipeline.tracking.registry import metric_tags, register

    mlflow.set_experiment(TASK)
    with mlflow.start_run(run_name=mech) as run:
        pass
    uri = log_pyfunc_model(
        run.info.run_id, project / "data/checkpoints" / TASK / mech, project / "data/vocab" / TASK, serving_config(mech)
    )
    return register(uri, TASK, {"mechanism": mech, "run_id": run.info.run_id, **metric_tags(metrics)})


def test_champion_moves_to_the_better_version_and_loads(project, store) -> None:
    import mlflow

    from pipeline.tracking.registry import (
        best_version,
        champion,
        champion_history,
        set_champion,
    )

    assert champion(TASK) is None and best_version(TASK, "test.top1") is None  # no model yet
    v1 = _log_and_register(project, "rnnsearch", {"test": {"top1": 0.0}, "valid": {"loss": 0.31}})
    assert v1 == "1"
    set_champion(TASK, v1, "first model")
    assert str(champion(TASK).version) == "1"
    v2 = _log_and_register(project, "copynet", {"test": {"top1": 95.0}, "valid": {"loss": 0.004}})
    assert v2 == "2" and str(champion(TASK).version) == "1"  # registering does not promote
    assert best_version(TASK, "test.top1", higher_is_better=True) == "2"
    assert best_version(TASK, "metric.valid.loss", higher_is_better=False) == "2"
    assert best_version(TASK, "valid.loss", higher_is_better=True) == "1"
    assert best_version(TASK, "test.bleu") is None  # no version has it
    assert best_version(TASK, "test.top1", where={"mechanism": "rnnsearch"}) == "1"  # only comparable versions
    assert best_version(TASK, "test.top1", where={"mechanism": "luong"}) is None
    set_champion(TASK, v2, "test.top1 95.0 > 0.0 (version 1)")
    current = champion(TASK)
    assert str(current.version) == "2" and current.tags["champion_reason"] == "test.top1 95.0 > 0.0 (version 1)"
    assert [(h["version"], h["previous"], h["reason"]) for h in champion_history(TASK)] == [
        ("1", None, "first model"),
        ("2", "1", "test.top1 95.0 > 0.0 (version 1)"),
    ]
    client = mlflow.MlflowClient()
    assert "version 2" in client.get_registered_model(TASK).description

    # models:/<task>@champion is the CopyNet model: it copies the OOV words, the RNNSearch one cannot
    loaded = mlflow.pyfunc.load_model(f"models:/{TASK}@champion")
    texts = [OOV_TEXT, "a s1 s2 b"]
    pd.testing.assert_frame_equal(
        loaded.predict(pd.DataFrame({"text": texts})), local(project, "copynet").predict(texts)
    )
    assert loaded.predict(pd.DataFrame({"text": [OOV_TEXT]}))["output"][0] == "b u1 zz9 u2"

    # a tie goes to the current champion; moving the alias back records another history entry
    client.set_model_version_tag(TASK, "1", "metric.test.top1", "95.0")
    assert best_version(TASK, "test.top1") == "2"
    set_champion(TASK, "1", "rollback")
    assert best_version(TASK, "test.top1") == "1" and str(champion(TASK).version) == "1"
    assert len(champion_history(TASK)) == 3
    # promote_best: the compare stage's one call; a no-op when the best already holds the alias
    from pipeline.tracking.registry import promote_best

    client.set_model_version_tag(TASK, "2", "metric.test.top1", "96.5")
    assert promote_best(TASK, "test.top1") == "2" and str(champion(TASK).version) == "2"
    assert (
        champion(TASK).tags["champion_reason"]
        == "best test.top1 (higher is better): version 2 (96.5); was version 1 (95.0)"
    )
    assert promote_best(TASK, "test.top1") == "2" and len(champion_history(TASK)) == 4
    with pytest.raises(Exception, match="(?i)not found|does not exist|RESOURCE_DOES_NOT_EXIST"):
        set_champion(TASK, "9", "no such version")


def test_predict_cli_registered_model(project, store, tmp_path, capsys, monkeypatch) -> None:
    import io

    from pipeline.serving.predict import main
    from pipeline.tracking.registry import set_champion

    version = _log_and_register(project, "copynet", {"test": {"top1": 95.0}})
    set_champion(TASK, version, "cli test")
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{OOV_TEXT}\na s1 b\n"))
    assert main(["--model", f"models:/{TASK}@champion", "--show-copies"]) == 0
    assert capsys.readouterr().out.splitlines() == ["b [u1] [zz9] [u2]\tu1 zz9 u2", "b s1\t"]


def test_predict_cli_pretokenized_with_a_registered_model(project, store, capsys, monkeypatch) -> None:
    """--pretokenized reaches a registered model (a request param): its reader's tokeniser (here
    Rush et al.'s, which re-tokenises quotes) is skipped, as with --checkpoint."""
    import dataclasses
    import io

    import mlflow

    from pipeline.serving.predict import main
    from pipeline.serving.predictor import ServingConfig
    from pipeline.serving.pyfunc import local_model, log_pyfunc_model
    from pipeline.tracking.registry import register

    rush = ServingConfig.from_params(TASK, "copynet", {"reader": "gigaword", "format": "rush"}, EVALUATE)
    ckpt, vocab = project / "data/checkpoints" / TASK / "copynet", project / "data/vocab" / TASK
    mlflow.set_experiment(TASK)
    with mlflow.start_run(run_name="rush") as run:
        pass
    version = register(log_pyfunc_model(run.info.run_id, ckpt, vocab, rush), "rush_task", {"mechanism": "copynet"})
    text = 'a "u1" b'  # Rush's tokeniser: a `` u# '' b; already tokenised: a "u#" b
    raw = local_model(ckpt, vocab, rush).predict([text])
    pre = local_model(ckpt, vocab, dataclasses.replace(rush, pretokenized=True)).predict([text])
    assert list(raw["tokens"][0]) != list(pre["tokens"][0])
    for flags, expected in (([], raw), (["--pretokenized"], pre)):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text + "\n"))
        assert main(["--model", f"models:/rush_task/{version}", *flags]) == 0
        assert capsys.readouterr().out.splitlines() == [expected["output"][0]]


def _params(project: Path) -> dict:
    return yaml.safe_load((project / "params.yaml").read_text())


def test_parent_key_is_stable_and_children_share_one_parent(project, store) -> None:
    import mlflow

    from pipeline.tracking.runs import (
        RunLogger,
        parent_run,
        pipeline_key,
        pipeline_params,
        provenance_tags,
        task_manifests,
    )

    params = _params(project)
    manifests = task_manifests(project / "data/shards" / TASK)
    assert sorted(manifests) == ["test", "train", "valid"]
    key_params = pipeline_params(params, TASK)
    assert key_params["prepare"] == PREPARE and key_params["evaluate"] == EVALUATE
    key = pipeline_key(TASK, key_params, manifests, commit="abc")
    assert key == pipeline_key(
        TASK, json.loads(json.dumps(key_params)), dict(reversed(manifests.items())), commit="abc"
    )
    changed = json.loads(json.dumps(key_params))
    changed["train"]["epochs"] = 5
    assert pipeline_key(TASK, changed, manifests, commit="abc") != key
    assert pipeline_key(TASK, key_params, manifests, commit="abd") != key

    # A dvc.lock with stages of this task and of another one: per-stage hashes of this task's only.
    lock = {
        "schema": "2.0",
        "stages": {
            "prepare@toy_copy": {"cmd": "python -m flows.prepare --corpus toy_copy", "outs": [{"md5": "1"}]},
            "train@toy_copy-copynet": {"cmd": "train copynet", "outs": [{"md5": "2"}]},
            "train@toy_copy-rnnsearch": {"cmd": "train rnnsearch", "outs": [{"md5": "3"}]},
            "train@toy_copy_big-copynet": {"cmd": "other task", "outs": [{"md5": "4"}]},
        },
    }
    (project / "dvc.lock").write_text(yaml.safe_dump(lock))
    tags = provenance_tags(manifests, TASK, "copynet", root=project)
    stage_sha = {
        k: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest() for k, v in lock["stages"].items()
    }
    assert {k: v for k, v in tags.items() if k.startswith("dvc.stage.")} == {
        "dvc.stage.prepare/toy_copy": stage_sha["prepare@toy_copy"],
        "dvc.stage.train/toy_copy-copynet": stage_sha["train@toy_copy-copynet"],
    }
    assert tags["dvc_lock_sha256"] == hashlib.sha256((project / "dvc.lock").read_bytes()).hexdigest()
    assert tags["data.train.content_sha256"] == manifests["train"]["content_sha256"]

    # Two other processes racing for the parent, and this one: all get the same run. (The store and
    # experiment exist first, as after the earlier stages: concurrent SQLite schema creation is not
    # what is tested.)
    mlflow.set_experiment(TASK)
    script = (
        "import sys, yaml; from pathlib import Path; sys.path.insert(0, sys.argv[2]);"
        "from pipeline.tracking.runs import parent_run, task_manifests, pipeline_params;"
        "root = Path(sys.argv[1]); params = yaml.safe_load((root / 'params.yaml').read_text());"
        "print(parent_run('toy_copy', 'toy_copy', pipeline_params(params, 'toy_copy'),"
        " task_manifests(root / 'data/shards/toy_copy'), root=root))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(project), str(REPO)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    ids = {out.strip().splitlines()[-1] for out, _ in outs}
    parent = parent_run(TASK, TASK, key_params, manifests, root=project)
    assert ids == {parent}
    client = mlflow.MlflowClient()
    live = client.search_runs([client.get_experiment_by_name(TASK).experiment_id], "tags.kind = 'pipeline'")
    assert [r.info.run_id for r in live] == [parent]  # a losing duplicate was deleted
    parent_data = client.get_run(parent).data
    assert parent_data.params["train.epochs"] == "4" and parent_data.tags["task"] == TASK

    for mech in ("copynet", "rnnsearch"):
        with RunLogger(
            TASK,
            mech,
            tags={**provenance_tags(manifests, TASK, mech, root=project), "mechanism": mech},
            parent_run_id=parent,
        ) as run:
            run.params({"train": params["train"]})
    children = client.search_runs(
        [client.get_experiment_by_name(TASK).experiment_id], f"tags.mlflow.parentRunId = '{parent}'"
    )
    assert sorted(r.data.tags["mlflow.runName"] for r in children) == ["copynet", "rnnsearch"]
    by_name = {r.data.tags["mlflow.runName"]: r for r in children}
    assert "dvc.stage.train/toy_copy-rnnsearch" in by_name["rnnsearch"].data.tags
    assert "dvc.stage.train/toy_copy-copynet" not in by_name["rnnsearch"].data.tags

    # Reopening a run (the evaluate stage) keeps it under its parent; a new key gives a new parent.
    with RunLogger(TASK, "copynet", by_name["copynet"].info.run_id, parent_run_id=parent) as run:
        run.metrics({"test": {"top1": 95.0}})
    assert client.get_run(by_name["copynet"].info.run_id).data.tags["mlflow.parentRunId"] == parent
    other = parent_run(TASK, TASK, changed, manifests, root=project)
    assert other != parent


def test_a_model_changed_after_registration_is_neither_promoted_nor_served(project, store) -> None:
    """Registration records the sha256 of the stored model files; promotion and serving check them."""
    import mlflow

    from pipeline.tracking.registry import TamperedModel, set_champion

    version = _log_and_register(project, "copynet", {"test": {"top1": 90.0}})
    client = mlflow.MlflowClient()
    tags = client.get_model_version(TASK, version).tags
    assert (
        tags["sha256.model.pt"]
        == hashlib.sha256((project / "data/checkpoints" / TASK / "copynet" / "model.pt").read_bytes()).hexdigest()
    )
    assert {"sha256.src.vocab", "sha256.tgt.vocab"} <= set(tags)
    source = client.get_model_version(TASK, version).source  # models:/m-...
    stored = Path(mlflow.get_logged_model(source.split("/")[-1]).artifact_location.removeprefix("file://"))
    [model_file] = list(stored.rglob("model.pt"))
    model_file.write_bytes(model_file.read_bytes() + b"\0")  # the stored weights changed after registration
    with pytest.raises(TamperedModel, match="model.pt has sha256 .* registered with"):
        set_champion(TASK, version, "must not happen")
    assert client.get_registered_model(TASK).aliases == {}
    with pytest.raises(ValueError, match="refusing to serve it"):
        mlflow.pyfunc.load_model(f"models:/{TASK}/{version}")
