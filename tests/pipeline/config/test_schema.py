"""The settings schema (pipeline/config/schema.py): params.yaml's defaults are the schema's, every bad
setting is one line naming it, and the stages refuse a bad file before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from pipeline.config.params import REPO_ROOT, load_params
from pipeline.config.schema import (
    SCHEMA_FILE,
    CompareSettings,
    DataSettings,
    EvalSettings,
    ModelSettings,
    ParallelSettings,
    RetrainSettings,
    ServingSettings,
    TrackingSettings,
    TrainSettings,
    VocabSettings,
    build,
    check_params,
    json_schema,
)
from pipeline.config.tasks import deep_merge
from pipeline.config.validation import SettingsError

SECTIONS = {
    "train": TrainSettings,
    "evaluate": EvalSettings,
    "vocab": VocabSettings,
    "compare": CompareSettings,
    "serving": ServingSettings,
    "tracking": TrackingSettings,
    "retrain": RetrainSettings,
    "parallel": ParallelSettings,
    "data": DataSettings,
    "model": ModelSettings,
}


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_every_key_of_params_yaml_is_in_the_schema_with_the_same_default(name):
    """The shipped params.yaml sets each key to the schema's default: one set of defaults."""
    cls, section = SECTIONS[name], load_params()[name]
    known = {f.name for f in fields(cls)}
    shared = {k: v for k, v in section.items() if not isinstance(v, dict)}  # model.<mechanism>: its options class
    assert set(shared) <= known, sorted(set(shared) - known)
    assert build(cls, section, name) == cls(), f"params.yaml's {name} differs from the schema's defaults"


def test_the_runtime_settings_classes_take_the_schema_s_defaults():
    from pipeline.decoding.settings import EvalConfig
    from pipeline.training.settings import TrainConfig

    params = load_params()
    assert TrainConfig.from_dict(params["train"]) == TrainConfig()
    assert EvalConfig.from_dict(params["evaluate"]) == EvalConfig()
    assert TrainConfig().batch_size == params["train"]["batch_size"] and TrainConfig().deterministic is True


def test_the_shipped_params_yaml_passes():
    check_params(load_params())


def test_the_json_schema_beside_params_yaml_is_current():
    """params.schema.json is what `python -m pipeline.config.schema --write` writes from the classes."""
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json.loads(json.dumps(json_schema()))
    assert (
        (REPO_ROOT / "params.yaml")
        .read_text(encoding="utf-8")
        .startswith("# yaml-language-server: $schema=params.schema.json")
    )


# (an edit of params.yaml, the one line it must give); the first rows are the cases that ended in
# a traceback, an exit 1 or a deleted model before the schema
CASES = [
    ("train: {epochs: -1}", "params.yaml: train.epochs is -1: must be >= 1"),
    ("train: {epochs: 0}", "params.yaml: train.epochs is 0: must be >= 1"),
    ("train: {bacth_size: 32}", "params.yaml: train.bacth_size is not a setting (did you mean batch_size?)"),
    ("train: {lr: fast}", "params.yaml: train.lr is 'fast': must be a number"),
    ("train: {nproc: 0}", "params.yaml: train.nproc is 0: must be >= 1"),
    ("train: {nproc: -1}", "params.yaml: train.nproc is -1: must be >= 1"),
    ("train: {nnodes: 0}", "params.yaml: train.nnodes is 0: must be >= 1"),
    ("train: {nnodes: 2}", "train.nnodes is 2 but train.rdzv_endpoint is not set"),
    # 20 more of our own, on the same surfaces
    ("train: {lr: 1e-3}", "train.lr is '1e-3': must be a number (YAML reads 1e-3 as text: write 1.0e-3)"),
    ("train: {lr: 0}", "train.lr is 0: must be > 0"),
    ("train: {epochs: 2.5}", "train.epochs is 2.5: must be an integer"),
    ("train: {deterministic: 'yes'}", "train.deterministic is 'yes': must be true or false"),
    ("train: {device: gpu}", "train.device is 'gpu': must be auto, cpu, cuda or cuda:N"),
    ("train: {optimizer: adagrad}", "train.optimizer is 'adagrad': must be one of 'adam' or 'sgd'"),
    ("train: {select_by: accuracy}", "train.select_by is 'accuracy': must be one of 'auto', 'loss' or 'metric'"),
    ("train: {seeds: 0}", "train.seeds is 0: must be >= 1"),
    ("train: {compile: true, cuda_graphs: true}", "train.compile and train.cuda_graphs both replace the recurrence"),
    ("train: {batch_size: true}", "train.batch_size is True: must be an integer"),
    ("train: {rdzv_timeout: 0}", "train.rdzv_timeout is 0: must be >= 1"),
    ("evaluate: {beam_size: 0}", "evaluate.beam_size is 0: must be >= 1"),
    ("evaluate: {min_len: 60}", "evaluate.min_len (60) must be at most evaluate.max_len (50)"),
    ("evaluate: {device: 'cuda:x'}", "evaluate.device is 'cuda:x': must be auto, cpu, cuda or cuda:N"),
    ("evaluate: {heatmap: {splt: test}}", "evaluate.heatmap.splt is not a setting (did you mean split?)"),
    ("serving: {max_inputs: 0}", "serving.max_inputs is 0: must be >= 1"),
    ("serving: {unknown_warning: 2}", "serving.unknown_warning is 2: must be <= 1"),
    ("parallel: {task_runner: ray}", "parallel.task_runner is 'ray': must be one of 'local' or 'dask'"),
    ("parallel: {workers: -2}", "parallel.workers is -2: must be >= 0"),
    ("retrain: {margin: -1}", "retrain.margin is -1: must be >= 0"),
    ("tracking: {registry_prefix: 3}", "tracking.registry_prefix is 3: must be a string"),
    ("vocab: {min_count: 0}", "vocab.min_count is 0: must be >= 1"),
    ("model: {hiden: 256}", "model.hiden is 256: not a shared size (did you mean hidden?)"),
    ("model: {dropout: 1.0}", "model.dropout is 1.0: must be < 1"),
    ("traing: {epochs: 3}", "traing is not a setting (did you mean train?)"),
    (
        "task_settings: {copy_rules: {mechanisms: {copynet: {train: {epochs: 0}}}}}",
        "task_settings.copy_rules.mechanisms.copynet.train.epochs is 0: must be >= 1",
    ),
    (
        "task_settings: {copy_rules: {presets: {cpu: {train: {lr: fast}}}}}",
        "task_settings.copy_rules.presets.cpu.train.lr is 'fast': must be a number",
    ),
    (
        "variants: {copynet_transformer: {trian: {epochs: 3}}}",
        "variants.copynet_transformer.trian is not a setting (did you mean train?)",
    ),
    ("task_settings: {copy_rules: {champion: test.top1}}", "models are chosen on the validation split only"),
    (
        "task_settings: {copy_rules: {evaluate: {min_len: 40, max_len: 20}}}",
        "evaluate.min_len (40) must be at most evaluate.max_len (20)",
    ),
]


@pytest.mark.parametrize(("edit", "message"), CASES, ids=[edit for edit, _ in CASES])
def test_a_bad_setting_is_one_line_naming_it(edit, message):
    params = deep_merge(load_params(), yaml.safe_load(edit))
    with pytest.raises(SettingsError) as info:
        check_params(params, "params.yaml")
    text = str(info.value)
    assert message in text and "\n" not in text, text


def _stage(tmp_path: Path, edit: str, *argv: str) -> subprocess.CompletedProcess:
    params = deep_merge(load_params(), yaml.safe_load(edit))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", *argv, "--params", str(tmp_path / "params.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_a_stage_refuses_a_bad_file_before_any_work_and_keeps_the_trained_model(tmp_path):
    """`train.epochs: -1` used to train 0 steps, fail and delete model.pt; `train.bacth_size` came
    as a Prefect traceback: now one line, exit 2, before the flow starts, and nothing touched."""
    model = tmp_path / "data" / "checkpoints" / "copy_rules" / "encdec" / "model.pt"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"a trained model")
    for edit, message in [
        ("train: {epochs: -1}", "train.epochs is -1: must be >= 1"),
        ("train: {bacth_size: 32}", "train.bacth_size is not a setting (did you mean batch_size?)"),
    ]:
        done = _stage(tmp_path, edit, "flows.train", "--task", "copy_rules", "--mechanism", "encdec")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert lines[-1].startswith("error: params.yaml: ") and message in lines[-1], done.stderr
        assert "Traceback" not in done.stderr
    assert model.read_bytes() == b"a trained model"
    assert sorted(p.name for p in (tmp_path / "data").rglob("*") if p.is_file()) == ["model.pt"]


def test_the_schema_command_checks_a_file(tmp_path):
    done = _stage(tmp_path, "evaluate: {beam_size: 0}", "pipeline.config.schema")
    assert done.returncode == 2 and done.stderr.strip() == "error: params.yaml: evaluate.beam_size is 0: must be >= 1"
    good = _stage(tmp_path, "{}", "pipeline.config.schema")
    assert good.returncode == 0 and "params: ok" in good.stdout
