"""A path that is not a readable file -- a symlink loop, a directory, permission denied, a name too long
for the file system -- is one line naming the option (``tasks add``) or the setting (the prepare
stage) and the path, exit 2, nothing written; never an ``OSError`` / ``RuntimeError`` traceback."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.config.validation import InputError
from pipeline.data import tasks
from pipeline.data.corpora import inputs
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.data.corpora.inputs import open_input, resolve_input, unreadable
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import serial_map
from tests.helpers import FIXTURES, REPO

FIX = FIXTURES / "parallel"
LOOP = "a symlink loop (a link that leads back to itself), not a file"
LONG = "x" * 300 + ".tsv"  # one component over the file systems' 255 bytes


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The repository's params.yaml, the fixture TSVs in data/raw/support/, and a symlink loop,
    a directory named like a file and an unreadable file beside them."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = tmp_path / "data" / "raw" / "support"
    raw.mkdir(parents=True)
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, raw / name)
    (raw / "loop.tsv").symlink_to("loop.tsv")  # a link to itself
    (raw / "a.tsv").symlink_to("b.tsv")  # two links to each other
    (raw / "b.tsv").symlink_to("a.tsv")
    (raw / "folder.tsv").mkdir()
    shutil.copy(FIX / "train.tsv", raw / "locked.tsv")
    (raw / "locked.tsv").chmod(0)
    if os.geteuid() == 0:  # root reads any file: its open is denied as it would be for anyone else
        real = open

        def denying(file, *args, **kwargs):
            if str(file).endswith("locked.tsv"):
                raise PermissionError(errno.EACCES, "Permission denied", str(file))
            return real(file, *args, **kwargs)

        monkeypatch.setattr(inputs, "open", denying, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def add(*argv: str) -> int:
    return tasks.main(["--params", "params.yaml", "add", *argv])


def _argv(train: list[str], valid: str = "data/raw/support/valid.tsv") -> list[str]:
    return ["mine", *train, "--valid", valid, "--test", "data/raw/support/test.tsv",
            "--src-col", "question", "--tgt-col", "answer"]  # fmt: skip


RAW = "data/raw/support/"


@pytest.mark.parametrize(
    ("train", "valid", "message"),
    [
        (["--train", RAW + "loop.tsv"], None, f"--train {RAW}loop.tsv: {LOOP}"),
        (["--train", RAW + "a.tsv"], None, f"--train {RAW}a.tsv: {LOOP}"),
        (["--file", RAW + "loop.tsv"], None, f"--file {RAW}loop.tsv: {LOOP}"),
        (["--train", RAW + "folder.tsv"], None, f"--train {RAW}folder.tsv: a directory, not a file"),
        (["--train", RAW + "train.tsv"], RAW + "folder.tsv", f"--valid {RAW}folder.tsv: a directory, not a file"),
        (["--train", RAW + LONG], None, f"--train {RAW}{LONG}: a name too long for the file system"),
        (["--train", RAW + "train.tsv/x.tsv"], None, f"--train: no such file {RAW}train.tsv/x.tsv"),
        (["--train", RAW + "locked.tsv"], None, f"--train {RAW}locked.tsv: permission denied"),
    ],
    ids=["loop", "loop_of_two", "file_option", "directory", "valid_directory", "name_too_long", "not_a_dir", "denied"],
)
def test_tasks_add_refuses_an_unreadable_path_in_one_line(project, capsys, train, valid, message):
    before = (project / "params.yaml").read_text()
    argv = _argv(train, valid) if valid else _argv(train)
    if train[0] == "--file":
        argv = ["mine", *train, "--valid-fraction", "0.2", "--test-fraction", "0.2", "--src-col", "question"]
    with pytest.raises(SystemExit) as exit_:
        add(*argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"copyseq tasks: error: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err  # one line
    assert (project / "params.yaml").read_text() == before  # nothing written


def _prepared_then(project: Path, setting: str, path: str) -> None:
    """Task ``mine`` added from the good files, then its ``setting`` pointed at ``path`` by hand."""
    assert add(*_argv(["--train", RAW + "train.tsv"])) == 0
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["prepare"]["mine"][setting] = path
    (project / "params.yaml").write_text(yaml.safe_dump(params))


@pytest.mark.parametrize(
    ("setting", "name", "why"),
    [
        ("train_file", "loop.tsv", LOOP),
        ("valid_file", "folder.tsv", "a directory, not a file"),
        ("test_file", LONG, "a name too long for the file system"),
        ("train_file", "locked.tsv", "permission denied"),
    ],
)
def test_the_prepare_stage_names_the_setting_and_the_path(project, setting, name, why):
    """The same paths set in params.yaml by hand: the reader's check before anything is written is an
    InputError (the stage CLI prints it as one line, exit 2) naming the file, the setting and why."""
    _prepared_then(project, setting, name)
    with pytest.raises(CorpusFormatError) as err:
        write_job(prepare_job("mine", str(project / "params.yaml")), serial_map)
    assert isinstance(err.value, InputError)
    assert str(err.value) == f"{project / 'data/raw/support' / name}: {setting}: {why}"
    assert not (project / "data" / "shards" / "mine").exists()  # nothing published


def test_a_missing_file_is_still_named_as_missing(project):
    _prepared_then(project, "train_file", "nope.tsv")
    with pytest.raises(FileNotFoundError, match=r"missing input file\(s\): .*nope.tsv"):
        write_job(prepare_job("mine", str(project / "params.yaml")), serial_map)


def test_open_input_says_why_a_path_cannot_be_read(project):
    raw = project / "data" / "raw" / "support"
    for name, why in (("loop.tsv", LOOP), ("folder.tsv", "a directory, not a file"), (LONG, "a name too long")):
        with pytest.raises(CorpusFormatError) as err:
            open_input(raw / name)
        assert str(err.value).startswith(f"{raw / name}: cannot be read: {why}")
        assert unreadable(raw / name).startswith(why)
        assert resolve_input(raw / name) == raw / name  # no OSError looking for a .gz beside it
    with pytest.raises(FileNotFoundError):
        open_input(raw / "nope.tsv")
    assert unreadable(raw / "train.tsv") is None
    (raw / "dangling.tsv").symlink_to("gone.tsv")
    assert unreadable(raw / "dangling.tsv") == "a symbolic link to a missing file (gone.tsv)"
