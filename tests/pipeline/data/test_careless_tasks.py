"""``copyseq tasks`` given careless input (docs/guarantees.md): a bare ``enable``, an option given twice,
the same file for two splits, a bad number or choice, a huge ``--subword``, files whose directory would
be ``data/`` or the project root -- each one line ``error: ...`` naming the option, exit code 2, and
params.yaml unchanged byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.data import tasks
from tests.helpers import FIXTURES, REPO

FIX = FIXTURES / "parallel"
RAW = "data/raw/support/"
FILES = ["--train", RAW + "train.tsv", "--valid", RAW + "valid.tsv", "--test", RAW + "test.tsv"]
ADD = ["--params", "params.yaml", "add", "mine", *FILES, "--src-col", "question", "--tgt-col", "answer"]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The repository's params.yaml and the fixture TSVs in data/raw/support/; the working directory."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = tmp_path / RAW
    raw.mkdir(parents=True)
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, raw / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(project: Path, capsys, argv: list[str]) -> str:
    """Run ``tasks`` with ``argv``: exit code 2, one stderr line (returned), params.yaml byte for byte as before."""
    before = (project / "params.yaml").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        tasks.main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    err = captured.err
    assert (
        err.startswith(("copyseq tasks: error: ", "copyseq tasks add: error: ", "copyseq tasks enable: error: "))
        and err.count("\n") == 1
    ), err  # one line: no usage block, no traceback
    assert (project / "params.yaml").read_bytes() == before  # nothing written
    assert not captured.out
    return err


# --------------------------------------------------------------------------- #
# enable
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("argv", [[], ["--preset", "paper"]], ids=["bare", "preset_only"])
def test_enable_without_names_or_available_is_refused_and_changes_nothing(project, capsys, argv):
    err = refused(project, capsys, ["--params", "params.yaml", "enable", *argv])
    assert "name the tasks to enable" in err and "--available" in err and "params.yaml is unchanged" in err


def test_enable_available_enables_every_ready_task(project, capsys):
    """What the refusal points to: ``--available`` switches on the tasks whose data is here (here only
    copy_rules, whose raw input is its generator script) and keeps the others as comments."""
    script = project / "pipeline/data/corpora/copynet_rules.py"
    script.parent.mkdir(parents=True)
    shutil.copy(REPO / "pipeline/data/corpora/copynet_rules.py", script)
    assert tasks.main(["--params", "params.yaml", "enable", "--available"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "enabled: copy_rules"
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["tasks"] == {"copy_rules": "pipeline/data/corpora/copynet_rules.py"}
    assert "  # rarest_word: " in (project / "params.yaml").read_text()


def test_enable_preset_without_a_preset_line_is_refused_before_the_tasks_block_is_written(project, capsys):
    script = project / "pipeline/data/corpora/copynet_rules.py"
    script.parent.mkdir(parents=True)
    shutil.copy(REPO / "pipeline/data/corpora/copynet_rules.py", script)
    text = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(text.replace("\npreset: cpu", "\n# preset: cpu", 1))
    err = refused(project, capsys, ["--params", "params.yaml", "enable", "copy_rules", "--preset", "paper"])
    assert "no top-level 'preset:' line for --preset paper" in err


# --------------------------------------------------------------------------- #
# an option given twice
# --------------------------------------------------------------------------- #

TWICE = {
    "--train": [RAW + "train.tsv"],
    "--valid": [RAW + "test.tsv"],
    "--test": [RAW + "valid.tsv"],
    "--valid-fraction": ["0.1"],
    "--test-fraction": ["0.1"],
    "--format": ["tsv"],
    "--delimiter": [","],
    "--src-col": ["alt"],
    "--tgt-col": ["alt"],
    "--refs-col": ["refs"],
    "--features-col": ["alt"],
    "--features-sep": [","],
    "--group-col": ["alt"],
    "--tokenizer": ["chars"],
    "--lang": ["fr"],
    "--subword": ["8000"],
    "--metric": ["bleu"],
    "--max-len": ["30"],
    "--mechanisms": ["copynet"],
}


@pytest.mark.parametrize("option", list(TWICE))
def test_a_single_value_option_of_add_given_twice_is_refused(project, capsys, option):
    """argparse keeps the last value silently: ``--valid v1 --valid v2`` dropped v1."""
    argv = [*ADD, option, *TWICE[option], option, *TWICE[option]]
    err = refused(project, capsys, argv)
    assert f"argument {option}: given twice: give it once" in err


def test_file_given_twice_is_refused(project, capsys):
    argv = ["--params", "params.yaml", "add", "mine", "--file", RAW + "train.tsv", "--file", RAW + "test.tsv"]
    assert "argument --file: given twice: give it once with all its values" in refused(project, capsys, argv)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--params", "params.yaml", "--params", "params.yaml", "list"], "--params"),
        (["--params", "params.yaml", "enable", "copy_rules", "--preset", "cpu", "--preset", "paper"], "--preset"),
    ],
)
def test_params_and_preset_given_twice_are_refused(project, capsys, argv, option):
    assert f"argument {option}: given twice" in refused(project, capsys, argv)


def test_repeatable_options_still_repeat(project, capsys):
    """``--ref-col`` is repeated on purpose (one per column); the flags may be repeated harmlessly."""
    argv = [*ADD, "--ref-col", "alt", "--lowercase", "--lowercase"]
    assert tasks.main(argv) == 0
    prepare = yaml.safe_load((project / "params.yaml").read_text())["prepare"]["mine"]
    assert prepare["ref_cols"] == ["alt"] and prepare["lowercase"] is True


# --------------------------------------------------------------------------- #
# one file for two splits
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("valid", "test", "message"),
    [
        (RAW + "test.tsv", RAW + "test.tsv", f"--valid and --test name the same file ({RAW}test.tsv)"),
        (f"./{RAW}test.tsv", RAW + "test.tsv", f"--valid and --test name the same file (./{RAW}test.tsv and"),
        (RAW + "link.tsv", RAW + "test.tsv", f"--valid and --test name the same file ({RAW}link.tsv and"),
        (RAW + "train.tsv", RAW + "test.tsv", f"--train and --valid name the same file ({RAW}train.tsv)"),
    ],
    ids=["valid_is_test", "another_spelling", "symlink", "valid_is_train"],
)
def test_the_same_file_for_two_splits_is_refused(project, capsys, valid, test, message):
    os.symlink("test.tsv", project / RAW / "link.tsv")
    argv = ["--params", "params.yaml", "add", "mine", "--train", RAW + "train.tsv", "--valid", valid, "--test", test]
    err = refused(project, capsys, [*argv, "--src-col", "question", "--tgt-col", "answer"])
    assert message in err and "each split must be data of its own" in err


# --------------------------------------------------------------------------- #
# argparse's own errors: one line
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*ADD, "--valid-fraction", "abc"], "argument --valid-fraction: invalid float value: 'abc'"),
        ([*ADD, "--subword", "abc"], "argument --subword: invalid int value: 'abc'"),
        ([*ADD, "--max-len", "1.5"], "argument --max-len: invalid int value: '1.5'"),
        ([*ADD, "--format", "xlsx"], "argument --format: invalid choice: 'xlsx'"),
        ([*ADD, "--tokenizer", "nosuch"], "argument --tokenizer: invalid choice: 'nosuch'"),
        ([*ADD, "--metric", "nosuch"], "argument --metric: invalid choice: 'nosuch'"),
        ([*ADD, "--bogus"], "unrecognized arguments: --bogus"),
        ([*ADD, "--valid"], "argument --valid: expected at least one argument"),
        (["--params", "params.yaml", "add"], "the following arguments are required: name"),
        (["--params", "params.yaml", "enable", "--preset", "gpu"], "argument --preset: invalid choice: 'gpu'"),
        (["--params", "params.yaml", "list", "extra"], "unrecognized arguments: extra"),
        (["--params", "params.yaml"], "the following arguments are required: command"),
        (["--params", "params.yaml", "nosuch"], "argument command: invalid choice: 'nosuch'"),
    ],
    ids=[
        "fraction_abc",
        "subword_abc",
        "max_len_float",
        "format",
        "tokenizer",
        "metric",
        "unknown_option",
        "valid_no_value",
        "no_name",
        "enable_preset",
        "list_extra",
        "no_command",
        "unknown_command",
    ],  # fmt: skip
)
def test_a_bad_number_choice_or_option_is_one_line(project, capsys, argv, message):
    err = refused(project, capsys, argv)
    assert message in err


def test_copyseq_tasks_add_with_a_bad_fraction_is_one_line_without_usage():
    """Through ``copyseq`` (Typer passes the arguments on): the module's one line, nothing around it.
    The parse fails before params.yaml is read, so the repository's own is safe."""
    cmd = [sys.executable, "-m", "pipeline.cli", "tasks", "add", "mine", "--file", "x.tsv", "--valid-fraction", "abc"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.count("\n") == 1 and "argument --valid-fraction: invalid float value: 'abc'" in done.stderr


# --------------------------------------------------------------------------- #
# --subword: the shared settings check at add time
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("size", ["2147483647", "2147483648", "999999999999"])
def test_a_huge_subword_is_refused_by_the_shared_check_at_add_time(project, capsys, size):
    """sentencepiece cannot parse a size over 2**31-1 and hangs on 2**31-1: the settings check the
    stages run (check_subword) bounds it, and ``add`` runs it before writing anything."""
    err = refused(project, capsys, [*ADD, "--subword", size])
    assert "--subword.vocab_size" in err and size in err


# --------------------------------------------------------------------------- #
# files whose directory would be data/ or the project root
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("files", "where"),
    [
        (["--train", "data/train.tsv", "--valid", "data/valid.tsv", "--test", "data/test.tsv"], "would be data/,"),
        (["--train", RAW + "train.tsv", "--valid", "valid.tsv", "--test", RAW + "test.tsv"], "the whole project"),
    ],
    ids=["data", "project_root"],
)
def test_files_without_a_directory_of_their_own_are_one_clear_line(project, capsys, files, where):
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, project / "data" / name)
    shutil.copy(FIX / "valid.tsv", project / "valid.tsv")
    err = refused(project, capsys, ["--params", "params.yaml", "add", "mine", *files, "--src-col", "question"])
    assert err.startswith(
        "copyseq tasks: error: the task's raw input (the directory holding all its files, which DVC watches)"
    )
    assert "put the files in a directory of their own, e.g. data/raw/<task>/" in err and where in err


# --------------------------------------------------------------------------- #
# the params file as the user wrote it
# --------------------------------------------------------------------------- #


def test_add_and_enable_keep_a_crlf_params_file_crlf(project, capsys):
    """A params.yaml saved with CRLF line ends: `tasks add` and `tasks enable` keep every line's CRLF."""
    crlf = (project / "params.yaml").read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    (project / "params.yaml").write_bytes(crlf)
    assert tasks.main(ADD) == 0
    after_add = (project / "params.yaml").read_bytes()
    assert b"  mine: data/raw/support\r\n" in after_add and b"\n" not in after_add.replace(b"\r\n", b"")
    assert tasks.main(["--params", "params.yaml", "enable", "mine"]) == 0
    after_enable = (project / "params.yaml").read_bytes()
    assert b"\n" not in after_enable.replace(b"\r\n", b"")
    assert yaml.safe_load(after_enable)["tasks"] == {"mine": "data/raw/support"}
    capsys.readouterr()


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such params file"),
        (b"tasks: {a: b}\npreset: cpu\npreset: paper\n", "key 'preset' appears twice (lines 2 and 3)"),
        (b"tasks: {a: b}\nmodel: {emb: caf\xe9}\n", ":2: byte 0xe9 (column 17) is not UTF-8"),
    ],
    ids=["missing", "key_twice", "latin1"],
)
@pytest.mark.parametrize("command", [["list"], ["enable", "--available"], ADD[2:]], ids=["list", "enable", "add"])
def test_a_params_file_that_is_not_one_is_one_line_naming_it(project, capsys, content, words, command):
    bad = project / "bad.yaml"
    if content is not None:
        bad.write_bytes(content)
    with pytest.raises(SystemExit) as exit_:
        tasks.main(["--params", "bad.yaml", *command])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "bad.yaml" in err and words in err, err
    assert content is None or bad.read_bytes() == content  # nothing written
