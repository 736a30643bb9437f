"""The comparison protocol: nothing is chosen on the test split. A tiny project is trained, evaluated
and compared; then the test split's references are poisoned (each row gets another row's target) and
the stages run again: every choice (each seed's best checkpoint, the learning curves, the validation
figures, the champion) stays exactly what it was, while the test figures move."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pytest
import yaml

from pipeline.config.paths import TaskPaths
from pipeline.io.shards import ShardWriter, read_split

pytestmark = pytest.mark.slow

TASK, MECHANISMS = "copy_rules", ["rnnsearch", "copynet"]


def _poison(split_dir) -> None:
    """Every row's target (and references) replaced by the next row's: the same vocabulary, wrong answers."""
    table = read_split(split_dir)
    shifted = table.column("tgt").to_pylist()
    shifted = shifted[1:] + shifted[:1]
    table = table.set_column(table.column_names.index("tgt"), "tgt", pa.array(shifted, table.schema.field("tgt").type))
    tmp = split_dir.parent / f".{split_dir.name}.poisoned"
    with ShardWriter(tmp, table.schema) as writer:
        writer.write_table(table)
    for old in split_dir.iterdir():
        old.unlink()
    for new in tmp.iterdir():
        new.rename(split_dir / new.name)
    tmp.rmdir()


def _choices(root) -> dict:
    paths = TaskPaths(TASK, root)
    out = {}
    for mech in MECHANISMS:
        ckpt = paths.checkpoints(mech)
        models = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("model.pt"))
        out[mech] = {
            "models": {m: (ckpt / m).read_bytes() for m in models},  # every seed's chosen checkpoint
            "curves": {m: (ckpt / m).with_name("history.json").read_text() for m in models},
            "valid": json.loads((paths.evaluation(mech) / "metrics.json").read_text())["valid"],
        }
    page = (paths.comparison / f"{TASK}.md").read_text()
    out["champion"] = page[page.index("MLflow registry:") :]
    return out


def test_poisoned_test_references_change_no_choice(tiny_project, monkeypatch):
    from pipeline.data.prepare import prepare_job, write_job
    from pipeline.stages import compare, evaluate, train
    from pipeline.stages.vocab import run as vocab_run

    params = yaml.safe_load((tiny_project / "params.yaml").read_text())
    params["mechanisms"] = MECHANISMS
    params["train"].update(seeds=2, epochs=3)  # two seeds, chosen by the validation metric (exact match: auto)
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params))
    path = str(tiny_project / "params.yaml")
    write_job(prepare_job(TASK, path), lambda fn, chunks: map(fn, chunks))
    vocab_run(TASK, path)

    def pipeline() -> dict:
        for mech in MECHANISMS:
            train.run(TASK, mech, path)
            evaluate.run(TASK, mech, path)
        compare.run(path)
        return json.loads((TaskPaths(TASK, tiny_project).evaluation("copynet") / "metrics.json").read_text())

    clean_metrics = pipeline()
    clean = _choices(tiny_project)
    assert len(clean["copynet"]["models"]) == 2 and "valid_top1_greedy" in clean["copynet"]["curves"]["model.pt"]
    # every seed's figures: in metrics.json, in its own MLflow run under the row's, in the intervals
    import mlflow

    seeds = clean_metrics["test"]["seeds"]
    assert sorted(seeds) == ["2", "3"] and seeds["2"]["top1"] == clean_metrics["test"]["top1"]
    runs = {r["tags.mlflow.runName"]: r for _, r in mlflow.search_runs(experiment_names=[TASK]).iterrows()}
    assert runs["copynet seed 3"]["tags.mlflow.parentRunId"] == runs["copynet"]["run_id"]
    assert runs["copynet seed 3"]["metrics.test.top1"] == pytest.approx(seeds["3"]["top1"])
    cell = json.loads(TaskPaths(TASK, tiny_project).intervals(TASK).read_text())["test"]["cells"]["top1"]["copynet"]
    assert cell["seeds"] == 2 and cell["mean"] == pytest.approx((seeds["2"]["top1"] + seeds["3"]["top1"]) / 2)
    # the row registers its best seed by validation top-1 (the earlier on a tie): its model file and figures
    valid = clean_metrics["valid"]["seeds"]
    best = "3" if valid["3"]["top1"] > valid["2"]["top1"] else "2"
    version = max(mlflow.MlflowClient().search_model_versions(f"name='{TASK}'"), key=lambda v: int(v.version))
    assert version.tags["mechanism"] == "copynet" and version.tags["seed"] == best
    assert float(version.tags["metric.valid.top1"]) == pytest.approx(valid[best]["top1"])
    assert float(version.tags["metric.test.top1"]) == pytest.approx(seeds[best]["top1"])
    ckpt = TaskPaths(TASK, tiny_project).checkpoints("copynet")
    chosen = ckpt / "model.pt" if best == "2" else ckpt / "seeds" / best / "model.pt"
    assert version.tags["sha256.model.pt"] == hashlib.sha256(chosen.read_bytes()).hexdigest()
    for split in ("test", "test_unseen"):
        _poison(TaskPaths(TASK, tiny_project).split(split))
    poisoned_metrics = pipeline()
    assert _choices(tiny_project) == clean
    assert poisoned_metrics["test"]["top10"] != clean_metrics["test"]["top10"] or clean_metrics["test"]["top10"] == 0
    assert poisoned_metrics["test"]["top1"] == 0.0  # no row's output is another row's target

    # a later seed that wins on validation is the one registered: its model file and its own figures
    # (here every seed scores 0 on validation, so the choice is forced to the second seed)
    monkeypatch.setattr(evaluate, "registered_seed", lambda *_: "3")
    evaluate.run(TASK, "copynet", path)
    seed3 = {s: m["seeds"]["3"] for s, m in poisoned_metrics.items() if isinstance(m, dict) and "seeds" in m}
    version = max(mlflow.MlflowClient().search_model_versions(f"name='{TASK}'"), key=lambda v: int(v.version))
    assert version.tags["seed"] == "3"
    assert version.tags["sha256.model.pt"] == hashlib.sha256((ckpt / "seeds/3/model.pt").read_bytes()).hexdigest()
    assert {k: float(v) for k, v in version.tags.items() if k.startswith("metric.")} == {
        f"metric.{s}.{k}": pytest.approx(float(v)) for s, m in seed3.items() for k, v in m.items()
    }

    # one seed again: the second seed's checkpoint (a persistent output) goes, and is no longer evaluated
    params["train"]["seeds"] = 1
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(params))
    train.run(TASK, "copynet", path)
    assert not (TaskPaths(TASK, tiny_project).checkpoints("copynet") / "seeds").exists()
