"""The `copyseq` command (pipeline/cli.py): its subcommands, their help, and `run` of one task alone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pipeline.cli import app, run_targets
from pipeline.config.params import load_params
from pipeline.config.tasks import deep_merge

COMMANDS = ["tasks", "check", "run", "repro", "predict", "serve", "eval-options", "render-results", "retrain"]


def test_the_help_lists_every_subcommand():
    out = CliRunner().invoke(app, ["--help"])
    assert out.exit_code == 0
    assert all(name in out.output for name in COMMANDS)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["tasks", "--help"], "list,enable,add"),
        (["check", "--help"], "--write"),
        (["predict", "--help"], "--model"),
        (["eval-options", "--help"], "--settings"),
        (["run", "--help"], "--mechanism"),
        (["serve", "--help"], "--port"),
    ],
)
def test_each_subcommand_has_its_help(argv, says):
    """The subcommands that hand their arguments to a module show that module's own help."""
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert says in proc.stdout


def test_run_targets_one_task_s_rows_and_nothing_else():
    params = load_params()
    assert run_targets(params, "copy_rules", ["copynet", "encdec"]) == [
        "evaluate@copy_rules-copynet",
        "evaluate@copy_rules-encdec",
    ]
    assert run_targets(params, "copy_rules", []) == [f"evaluate@copy_rules-{m}" for m in params["mechanisms"]]
    with pytest.raises(typer.BadParameter, match="'gigaword' is not under `tasks`"):
        run_targets(params, "gigaword", [])
    with pytest.raises(typer.BadParameter, match="copynett not under `mechanisms`"):
        run_targets(params, "copy_rules", ["copynett"])


def test_run_of_an_unknown_task_is_refused_with_exit_2():
    out = CliRunner().invoke(app, ["run", "nope"])
    assert out.exit_code == 2 and "'nope' is not under `tasks`" in out.output


def test_check_names_a_bad_setting_with_exit_2(tmp_path):
    params = deep_merge(load_params(), {"train": {"epochs": 0}})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "check", "--params", str(tmp_path / "params.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == "error: params.yaml: train.epochs is 0: must be >= 1"


def test_export_hands_its_arguments_to_the_export_module(tmp_path):
    """`copyseq export` shows the export module's help, and refuses a directory that holds no model with
    one line and exit code 2 (the module's own refusal)."""
    out = CliRunner().invoke(app, ["--help"])
    assert "export" in out.output
    help_ = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "export", "--help"], capture_output=True, text=True, timeout=300
    )
    assert help_.returncode == 0 and "--out" in help_.stdout and "--format" in help_.stdout and "--log" in help_.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "export", str(tmp_path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"copyseq export: error: {tmp_path}: neither a checkpoint directory (model.pt) nor a logged model "
        "(artifacts/serving.json)"
    )
