"""pipeline.tracking.datasets: a split's shard manifest as an MLflow dataset input of a run (name,
digest from the manifest's content hash, the shard folder as source, row counts, schema, context)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pipeline.io.shards import ShardWriter, make_schema


def _split(folder, rows: int, quarantined: int = 0) -> dict:
    """A split of ``rows`` rows in parts of 2 (plus ``quarantined`` records set aside); its manifest."""
    schema = make_schema([pa.field("rule_id", pa.int32()), pa.field("keep", pa.bool_())])
    with ShardWriter(folder, schema, rows_per_part=2) as writer:
        writer.write(
            [
                {"id": f"r{i}", "src": ["a", "b"], "tgt": ["a"], "refs": [["a"]], "rule_id": i, "keep": True}
                for i in range(rows)
            ]
        )
        for i in range(quarantined):
            writer.quarantine({"line": i}, "empty source")
    return writer.close()


@pytest.fixture
def store(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(uri)
    return tmp_path


def test_splits_become_the_runs_dataset_inputs(store):
    import mlflow

    from pipeline.tracking.datasets import DIGEST_CHARS
    from pipeline.tracking.runs import RunLogger

    shards = store / "data/shards/toy"
    manifests = {"train": _split(shards / "train", 5, quarantined=2), "valid": _split(shards / "valid", 3)}
    test = _split(shards / "test", 4)
    with RunLogger("toy", "copynet") as run:
        run.datasets("toy", {s: shards / s for s in manifests}, stage="train")
        run_id = run.run_id
    # the evaluate stage reopens the run and adds the split it scored (the first 2 rows of 4)
    with RunLogger("toy", "copynet", run_id) as run:
        run.datasets("toy", {"test": shards / "test"}, stage="evaluate", tags={"test": {"rows_scored": "2"}})
        run.datasets("toy", {"train": shards / "train"}, stage="evaluate")  # logged already: kept once

    inputs = mlflow.MlflowClient().get_run(run_id).inputs.dataset_inputs
    by_name = {i.dataset.name: i for i in inputs}
    assert sorted(by_name) == ["toy/test", "toy/train", "toy/valid"]
    for split, manifest in {**manifests, "test": test}.items():
        ds = by_name[f"toy/{split}"].dataset
        assert len(manifest["content_sha256"]) == 64 and DIGEST_CHARS == 16  # MLflow keeps 36 characters at most
        assert ds.digest == manifest["content_sha256"][:16]
        profile = json.loads(ds.profile)
        assert profile["content_sha256"] == manifest["content_sha256"]
        assert ds.source_type == "local" and json.loads(ds.source) == {"uri": str((shards / split).resolve())}
        assert [c["name"] for c in json.loads(ds.schema)["mlflow_colspec"]] == [
            "id",
            "src",
            "tgt",
            "refs",
            "rule_id",
            "keep",
        ]
    assert json.loads(by_name["toy/train"].dataset.profile) == {
        "num_rows": 5,
        "rows_in": 7,
        "rows_quarantined": 2,
        "parts": 3,  # 2 + 2 + 1 rows
        "content_sha256": manifests["train"]["content_sha256"],
    }
    assert json.loads(by_name["toy/test"].dataset.profile)["num_rows"] == 4
    colspec = {c["name"]: c for c in json.loads(by_name["toy/test"].dataset.schema)["mlflow_colspec"]}
    assert colspec["refs"]["type"] == "array" and colspec["refs"]["items"] == {
        "type": "array",
        "items": {"type": "string"},
    }
    assert colspec["rule_id"]["type"] == "integer" and colspec["keep"]["type"] == "boolean"

    tags = {name: {t.key: t.value for t in i.tags} for name, i in by_name.items()}
    assert tags["toy/train"] == {"mlflow.data.context": "training", "stage": "train"}
    assert tags["toy/valid"] == {"mlflow.data.context": "validation", "stage": "train"}
    assert tags["toy/test"] == {"mlflow.data.context": "evaluation", "stage": "evaluate", "rows_scored": "2"}


def test_context_by_stage_and_split():
    from pipeline.tracking.datasets import context

    assert [context("train", s) for s in ("train", "valid")] == ["training", "validation"]
    assert {context("evaluate", s) for s in ("test", "test_unseen", "duc2004", "valid")} == {"evaluation"}
