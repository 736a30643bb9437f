"""A device setting this machine cannot give is refused before any work, in one line naming the
setting (``train.device``, ``evaluate.device``, predict's ``--device``): a malformed name, CUDA on a
machine without it, an index past the last GPU, more training processes than GPUs. Before, torch
failed deep inside (``AssertionError: Torch not compiled with CUDA enabled``), or a good model.pt was
blamed as "not a checkpoint". CUDA's presence is faked both ways, so these run on any machine."""

from __future__ import annotations

import sys

import pytest
import torch
import yaml

from pipeline.config.validation import SettingsError
from pipeline.runtime.device import check_device, resolve_device
from pipeline.stages import evaluate, train
from tests.helpers import tiny_params


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "CUDA", "cuda:", "cuda:-1", "", " cpu", None, 0])
def test_a_malformed_device_name_is_refused_naming_the_setting(name, no_cuda):
    with pytest.raises(SettingsError) as err:
        check_device(name, "train.device")
    assert str(err.value) == (
        f"train.device is {name!r}: it must be auto, cpu, cuda or cuda:N (N: a CUDA device's index)"
    )


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_cuda_device_is_refused(name, no_cuda):
    with pytest.raises(SettingsError) as err:
        check_device(name, "evaluate.device")
    assert str(err.value) == (
        f"evaluate.device is {name!r} but this machine has no CUDA device (torch.cuda.is_available() is false); "
        "use auto or cpu"
    )
    with pytest.raises(SettingsError, match="^evaluate.device is"):  # resolve_device checks too
        resolve_device(name, setting="evaluate.device")


def test_auto_and_cpu_work_anywhere(no_cuda):
    for name in ("auto", "cpu"):
        check_device(name, "train.device", nproc=4)
        assert resolve_device(name) == torch.device("cpu")


def test_an_index_past_the_last_gpu_and_more_processes_than_gpus_are_refused(two_gpus):
    check_device("cuda:1", "train.device")
    check_device("cuda", "train.device", nproc=2)
    with pytest.raises(SettingsError, match=r"^train.device is 'cuda:2' but this machine has 2 CUDA device\(s\)"):
        check_device("cuda:2", "train.device")
    for name in ("cuda", "auto"):  # process i of a torchrun job takes cuda:i
        with pytest.raises(SettingsError, match=rf"^train.device is '{name}' with train.nproc 3 processes"):
            check_device(name, "train.device", nproc=3)


def _project(tmp_path, **sections) -> str:
    """A params.yaml and nothing else: a stage that read any data would fail on a missing file."""
    params = tiny_params()
    for name, values in sections.items():
        params[name].update(values)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return str(tmp_path / "params.yaml")


def test_the_train_and_evaluate_stages_refuse_a_missing_gpu_before_reading_data(tmp_path, no_cuda):
    params = _project(tmp_path, train={"device": "cuda:3"}, evaluate={"device": "cuda"})
    with pytest.raises(SettingsError, match=r"^train.device is 'cuda:3' but this machine has no CUDA device"):
        train.run("copy_rules", "copynet", params)
    with pytest.raises(SettingsError, match=r"^evaluate.device is 'cuda' but this machine has no CUDA device"):
        evaluate.run("copy_rules", "copynet", params)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing read, nothing written


def test_the_stage_command_prints_one_line_and_exits_2(tmp_path, no_cuda, monkeypatch, capfd):
    """flows.cli, the stages' command line, around the stage itself (no Prefect server needed)."""
    import flows

    params = _project(tmp_path, train={"device": "cuda"})
    monkeypatch.setattr(sys, "argv", ["train", "--task", "copy_rules", "--mechanism", "copynet", "--params", params])
    with pytest.raises(SystemExit) as exit_:
        flows.cli(train.run, None, "task", "mechanism")
    assert exit_.value.code == 2
    assert capfd.readouterr().err == (
        "error: train.device is 'cuda' but this machine has no CUDA device (torch.cuda.is_available() is false); "
        "use auto or cpu\n"
    )


def test_predict_refuses_its_device_before_reading_input(tmp_path, no_cuda, capsys):
    from pipeline.serving.predict import main

    # no model.pt and no input file: either would be reported if the device were not checked first
    code = main(["--checkpoint", str(tmp_path), "--device", "cuda", "--input", str(tmp_path / "absent.txt")])
    assert code == 2
    assert capsys.readouterr().err == (
        "copyseq predict: error: --device is 'cuda' but this machine has no CUDA device "
        "(torch.cuda.is_available() is false); use auto or cpu\n"
    )
