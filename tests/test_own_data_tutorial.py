"""docs/own_data.md's commands, run: a generated TSV corpus made a task with `tasks add`, `dvc repro`
training, evaluating and comparing mechanisms on it (tiny sizes), and `predict` answering a raw
question with a trained checkpoint, in a temporary copy of the repository. Each command's output
goes to ``transcript.md`` in that copy (the page's printed outputs come from such a run, with all
seven mechanisms: 5 minutes on a busy 2-core machine; the test trains three, one per kind -- a
baseline, CopyNet, the pointer-generator -- to stay near 2; tests/test_e2e_dvc.py runs every
mechanism through the same stages)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from models.registry import DISPLAY_NAMES
from tests.helpers import REPO, repository_copy, tiny_params

pytestmark = pytest.mark.slow

TASK = "support_replies"
ADD = [sys.executable, "-m", "pipeline.cli", "tasks", "add", TASK,
       "--train", "data/raw/support/train.tsv", "--valid", "data/raw/support/valid.tsv",
       "--test", "data/raw/support/test.tsv", "--src-col", "question", "--tgt-col", "answer",
       "--tokenizer", "moses", "--metric", "rouge_f"]  # fmt: skip
MECHANISMS = ["rnnsearch", "copynet", "pointer_generator"]
QUESTION = "Hello, my name is Zorvik Tanelli and my order 31337 has not arrived yet."


def run(cmd: list[str], cwd: Path, env: dict, transcript: Path, stdin: str | None = None, timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)
    shown = " ".join("python" if c == sys.executable else c for c in cmd)
    with open(transcript, "a", encoding="utf-8") as fh:
        fh.write(f"$ {shown}\n{proc.stdout}{proc.stderr}\n")
    assert proc.returncode == 0, f"{shown} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> tuple[Path, dict]:
    """The repository's tracked files (not data/ or tests/) in a git repository of its own, with the
    tiny params (tests.helpers.tiny_params), and an environment whose MLflow and Prefect live there."""
    dst = tmp_path_factory.mktemp("own_data") / "repo"
    return dst, repository_copy(dst, tiny_params())


def test_own_data_tutorial(repo_copy):
    repo, env = repo_copy
    transcript = repo / "transcript.md"
    run(
        [sys.executable, "-m", "benchmarks.support_qa", "--out", "data/raw/support", "--pairs", "250"],
        repo,
        env,
        transcript,
    )
    out = run(ADD, repo, env, transcript)
    assert f"added task {TASK} to params.yaml: raw input data/raw/support" in out
    listed = run([sys.executable, "-m", "pipeline.cli", "tasks", "list"], repo, env, transcript)
    assert re.search(rf"^\* {TASK} +ready$", listed, re.M), listed

    # Tiny settings for the test (the tutorial keeps the cpu preset): only this task, 2 short epochs.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert params["prepare"][TASK]["reader"] == "parallel"
    params["tasks"] = {TASK: params["tasks"][TASK]}
    params["mechanisms"] = MECHANISMS
    params["task_settings"][TASK]["evaluate"].update(max_len=20, max_examples=10)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "add", "-A"], repo, env, transcript)
    run(["git", "commit", "-qm", "own data"], repo, env, transcript)

    run(["scripts/with_prefect_server.sh", "dvc", "repro"], repo, env, transcript)
    mechs = MECHANISMS
    manifests = {
        s: json.loads((repo / f"data/shards/{TASK}/{s}/manifest.json").read_text()) for s in ("train", "valid", "test")
    }
    assert {s: m["rows"] for s, m in manifests.items()} == {"train": 200, "valid": 25, "test": 25}
    for mech in mechs:
        metrics = json.loads((repo / f"data/eval/runs/{TASK}/{mech}/metrics.json").read_text())
        assert metrics["test"]["n"] == 10 and 0 <= metrics["test"]["rouge2"] <= 100, mech
    table = (repo / f"data/eval/comparison/{TASK}.md").read_text()
    assert all(f"| {DISPLAY_NAMES[m]} (ours) |" in table for m in mechs)
    assert f"models:/{TASK}@champion" in table
    run([sys.executable, "-c", f"print(open('data/eval/comparison/{TASK}.md').read())"], repo, env, transcript)

    predict = [sys.executable, "-m", "pipeline.serving.predict", "--checkpoint", f"data/checkpoints/{TASK}/copynet",
               "--task", TASK, "--show-copies"]  # fmt: skip
    answer = run(predict, repo, env, transcript, stdin=QUESTION + "\n", timeout=300)
    lines = [line for line in answer.splitlines() if not line.startswith("copyseq predict: warning")]
    assert len(lines) == 1, answer


def test_tutorial_commands_are_the_pages():
    """The page shows the commands the test above runs."""
    page = (REPO / "docs" / "own_data.md").read_text()
    assert "python -m benchmarks.support_qa --out data/raw/support --pairs 3000" in page
    assert " ".join(["copyseq", *ADD[3:]]) in page.replace(" \\\n    ", " ")
    assert f"copyseq predict --checkpoint data/checkpoints/{TASK}/copynet --task {TASK}" in page
