"""Scheduled retraining (flows/retrain.py over pipeline/retrain/): champion/challenger promotion under
Prefect's test harness.

The flow is called directly (no clock, no schedule). One MLflow SQLite store for the module; each
scenario uses its own task name (its own registered model, shards and data/retrain/<task>/), with
tiny generated data copied from one prepared base. The `champion` fixture runs the flow once on
real training + real evaluation; the keep and crash tests then check that it is left exactly as it
was, and the promotion test (last: it moves the alias) replaces it.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import tiny_params

pytestmark = pytest.mark.slow

BASE = "rt_base"
MECH = "copynet"


# --------------------------------------------------------------------------- #
# Fixtures and helpers
# --------------------------------------------------------------------------- #


def _generate(root: Path, task: str, seed: int) -> None:
    """Tiny CopyNet-rules shards for ``task`` (the generator directly), its vocabularies and the
    encoded train/valid splits (the vocab stage's outputs)."""
    from pipeline.config.paths import TaskPaths
    from pipeline.data.corpora import copynet_rules
    from pipeline.stages.vocab import build, encode

    settings = dict(tiny_params()["prepare"]["copy_rules"], **PREPARE, seed=seed)
    settings.pop("reader")
    copynet_rules.write_splits(copynet_rules.Config.from_dict(settings), root / "data" / "shards" / task)
    for side in ("src", "tgt"):
        build(TaskPaths(task, root), side, None, 1)
    for split in ("train", "valid"):
        encode(TaskPaths(task, root), split)


PREPARE = {"n_rules": 4, "instances_per_rule": 16, "max_filler": 3}
TRAIN = {"epochs": 5, "batch_size": 8, "lr": 0.02}  # top-1 about 34 on the tiny test split, in ~1.5 s
MODEL = {"emb": 24, "hidden": 24}


@pytest.fixture(scope="module")
def project(tmp_path_factory, harness):
    """A project root with tiny params, base data and its own MLflow store (module-wide)."""
    root = tmp_path_factory.mktemp("retrain")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    mp.chdir(root)  # MLflow artifacts go to ./mlruns
    _generate(root, BASE, seed=1234)
    yield root
    mp.undo()


def setup_task(root: Path, task: str, **retrain) -> str:
    """Give ``task`` a copy of the base data and a params file whose retrain section runs it."""
    for kind in ("shards", "vocab"):
        if not (root / "data" / kind / task).exists():
            shutil.copytree(root / "data" / kind / BASE, root / "data" / kind / task)
    params = tiny_params()
    params["train"].update(TRAIN)
    params["model"].update(MODEL)
    params["retrain"] = {
        "task": task,
        "mechanism": MECH,
        "metric": "valid.top1",
        "margin": 0.0,
        "pull": True,
        "repro_targets": ["vocab@{task}"],
        "retries": 1,
        "retry_delay_s": 0,
        **retrain,
    }
    path = root / f"params-{task}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return str(path)


class FakeDvc:
    """Stands in for pipeline.retrain.commands.run_command: records each command; ``fail`` maps a dvc verb to how
    many of its first calls raise CommandError (a transient failure)."""

    def __init__(self, **fail: int):
        self.calls: list[list[str]] = []
        self.fail = dict(fail)

    def __call__(self, cmd, cwd, timeout_s):
        from pipeline.retrain.commands import CommandError

        self.calls.append(cmd[3:])  # after [python, -m, dvc]
        verb = cmd[3]
        if self.fail.get(verb, 0) > 0:
            self.fail[verb] -= 1
            raise CommandError(f"`dvc {verb}` failed with exit status 1; stderr:\nERROR: transient", "ERROR: transient")
        return ""


def alias_version(task: str) -> str | None:
    from pipeline.tracking import registry

    mv = registry.champion(task)
    return None if mv is None else str(mv.version)


def versions(task: str) -> list:
    from mlflow import MlflowClient

    from pipeline.tracking import registry

    return sorted(
        MlflowClient().search_model_versions(f"name='{registry.model_name(task)}'"), key=lambda v: int(v.version)
    )


def decisions(root: Path, task: str) -> list[dict]:
    path = root / "data" / "retrain" / task / "decisions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tree_hashes(*dirs: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in dirs
        if d.exists()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def independent_top1(checkpoint: Path, vocab_dir: Path, test_dir: Path, params: dict) -> float:
    """Top-1 on a split computed here with pipeline.decoding.decode alone (not through the flow)."""
    import torch

    from pipeline.decoding.decode import decode_table
    from pipeline.decoding.scoring import score_records
    from pipeline.decoding.settings import EvalConfig
    from pipeline.io.shards import read_split
    from pipeline.training.checkpoints import load_model
    from pipeline.vocab.vocabulary import Vocab

    cfg = EvalConfig.from_dict({k: v for k, v in params["evaluate"].items() if k != "heatmap"})
    model, _ = load_model(checkpoint, MECH, torch.device("cpu"))
    records = decode_table(
        model,
        read_split(test_dir),
        Vocab.load(vocab_dir / "src.vocab"),
        Vocab.load(vocab_dir / "tgt.vocab"),
        cfg,
        torch.device("cpu"),
    )
    return score_records(records, cfg, "test")["top1"]


@pytest.fixture(scope="module")
def champion(project):
    """Case (a): no champion yet -> the challenger (real training, real evaluation) is promoted."""
    import flows.retrain as rt
    from pipeline.retrain import commands

    task = "rt_main"
    params_path = setup_task(project, task)
    mp = pytest.MonkeyPatch()
    dvc = FakeDvc()
    mp.setattr(commands, "run_command", dvc)
    try:
        record = rt.retrain_flow(params_path, run_stamp="run1")
    finally:
        mp.undo()
    return {"task": task, "params_path": params_path, "record": record, "dvc": dvc}


# --------------------------------------------------------------------------- #
# Pure parts
# --------------------------------------------------------------------------- #


def test_decide_needs_a_gain_strictly_above_the_margin():
    from pipeline.retrain.decision import decide
    from pipeline.retrain.settings import MetricSpec

    top1 = MetricSpec("test", ("top1",), True)
    assert decide(top1, 40.0, None, 2.0)[0] is True  # no champion: promote whatever it scores
    assert decide(top1, 52.5, 50.0, 2.0) == (
        True,
        "promoted: test.top1: challenger 52.5000 vs champion vNone 50.0000, gain +2.5000 (higher is better), margin 2",
    )
    assert decide(top1, 52.0, 50.0, 2.0)[0] is False  # exactly the margin is not enough
    assert decide(top1, 50.0, 50.0, 0.0)[0] is False  # a tie keeps the champion
    assert decide(top1, 49.0, 50.0, 0.0)[1].startswith("kept champion:")
    assert decide(top1, math.nan, 50.0, 0.0)[0] is False
    loss = MetricSpec("test", ("loss",), False)  # lower is better: gain = champion - challenger
    assert loss.gain(1.0, 1.5) == 0.5 and decide(loss, 1.0, 1.5, 0.4)[0] is True
    assert decide(loss, 1.2, 1.5, 0.4)[0] is False


def test_metric_defaults_to_the_task_champion_metric_and_settings_are_checked():
    from pipeline.config.validation import SettingsError
    from pipeline.retrain.settings import MetricSpec, RetrainConfig, metric_spec

    params = {"task_settings": {"gigaword": {"champion": "valid.rouge2"}}}
    assert metric_spec(params, RetrainConfig(task="gigaword")) == MetricSpec("valid", ("rouge2",), True)
    with pytest.raises(ValueError, match="retrain.metric is 'test.top1': models are chosen on the validation split"):
        metric_spec(params, RetrainConfig(task="gigaword", metric="test.top1"))  # promotion is a choice too
    assert metric_spec(
        params, RetrainConfig(task="gigaword", metric="valid.groups.x->x.top1", higher_is_better=False)
    ) == MetricSpec("valid", ("groups", "x->x", "top1"), False)
    assert MetricSpec("test", ("groups", "a", "top1"), True).value({"groups": {"a": {"top1": 12}}}) == 12.0
    with pytest.raises(
        SettingsError,
        match="retrain.margin is -1: must be >= 0.0; retrain.frozen_test is 'latest': must be one of 'pin' or 'current'",
    ):
        RetrainConfig.from_dict({"task": "t", "margin": -1, "frozen_test": "latest"})
    with pytest.raises(SettingsError, match=r"retrain.cron_expr is not a setting \(did you mean cron\?\)"):
        RetrainConfig.from_dict({"task": "t", "cron_expr": "* * * * *"})


def test_run_command_reports_stderr_and_kills_on_timeout(tmp_path):
    from pipeline.retrain.commands import CommandError, run_command

    assert run_command([sys.executable, "-c", "print('ok')"], tmp_path, 30) == "ok\n"
    with pytest.raises(CommandError, match=r"exit status 3 in .*\nERROR: no remote") as info:
        run_command(
            [sys.executable, "-c", "import sys; sys.stderr.write('ERROR: no remote\\n\\n'); sys.exit(3)"], tmp_path, 30
        )
    assert info.value.summary.endswith(f"exit status 3 in {tmp_path}: ERROR: no remote")
    with pytest.raises(CommandError, match="timed out after 0.5s"):
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path, 0.5)
    with pytest.raises(CommandError, match="could not start"):
        run_command([str(tmp_path / "no-such-dvc")], tmp_path, 5)


def test_frozen_test_copy_is_reused_verified_and_never_silently_replaced(tmp_path):
    from pipeline.io.shards import read_manifest
    from pipeline.retrain.state import freeze_test

    _generate(tmp_path, "t", seed=1)
    sha = read_manifest(tmp_path / "data/shards/t/test")["content_sha256"]
    first = freeze_test(tmp_path, "t", "test", None)  # no champion: today's split is frozen
    frozen = tmp_path / "data/retrain/t/frozen_test" / sha[:16]
    assert first == {"dir": frozen, "content_sha256": sha, "rows": 32}  # 4 rules x 16 instances x (1 - 0.5)
    _generate(tmp_path, "t", seed=2)  # new data: the test split changes
    assert freeze_test(tmp_path, "t", "test", sha) == first  # the champion's pin: the old copy
    part = first["dir"] / read_manifest(first["dir"])["parts"][0]["file"]
    part.write_bytes(part.read_bytes()[:-1] + b"\0")  # a damaged copy is refused
    with pytest.raises(ValueError, match=r"part-00000.arrow: sha256 .* differs from its manifest"):
        freeze_test(tmp_path, "t", "test", sha)
    shutil.rmtree(first["dir"])  # copy gone and the split changed: an error, not a silent switch
    with pytest.raises(FileNotFoundError, match=f"content_sha256 {sha}.*retrain.frozen_test: current"):
        freeze_test(tmp_path, "t", "test", sha)


def test_one_run_per_task_at_a_time(tmp_path):
    from pipeline.retrain.state import RunInProgress, run_lock

    with run_lock(tmp_path / "t"):
        with pytest.raises(RunInProgress, match="another retrain run holds"):
            with run_lock(tmp_path / "t"):
                pass
    with run_lock(tmp_path / "t"):  # released
        pass


# --------------------------------------------------------------------------- #
# The flow
# --------------------------------------------------------------------------- #


def test_first_run_promotes_and_freezes_the_test_set(project, champion):
    from mlflow import MlflowClient

    from pipeline.io.shards import read_manifest

    task, record = champion["task"], champion["record"]
    # refresh ran dvc pull (with the repro targets' dependencies) and dvc repro of the data stages
    assert champion["dvc"].calls == [["pull", "--with-deps", f"vocab@{task}"], ["repro", f"vocab@{task}"]]
    assert record["decision"] == "promoted" and record["champion"] is None
    assert record["reason"].startswith("no champion yet; challenger valid.top1 = ")
    [v1] = versions(task)
    assert alias_version(task) == str(v1.version) == record["challenger"]["version"]

    # the frozen copy is a byte copy of the split the decision reads (validation), pinned on the champion's version
    test_manifest = read_manifest(project / "data" / "shards" / task / "valid")
    frozen = Path(record["frozen_test"]["dir"])
    assert frozen == project / "data" / "retrain" / task / "frozen_test" / test_manifest["content_sha256"][:16]
    by_name = lambda d: {Path(p).name: h for p, h in tree_hashes(d).items()}  # noqa: E731
    assert by_name(frozen) == by_name(project / "data" / "shards" / task / "valid")
    assert read_manifest(frozen) == test_manifest and record["frozen_test"]["rows"] == test_manifest["rows"]
    tags = MlflowClient().get_model_version(v1.name, v1.version).tags
    assert tags["retrain.frozen_test_sha256"] == test_manifest["content_sha256"]
    assert tags["retrain.reason"] == tags["champion_reason"] == record["reason"] and tags["mechanism"] == MECH
    assert float(tags["metric.valid.top1"]) == record["challenger"]["value"]  # what registry.best_version ranks
    train_sha = read_manifest(project / f"data/shards/{task}/train")["content_sha256"]
    assert tags["retrain.data.train.content_sha256"] == train_sha

    # the recorded score is the real one: recomputed here from the registered model's own artifacts
    from pipeline.retrain import steps

    ckpt, vocab = steps.champion_files(task, steps.current_champion(task), project / "downloaded")
    params = yaml.safe_load(Path(champion["params_path"]).read_text())
    value = independent_top1(ckpt, vocab, project / "data" / "shards" / task / "valid", params)
    assert record["challenger"]["value"] == value
    assert float(tags["retrain.value"]) == value
    assert 0.0 < value <= 100.0  # the tiny model learns the x->0 rules at least
    # the challenger's MLflow run carries the decision
    run = MlflowClient().get_run(record["challenger"]["run_id"])
    assert run.data.tags["retrain.decision"] == "promote" and run.data.metrics["frozen_valid.top1"] == value
    # ... and the data it saw: train/valid for training, the frozen validation copy for the decision
    contexts = {t.value for i in run.inputs.dataset_inputs for t in i.tags if t.key == "mlflow.data.context"}
    assert contexts == {"training", "validation", "evaluation"}
    inputs = {
        (i.dataset.name, {t.key: t.value for t in i.tags}["mlflow.data.context"]): i for i in run.inputs.dataset_inputs
    }
    assert sorted(name for name, _ in inputs) == [f"{task}/frozen_valid", f"{task}/train", f"{task}/valid"]
    assert inputs[(f"{task}/train", "training")].dataset.digest == train_sha[:16]
    frozen_input = inputs[(f"{task}/frozen_valid", "evaluation")]
    assert frozen_input.dataset.digest == test_manifest["content_sha256"][:16]
    assert json.loads(frozen_input.dataset.source)["uri"] == str(frozen.resolve())
    assert {t.key: t.value for t in frozen_input.tags}["mlflow.data.context"] == "evaluation"
    [line] = decisions(project, task)
    assert line == json.loads(json.dumps(record, default=str))


def test_equal_challenger_is_kept_and_a_transient_failure_is_retried(project, champion):
    """Case (c) on real training + evaluation: the same data, seed and settings retrain the same
    model, so challenger == re-evaluated champion, a gain of 0, not above margin 0: kept."""
    import flows.retrain as rt
    from pipeline.retrain import commands

    task = champion["task"]
    before = (alias_version(task), [str(v.version) for v in versions(task)])
    dvc = FakeDvc(repro=1)  # the first dvc repro fails, its retry succeeds
    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_command", dvc)
    try:
        record = rt.retrain_flow(champion["params_path"], run_stamp="run-equal")
    finally:
        mp.undo()
    pull, repro = ["pull", "--with-deps", f"vocab@{task}"], ["repro", f"vocab@{task}"]
    assert dvc.calls == [pull, repro, pull, repro]  # the refresh step failed once and was retried whole
    assert record["decision"] == "kept_champion"
    first = champion["record"]["challenger"]["value"]
    assert record["champion"]["value"] == record["challenger"]["value"] == first  # re-evaluated, same number
    assert record["reason"] == (
        f"kept champion: valid.top1: challenger {first:.4f} vs champion v{before[0]} "
        f"{first:.4f}, gain +0.0000 (higher is better), margin 0"
    )
    assert record["frozen_test"]["content_sha256"] == champion["record"]["frozen_test"]["content_sha256"]
    assert (alias_version(task), [str(v.version) for v in versions(task)]) == before  # nothing registered
    assert decisions(project, task)[-1]["decision"] == "kept_champion"


def test_an_overlapping_run_is_skipped_and_recorded(project, champion):
    """A second run of the task while one holds its lock does nothing but say so, in decisions.jsonl."""
    import flows.retrain as rt
    from pipeline.retrain.state import run_lock

    task = champion["task"]
    state_dir = project / "data" / "retrain" / task
    n_decisions = len(decisions(project, task))
    before = tree_hashes(project / "data", project / "mlruns")
    with run_lock(state_dir):
        record = rt.retrain_flow(champion["params_path"], run_stamp="run-overlap")
    assert record["decision"] == "skipped" and "another retrain run holds" in record["reason"]
    lines = decisions(project, task)
    assert len(lines) == n_decisions + 1 and lines[-1]["run"] == "run-overlap" and lines[-1]["decision"] == "skipped"
    after = tree_hashes(project / "data", project / "mlruns")
    assert sorted(p for p, h in after.items() if before.get(p) != h) == [str(state_dir / "decisions.jsonl")]


@pytest.mark.parametrize("where", ["training", "champion_evaluation", "alias_move"])
def test_a_crash_mid_run_changes_nothing(project, champion, monkeypatch, where):
    """Case (d): the run fails; the alias, the champion's version and tags, and every file that
    existed (data/, the MLflow artifacts) are as before; decisions.jsonl gains one 'failed' line."""
    from mlflow import MlflowClient

    import flows.retrain as rt
    import pipeline.tracking.registry
    import pipeline.training.job
    from pipeline.retrain import commands, steps

    task = champion["task"]
    monkeypatch.setattr(commands, "run_command", FakeDvc())
    attempts = []

    def boom(*args, **kwargs):
        attempts.append(1)
        raise RuntimeError(f"simulated crash in {where}")

    if where == "training":
        monkeypatch.setattr(pipeline.training.job, "train", boom)
    elif where == "champion_evaluation":
        monkeypatch.setattr(steps, "champion_files", boom)
    else:  # promote: a better challenger (injected scores), registered, then the alias move fails
        scores = {"challenger": 90.0}
        monkeypatch.setattr(steps, "score_checkpoint", lambda *a, **k: {"top1": scores.get(a[-1], 10.0)})
        monkeypatch.setattr(pipeline.tracking.registry, "set_champion", boom)

    client = MlflowClient()
    champ = pipeline.tracking.registry.champion(task)
    before_files = tree_hashes(project / "data", project / "mlruns")
    n_decisions = len(decisions(project, task))
    with pytest.raises(RuntimeError, match=f"simulated crash in {where}"):
        rt.retrain_flow(champion["params_path"], run_stamp=f"run-crash-{where}")
    assert len(attempts) == 2  # retries: 1 -> the failing step ran twice

    after = pipeline.tracking.registry.champion(task)
    assert (after.version, after.tags, after.source) == (champ.version, champ.tags, champ.source)
    assert client.get_model_version(champ.name, champ.version).tags == champ.tags
    after_files = tree_hashes(project / "data", project / "mlruns")
    log = str(project / "data" / "retrain" / task / "decisions.jsonl")
    changed = sorted(p for p, h in before_files.items() if after_files.get(p) != h)
    assert changed == [log]
    lines = decisions(project, task)
    assert len(lines) == n_decisions + 1 and lines[-1]["decision"] == "failed"
    assert lines[-1]["error"] == f"RuntimeError: simulated crash in {where}"
    if where == "alias_move":  # a version was registered (and recorded), but it is not the champion
        orphan = lines[-1]["challenger"]["version"]
        assert lines[-1]["challenger"]["value"] == 90.0 and orphan == str(versions(task)[-1].version)
        assert int(orphan) > int(champ.version) and alias_version(task) == str(champ.version)


def test_better_challenger_is_promoted_on_the_frozen_test_set(project, champion, monkeypatch):
    """Case (b), last (it moves the alias): new data arrives (the test split changes too); both
    models are still scored on the frozen copy, and a gain above the margin promotes."""
    from mlflow import MlflowClient

    import flows.retrain as rt
    from pipeline.retrain import commands, steps

    task = champion["task"]
    old = champion["record"]["frozen_test"]
    _generate(project, task, seed=99)  # "dvc repro on the updated raw data"
    from pipeline.io.shards import read_manifest

    assert read_manifest(project / f"data/shards/{task}/test")["content_sha256"] != old["content_sha256"]

    seen = []

    def scores(checkpoint, vocab_dir, mechanism, test_dir, split, eval_settings, desc):
        seen.append((desc, Path(test_dir)))
        return {"top1": 61.25 if desc == "challenger" else 50.0, "n": 1}

    monkeypatch.setattr(steps, "score_checkpoint", scores)
    monkeypatch.setattr(commands, "run_command", FakeDvc(pull=5))  # no remote: not fatal (pull_required false)
    path = setup_task(project, task, margin=10.0)
    prev = alias_version(task)
    record = rt.retrain_flow(path, run_stamp="run-better")

    assert [d for d, _ in seen] == ["challenger", f"champion v{prev}"]
    assert {t for _, t in seen} == {Path(old["dir"])}  # both on the frozen copy, not today's split
    assert record["refresh"]["pull"] == (
        "failed, continuing (pull_required: false): `dvc pull` failed with exit status 1: ERROR: transient"
    )
    assert record["decision"] == "promoted" and record["frozen_test"]["content_sha256"] == old["content_sha256"]
    new = alias_version(task)
    assert new == record["challenger"]["version"] and int(new) > int(prev)
    reason = (
        f"promoted: valid.top1: challenger 61.2500 vs champion v{prev} 50.0000, gain +11.2500 "
        f"(higher is better), margin 10"
    )
    assert record["reason"] == reason
    tags = MlflowClient().get_model_version(versions(task)[0].name, new).tags
    assert tags["retrain.reason"] == reason and tags["retrain.previous_champion"] == prev
    assert tags["retrain.frozen_test_sha256"] == old["content_sha256"]  # the pin carries over
    train_sha = read_manifest(project / f"data/shards/{task}/train")["content_sha256"]
    assert tags["retrain.data.train.content_sha256"] == train_sha
    assert decisions(project, task)[-1]["decision"] == "promoted"
