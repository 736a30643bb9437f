"""``python -m pipeline.data.tasks add``: your own corpus as a task in one command -- the entries it
writes, params.yaml's comments and layout kept, the task ``ready`` and prepared, and the refusals."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.data import tasks
from pipeline.data.add_task import METRICS
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import serial_map
from pipeline.metrics.registry import TEXT_METRICS
from tests.helpers import FIXTURES, REPO

FIX = FIXTURES / "parallel"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project with the repository's params.yaml and the fixture TSVs in data/raw/support/."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = tmp_path / "data" / "raw" / "support"
    raw.mkdir(parents=True)
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, raw / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def add(*argv: str) -> int:
    return tasks.main(["--params", "params.yaml", "add", *argv])


SUPPORT = ["support_replies", "--train", "data/raw/support/train.tsv", "--valid", "data/raw/support/valid.tsv",
           "--test", "data/raw/support/test.tsv", "--src-col", "question", "--tgt-col", "answer",
           "--tokenizer", "moses", "--metric", "rouge_f"]  # fmt: skip


def test_metrics_table_names_every_metric():
    assert set(METRICS) == {*TEXT_METRICS, "exact_match"}


def test_add_writes_the_three_entries_and_keeps_every_comment(project, capsys):
    before = (project / "params.yaml").read_text()
    assert add(*SUPPORT) == 0
    after = (project / "params.yaml").read_text()
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [d for d in diff if d.startswith("- ")]  # nothing removed or changed: comments and layout kept
    added = [d[2:] for d in diff if d.startswith("+ ")]
    assert added[0] == "  support_replies: data/raw/support"
    assert len(added) == 1 + 13 + 6  # the tasks line; prepare: blank, name, 11 settings; task_settings: blank, 5
    assert sum(line.lstrip().startswith("#") for line in after.splitlines()) == sum(
        line.lstrip().startswith("#") for line in before.splitlines()
    )
    params = yaml.safe_load(after)
    assert list(params["tasks"]) == ["copy_rules", "support_replies"]
    assert params["prepare"]["support_replies"] == {
        "reader": "parallel",
        "format": "tsv",
        "train_file": "train.tsv",
        "valid_file": "valid.tsv",
        "test_file": "test.tsv",
        "src_col": "question",
        "tgt_col": "answer",
        "tokenizer": "moses",
        "lang": "en",
        "lowercase": False,
        "mask_digits": False,
    }
    assert params["task_settings"]["support_replies"] == {
        "raw": "data/raw/support",
        "champion": "test.rouge2",
        "evaluate": {"metric": "rouge_f"},
        "compare": {"columns": ["rouge1", "rouge2", "rougeL"]},
    }
    # the rest of the file reads as before
    old = yaml.safe_load(before)
    for key in ("prepare", "task_settings", "tasks"):
        params[key].pop("support_replies")
    assert params == old
    out = capsys.readouterr().out
    assert "added task support_replies to params.yaml: raw input data/raw/support" in out
    assert "next: dvc repro prepare@support_replies" in out

    assert tasks.main(["--params", "params.yaml", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["*", "support_replies", "ready"] for line in listed), listed

    manifests = write_job(prepare_job("support_replies", str(project / "params.yaml")), serial_map)
    assert {s: m["rows"] for s, m in manifests.items()} == {"train": 3, "valid": 1, "test": 2}
    assert manifests["train"]["params"]["tokenizer"].startswith("moses (sacremoses 0.2.0)")


def test_one_file_with_fractions_is_the_raw_input_itself(project, capsys):
    lines = [f"question {i}\tanswer {i}" for i in range(200)]
    (project / "data" / "qa.tsv").write_text("question\tanswer\n" + "\n".join(lines) + "\n")
    argv = ["faq", "--file", "data/qa.tsv", "--valid-fraction", "0.1", "--test-fraction", "0.1",
            "--src-col", "question", "--tgt-col", "answer", "--lowercase", "--metric", "bleu"]  # fmt: skip
    assert add(*argv) == 0
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["tasks"]["faq"] == "data/qa.tsv"
    prepare = params["prepare"]["faq"]
    assert (prepare["train_file"], prepare["valid_fraction"], prepare["test_fraction"]) == (".", 0.1, 0.1)
    assert params["task_settings"]["faq"]["champion"] == "test.bleu"
    manifests = write_job(prepare_job("faq", str(project / "params.yaml")), serial_map)
    assert sum(m["rows"] for m in manifests.values()) == 200
    assert all(m["rows"] > 0 for m in manifests.values())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (SUPPORT[:2] + ["data/raw/support/nope.tsv"] + SUPPORT[3:], "--train: no such file data/raw/support/nope.tsv"),
        (
            [a.replace("question", "query") for a in SUPPORT],
            "train.tsv: no column 'query'; the columns found are ['question', 'answer', 'alt']",
        ),
        (
            ["copy_rules", *SUPPORT[1:]],
            "task 'copy_rules' exists already (in tasks, prepare, task_settings of params.yaml)",
        ),
        (["Bad-Name", *SUPPORT[1:]], "task name 'Bad-Name': use lowercase letters"),
        (SUPPORT[:5] + SUPPORT[7:], "give --test FILE or --test-fraction F"),
        (SUPPORT + ["--no-header"], "column 'question': without a header (--no-header) columns are 0-based indices"),
    ],
)
def test_refusals_exit_2_with_a_message(project, capsys, argv, message):
    before = (project / "params.yaml").read_text()
    with pytest.raises(SystemExit) as exit_:
        add(*argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert (project / "params.yaml").read_text() == before  # nothing written


def test_files_beside_the_outputs_or_outside_the_project_are_refused(project, tmp_path_factory, capsys):
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, project / "data" / name)
    argv = ["mine", "--train", "data/train.tsv", "--valid", "data/valid.tsv", "--test", "data/test.tsv",
            "--src-col", "question", "--tgt-col", "answer"]  # fmt: skip
    with pytest.raises(SystemExit):
        add(*argv)
    assert "the files' common directory data would be the task's raw input, and it holds the pipeline's outputs" in (
        capsys.readouterr().err
    )
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copy(FIX / "train.tsv", elsewhere / "train.tsv")
    argv = ["mine", "--file", str(elsewhere / "train.tsv"), "--valid-fraction", "0.2", "--test-fraction", "0.2"]
    with pytest.raises(SystemExit):
        add(*argv)
    assert "is outside the project" in capsys.readouterr().err
