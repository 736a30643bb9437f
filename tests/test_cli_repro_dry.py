"""`copyseq repro --dry` with DVC's real dry run, on a tiny project (tests/test_cli_refusals.py's
write_rows_project: no git, `echo`-sized stages) with a row whose train stage has never run: DVC's
own dry run fails there, copyseq's lists what would run. Nothing runs, nothing is written."""

from __future__ import annotations

import re
import subprocess
import sys

import pipeline.cli as cli
from pipeline.cli import main
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
