"""`copyseq repro --dry` with DVC's real dry run, on a tiny project (tests/test_cli_refusals.py's
write_rows_project: no git, `echo`-sized stages) with a row whose train stage has never run: DVC's
own dry run fails there, copyseq's lists what would run. Nothing runs, nothing is written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import pipeline.cli as cli
from pipeline.cli import main
from pipeline.config.params import load_params
from tests.helpers import tiny_params
from tests.test_cli_refusals import files_under, outside_dvc, write_rows_project


def test_repro_dry_lists_the_stages_of_a_row_that_has_not_run(tmp_path, monkeypatch, capfd):
    write_rows_project(tmp_path)
    before = outside_dvc(files_under(tmp_path))
    dvc = subprocess.run([sys.executable, "-m", "dvc", "repro", "--dry"], cwd=tmp_path, capture_output=True, text=True)
    assert dvc.returncode == 255, dvc.stdout + dvc.stderr  # what copyseq works around
    assert "failed to reproduce 'evaluate@new': [Errno 2] No such file or directory" in dvc.stderr

    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cli, "load_params", lambda path=None: {"tasks": {}})
    assert main(["repro", "--dry"]) == 0
    out, err = capfd.readouterr()
    stages = re.findall(r"Running stage '([^']+)'", out)
    assert sorted(stages[:3]) == ["evaluate@ran", "train@new", "train@ran"]  # DVC's dry run (nothing locked)
    assert stages[3:] == ["evaluate@new", "compare"]  # copyseq's, after it
    assert "not made here yet, so DVC cannot preview the stages that read them: ckpt/new" in out
    assert "ERROR" not in out + err
    assert outside_dvc(files_under(tmp_path)) == before


# --- a params.yaml edit: the settings stage rewrites the files the stages depend on -----------------

SETTINGS_DVC_YAML = """\
stages:
  settings:
    cmd: python -m pipeline.config.rows --params params.yaml
    params: [mechanisms, variants, vocab, model, train, task_settings]
    outs:
      - data/settings:
          cache: false
  vocab:
    cmd: python record_rows.py
    deps:
      - data/settings/copy_rules/vocab.json
    outs:
      - data/vocab/copy_rules
  train:
    foreach: ${mechanisms}
    do:
      cmd: mkdir -p ckpt/${item} && cp data/settings/copy_rules/${item}.json ckpt/${item}/
      deps:
        - data/vocab/copy_rules/rows/${item}.json
        - data/settings/copy_rules/${item}.json
      outs:
        - ckpt/${item}
  compare:
    cmd: ls ckpt > table
    deps:
      - ckpt
    outs:
      - table
"""

# What the vocab stage's records are to the stages (pipeline/stages/vocab.py: record_rows): one per row,
# the same bytes for every row on the word vocabulary, and another for a row on a backbone.
RECORD_ROWS = """\
import json, pathlib
settings = json.loads(pathlib.Path("data/settings/copy_rules/vocab.json").read_text())
rows = pathlib.Path("data/vocab/copy_rules/rows")
rows.mkdir(parents=True, exist_ok=True)
for row, backbone in settings["backbones"].items():
    (rows / f"{row}.json").write_text(json.dumps([settings["vocab"], backbone]))
"""


@pytest.fixture
def settings_project(tmp_path, monkeypatch) -> Path:
    """A DVC project (no git) shaped as the pipeline around its settings stage: the real settings stage
    on the tiny params (rows encdec, copynet, pointer_generator_bart), a vocab stage writing one record
    per row, a train stage per row and compare; run once, so every stage is up to date."""
    params = tiny_params()
    params["mechanisms"] = ["encdec", "copynet", "pointer_generator_bart"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    (tmp_path / "dvc.yaml").write_text(SETTINGS_DVC_YAML.replace("${mechanisms}", json.dumps(params["mechanisms"])))
    (tmp_path / "record_rows.py").write_text(RECORD_ROWS)
    (tmp_path / "data/shards/copy_rules").mkdir(parents=True)  # prepared, as far as copyseq looks
    dvc_repro_in(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cli, "load_params", lambda path=None: load_params(tmp_path / "params.yaml"))
    return tmp_path


def dvc_repro_in(project: Path) -> list[str]:
    """`dvc repro` in ``project`` with this environment's python first on PATH; the stages it ran."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=project, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return re.findall(r"Running stage '([^']+)'", ran.stdout)


def edit_params(project: Path, edit) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    edit(params)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def previewed(out: str) -> list[str]:
    """The stages copyseq names as would run (those after its own header)."""
    return re.findall(r"Running stage '([^']+)'", out.split("these stages would run")[-1])


@pytest.mark.parametrize(
    ("edit", "rows", "vocab_runs"),
    [
        (lambda p: p["train"].update(epochs=1), ["encdec", "copynet", "pointer_generator_bart"], False),
        (lambda p: p["task_settings"]["copy_rules"].setdefault("mechanisms", {}).update(copynet={"train": {"epochs": 1}}),
         ["copynet"], False),
        (lambda p: p["variants"]["pointer_generator_bart"]["model"].update(backbone="data/backbones/other"),
         ["pointer_generator_bart"], True),
        (lambda p: p["vocab"].update(min_count=2), ["encdec", "copynet", "pointer_generator_bart"], True),
    ],
    ids=["a shared section", "one row's entry", "one row's backbone", "the vocab section"],
)  # fmt: skip
def test_repro_dry_lists_the_stages_a_params_edit_reruns(settings_project, capfd, edit, rows, vocab_runs):
    """DVC's dry run does not run the settings stage, so every stage looks up to date after any edit of
    params.yaml; copyseq names the settings files that would change and the stages that read them, and
    the real `dvc repro` runs exactly those (after the settings stage)."""
    edit_params(settings_project, edit)
    before = outside_dvc(files_under(settings_project))
    assert main(["repro", "--dry"]) == 0
    out = capfd.readouterr().out
    expected = [*(["vocab"] if vocab_runs else []), *(f"train@{row}" for row in rows), "compare"]
    assert previewed(out) == expected, out
    assert "changed in params.yaml" in out and "a dry run writes nothing" in out
    assert outside_dvc(files_under(settings_project)) == before

    assert dvc_repro_in(settings_project) == ["settings", *expected]


def test_a_row_added_on_a_backbone_previews_the_vocab_stage_and_that_row_alone(settings_project, capfd):
    edit_params(settings_project, lambda p: p["mechanisms"].append("copynet_t5"))
    (settings_project / "dvc.yaml").write_text(
        SETTINGS_DVC_YAML.replace("${mechanisms}", '["encdec", "copynet", "pointer_generator_bart", "copynet_t5"]')
    )
    assert main(["repro", "--dry"]) == 0
    assert previewed(capfd.readouterr().out) == ["vocab", "train@copynet_t5", "compare"]
    assert dvc_repro_in(settings_project) == ["settings", "vocab", "train@copynet_t5", "compare"]


def test_a_single_stage_dry_run_without_the_settings_stage_previews_no_settings_change(settings_project, capfd):
    """`-s train@encdec` does not run the settings stage, so an edit of params.yaml changes nothing it runs."""
    edit_params(settings_project, lambda p: p["train"].update(epochs=1))
    assert main(["repro", "--dry", "-s", "train@encdec"]) == 0
    out = capfd.readouterr().out
    assert "these stages would run" not in out and "didn't change" in out
