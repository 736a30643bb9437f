"""`copyseq tasks add` then `copyseq run`: one's own task runs alone, in a temporary copy of the
repository: a dry run before prepare, then its stages only, nothing of the default task touched."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, repository_copy, tiny_params

pytestmark = pytest.mark.slow

TASK = "qa"
# the default task's git-tracked outputs, which a run of another task must leave as they are
TRACKED = ["data/eval/intervals/copy_rules.json", "data/plots/comparison/copy_rules.csv"]


def copyseq(repo: Path, env: dict, *argv: str, timeout: int = 900) -> str:
    """`copyseq ...` in the copy (its own pipeline.cli: `python -m` runs the copy's code)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *argv],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"copyseq {' '.join(argv)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_a_task_added_runs_alone(tmp_path):
    repo = tmp_path / "repo"
    env = repository_copy(repo, tiny_params())
    for rel in TRACKED:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, repo / rel)
    rows = [f"a {w} b\tb {w}" for w in (f"w{i}" for i in range(80))]  # copy the middle word
    (repo / "data" / "raw" / TASK).mkdir(parents=True)
    (repo / "data" / "raw" / TASK / "train.tsv").write_text("src\ttgt\n" + "\n".join(rows[:60]) + "\n")
    (repo / "data" / "raw" / TASK / "valid.tsv").write_text("src\ttgt\n" + "\n".join(rows[60:70]) + "\n")
    (repo / "data" / "raw" / TASK / "test.tsv").write_text("src\ttgt\n" + "\n".join(rows[70:]) + "\n")
    for cmd in (["git", "add", "-A"], ["git", "commit", "-qm", "tracked outputs and raw data"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)

    out = copyseq(
        repo, env, "tasks", "add", TASK, "--train", f"data/raw/{TASK}/train.tsv", "--valid",
        f"data/raw/{TASK}/valid.tsv", "--test", f"data/raw/{TASK}/test.tsv", "--metric", "exact_match",
        "--mechanisms", "encdec",
    )  # fmt: skip
    command = re.search(r"^next: (copyseq run .*?)   ", out, re.M)
    assert command and command.group(1) == f"copyseq run {TASK} -m encdec", out

    dry = copyseq(repo, env, "run", TASK, "-m", "encdec", "--dry")  # before prepare has run
    expected = ["settings", f"prepare@{TASK}", f"vocab@{TASK}", f"train@{TASK}-encdec", f"evaluate@{TASK}-encdec"]
    assert re.findall(r"Running stage '([^']+)'", dry) == expected
    assert not (repo / "data" / "shards" / TASK).exists()  # nothing ran
    whole = copyseq(repo, env, "repro", "--dry")  # the whole pipeline's, before any prepare: DVC's status
    assert f"prepare has not run for copy_rules, {TASK} yet" in whole
    assert f"prepare@{TASK}:" in whole and f"evaluate@{TASK}-encdec:" in whole and "compare:" in whole
    assert not [d for d in (repo / "data").glob("shards/*") if d.is_dir()]  # nothing prepared

    ran = copyseq(repo, env, "run", TASK, "-m", "encdec")
    assert sorted(re.findall(r"Running stage '([^']+)'", ran)) == sorted(expected)  # DVC's order
    again = copyseq(repo, env, "run", TASK, "-m", "encdec", "--dry")  # after it: DVC's own dry run
    assert re.findall(r"Running stage '([^']+)'", again) == []
    metrics = json.loads((repo / f"data/eval/runs/{TASK}/encdec/metrics.json").read_text())
    assert metrics["test"]["n"] == 10
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    before = yaml.safe_load((REPO / "dvc.lock").read_text())["stages"]  # the copy's, as committed
    assert set(lock) - set(before) - {"settings"} == set(expected) - {"settings"}  # the new task's, added
    others = [name for name in before if name != "settings"]  # every other task's and the comparison's
    assert {name: lock[name] for name in others} == {name: before[name] for name in others}
    assert not (repo / "data" / "checkpoints" / "copy_rules").exists()
    for rel in TRACKED:
        assert (repo / rel).read_bytes() == (REPO / rel).read_bytes(), rel
