"""Careless settings and careless params files: one line on stderr naming the file (and line) or the
setting and what it must be, exit 2, nothing written -- never a traceback, never a silent "ok" for a
value a stage fails on later (a misspelt mechanism, a cron Prefect refuses, a key written twice)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.config import rows, schema
from pipeline.config.checks import MAX_SUBWORD_VOCAB, check_cron, check_subword, metric_keys
from pipeline.config.mechanisms import declared_mechanisms
from pipeline.config.params import load_params
from pipeline.config.params_edit import insert_entries, read_params_text, with_line_endings
from pipeline.config.validation import SettingsError
from pipeline.data import tasks
from tests.helpers import REPO

PARAMS_TEXT = (REPO / "params.yaml").read_text(encoding="utf-8")


def edited(old: str, new: str) -> str:
    """The repository's params.yaml with one line's text replaced (exactly once)."""
    assert PARAMS_TEXT.count(old) == 1, old
    return PARAMS_TEXT.replace(old, new)


def check(path: Path, capsys) -> tuple[int, str]:
    """``copyseq check --params path``: its exit code and stderr."""
    code = schema.main(["--params", str(path)])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line: no traceback, no usage block
    return err


# -- mechanisms -------------------------------------------------------------------------------------


def test_the_declared_mechanisms_are_the_registrys():
    """Read from the source without torch, they are the ones models.registry builds."""
    from models.registry import MECHANISMS

    assert declared_mechanisms() == tuple(sorted(MECHANISMS))


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("\nmechanisms: [encdec,", "\nmechanisms: [nosuchmech, encdec,", ["mechanisms lists 'nosuchmech'", "copynet"]),
        ("\nmechanisms: [encdec,", "\nmechanisms: [copynet_transformer, encdec,", None),  # a variant: fine
        (
            "\nmechanisms: [encdec,",
            "\nmechanisms: [copynet_transformer, encdec,",
            ["variants.copynet_transformer.mechanism 'copynett' is not a mechanism", "copynet"],
        ),
        (
            "\nmechanisms: [encdec, rnnsearch,",
            "\nmechanisms: [encdec, rnnsearch, encdec,",
            ["mechanisms lists 'encdec' twice"],
        ),
    ],
    ids=["unknown", "variant", "variant_base_misspelt", "twice"],
)
def test_a_row_no_mechanism_declares_is_refused_by_check(tmp_path, capsys, old, new, words):
    text = edited(old, new)
    if words and "copynett" in words[0]:
        text = text.replace("    mechanism: copynet\n", "    mechanism: copynett\n", 1)
    (tmp_path / "params.yaml").write_text(text, encoding="utf-8")
    code, err = check(tmp_path / "params.yaml", capsys)
    if words is None:
        assert (code, err) == (0, "")
        return
    assert code == 2
    assert one_line(err).startswith("error: params.yaml: ")
    for word in words:
        assert word in err


# -- retrain ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('cron: "0 3 * * 0"', 'cron: "every sunday"', ["retrain.cron is 'every sunday'", "0 3 * * 0"]),
        ('cron: "0 3 * * 0"', 'cron: "0 24 * * 0"', ["retrain.cron", "hour field '24'"]),
        ("  task: copy_rules ", "  task: nosuch ", ["retrain.task is 'nosuch'", "copy_rules"]),
        ("  metric: null ", "  metric: valid.bogus ", ["retrain.metric is 'valid.bogus'", "top1"]),
        ("  metric: null ", "  metric: test.top1 ", ["retrain.metric is 'test.top1'", "validation split only"]),
        ("  mechanism: null ", "  mechanism: nosuch ", ["retrain.mechanism is 'nosuch'", "copynet"]),
        ("  mechanism: null ", "  mechanism: luong ", ["retrain.mechanism is 'luong': not a row under mechanisms"]),
    ],
    ids=["cron_words", "cron_hour", "task", "metric", "metric_test_split", "mechanism", "mechanism_not_a_row"],
)
def test_careless_retrain_settings_are_refused_by_check(tmp_path, capsys, old, new, words):
    (tmp_path / "params.yaml").write_text(edited(old, new), encoding="utf-8")
    code, err = check(tmp_path / "params.yaml", capsys)
    assert code == 2
    assert one_line(err).startswith("error: params.yaml: retrain.")
    assert "params.yaml: params.yaml" not in err
    for word in words:
        assert word in err


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "copynet_rules.py\n    champion: valid.top1\n",
            "copynet_rules.py\n    champion: valid.topp1\n",
            ["copy_rules.champion is 'valid.topp1'", "top1, top10"],
        ),
        (
            "+ DUC 2004\n    raw: ../shared/data\n    champion: valid.rouge2\n",
            "+ DUC 2004\n    raw: ../shared/data\n    champion: valid.bleu\n",
            ["gigaword.champion is 'valid.bleu'", "rouge2_f"],
        ),
        (
            'with your copy"\n    champion: valid.bleu\n',
            'with your copy"\n    champion: valid.rouge2\n',
            ["wikismall.champion is 'valid.rouge2'", "sari"],
        ),
    ],
    ids=["exact_match", "rouge", "bleu_sari"],
)
def test_a_champion_metric_the_validation_split_never_scores_is_refused_by_check(tmp_path, capsys, old, new, words):
    """The champion is read after every row has trained and been evaluated: a key the task's validation
    split is not scored with is refused at once, by the task's own validation metric."""
    (tmp_path / "params.yaml").write_text(edited(old, new), encoding="utf-8")
    code, err = check(tmp_path / "params.yaml", capsys)
    assert code == 2
    assert one_line(err).startswith("error: params.yaml: task_settings.")
    for word in words:
        assert word in err


def test_a_top_k_champion_a_greedy_selection_cannot_score_is_refused_by_check(tmp_path, capsys):
    """copy_rules chooses checkpoints by its champion's metric (exact match: select_by auto), decoded with
    train.select_beam 1: a champion valid.top10 would have no value at the first validation."""
    old, new = "copynet_rules.py\n    champion: valid.top1\n", "copynet_rules.py\n    champion: valid.top10\n"
    (tmp_path / "params.yaml").write_text(edited(old, new), encoding="utf-8")
    code, err = check(tmp_path / "params.yaml", capsys)
    assert code == 2
    assert one_line(err) == (
        "error: params.yaml: task_settings.copy_rules.champion is 'valid.top10' and the checkpoints of encdec are "
        "chosen by it, but train.select_beam is 1: a beam of 1 gives top10 no value; set train.select_beam to 10 "
        "or more, train.select_by: loss, or champion: valid.top1\n"
    )
    (tmp_path / "params.yaml").write_text(
        edited(old, new).replace("\ntrain:                 # docs/training.md\n", "\ntrain:\n  select_by: loss\n", 1),
        encoding="utf-8",
    )
    assert check(tmp_path / "params.yaml", capsys)[0] == 0  # chosen by the loss: nothing decodes top10


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('cron: "0 3 * * 0"', 'cron: "30 2 * * mon-fri"'),
        ('cron: "0 3 * * 0"', 'cron: "@weekly"'),
        ("  metric: null ", "  metric: valid.top10 "),
        ("  mechanism: null ", "  mechanism: copynet "),
    ],
)
def test_good_retrain_settings_pass(tmp_path, capsys, old, new):
    (tmp_path / "params.yaml").write_text(edited(old, new), encoding="utf-8")
    assert check(tmp_path / "params.yaml", capsys) == (0, "")


CRONS = [
    "0 3 * * 0", "@weekly", "@midnight", "@annually", "@reboot", "0 3 ? * *", "0 3 L * *", "0 3 * * 5#3",
    "0 3 * * 7", "0 3 * * 8", "*/0 * * * *", "0-59/15 * * * *", "5/15 * * * *", "0 3 * jan-mar mon-fri",
    "0 3 * JAN *", "0 0 * * * * 2030", "0 0 * * * 0 1969", "0 24 * * *", "0 3 0 * *", "0 3 * 0 *",
    "0 3 * * sun,mon", "0 3 * * 5-1", "0 3 LW * *", "", "every sunday", "H 3 * * *", "* * * * * 60",
    "0 3 * * * * * *", "0 3 * foo *", "0 3 * * mon#2", "0 3 1,L * *", "? * * * *", "0 3 * * 1/2#3",
]  # fmt: skip


def test_the_cron_check_agrees_with_prefects_cron_schedules():
    """Prefect (only the flows may import it) validates a deployment's cron with its croniter, refusing
    the random (R) and hashed (H) forms; the settings check takes the same strings."""
    from prefect._internal.schemas.validators import validate_cron_string

    def prefect_takes(cron: str) -> bool:
        try:
            validate_cron_string(cron)
        except ValueError:
            return False
        return True

    def we_take(cron: str) -> bool:
        try:
            check_cron(cron, "retrain.cron")
        except SettingsError:
            return False
        return True

    assert {c: we_take(c) for c in CRONS} == {c: prefect_takes(c) for c in CRONS}


def test_the_metric_keys_are_what_the_metrics_return():
    from pipeline.metrics.registry import TEXT_METRICS, exact_match, text_metrics

    assert set(metric_keys("exact_match", 7)) == set(exact_match([["a"]], [[["a"]]], 7)) - {"n"}
    for kind in TEXT_METRICS:
        scores = text_metrics(kind, [["a", "b"]], [[["a", "b"]]], srcs=[["a", "b"]])
        assert set(metric_keys(kind, 10)) == set(scores) - {"n"}, kind


# -- the params file itself -------------------------------------------------------------------------

BAD_FILES = {
    "missing": (None, "no such params file"),
    "directory": ("dir", "a directory, not a params file"),
    "empty": (b"", "empty"),
    "list": (b"- a\n- b\n", "expected a mapping of settings at the top level"),
    "bad_yaml": (b"preset: cpu\nmechanisms: [encdec, copynet\ntrain: {}\n", ":3: not valid YAML"),
    "not_utf8": (b"preset: cpu\n# M\xfcnchen\n", ":2: byte 0xfc (column 4) is not UTF-8"),
    "key_twice": (b"preset: cpu\ntrain: {}\npreset: paper\n", ":3: key 'preset' appears twice (lines 1 and 3)"),
    "nested_key_twice": (b"train:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n", ":4: key 'lr' appears twice (lines 2 and 4)"),
}


def bad_file(tmp_path: Path, content: bytes | str | None) -> Path:
    path = tmp_path / "params.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_params_file_that_is_not_one_is_one_line_naming_it(tmp_path, capsys, case):
    content, message = BAD_FILES[case]
    path = bad_file(tmp_path, content)
    with pytest.raises(SettingsError) as raised:
        load_params(path)
    assert str(raised.value).startswith(str(path)) and message in str(raised.value)
    assert "\n" not in str(raised.value)
    code, err = check(path, capsys)
    assert code == 2 and message in one_line(err) and str(path) in err


@pytest.mark.parametrize("case", ["directory", "not_utf8", "key_twice"])
def test_the_settings_stage_refuses_a_bad_params_file_writing_nothing(tmp_path, capsys, case):
    content, message = BAD_FILES[case]
    path = bad_file(tmp_path, content)
    assert rows.main(["--params", str(path)]) == 2
    assert message in one_line(capsys.readouterr().err)
    assert not (tmp_path / "data").exists()


def test_a_merge_key_is_not_a_key_written_twice(tmp_path):
    path = bad_file(tmp_path, b"base: &b {lr: 0.1, epochs: 2}\ntrain:\n  <<: *b\n  lr: 0.2\n")
    assert load_params(path)["train"] == {"lr": 0.2, "epochs": 2}


# -- subword ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2_147_483_647, 2_147_483_648, 999_999_999_999, MAX_SUBWORD_VOCAB + 1])
def test_a_subword_vocabulary_too_large_to_train_is_refused(size):
    with pytest.raises(SettingsError, match=r"prepare\.t\.subword\.vocab_size must be at most 1,000,000") as raised:
        check_subword({"vocab_size": size}, "prepare.t.subword")
    assert "\n" not in str(raised.value)
    check_subword({"vocab_size": MAX_SUBWORD_VOCAB}, "prepare.t.subword")  # the bound itself is fine


def test_tasks_add_refuses_a_huge_subword_writing_nothing(tmp_path, monkeypatch, capsys):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = tmp_path / "data" / "raw" / "qa"
    raw.mkdir(parents=True)
    (raw / "all.tsv").write_text("question\tanswer\n" + "".join(f"q {i} x\ta {i}\n" for i in range(40)))
    monkeypatch.chdir(tmp_path)
    before = (tmp_path / "params.yaml").read_bytes()
    argv = ["--params", "params.yaml", "add", "qa", "--file", "data/raw/qa/all.tsv", "--valid-fraction", "0.2"]
    argv += ["--test-fraction", "0.2", "--src-col", "question", "--tgt-col", "answer", "--subword", "2147483648"]
    with pytest.raises(SystemExit) as exit_:
        tasks.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("copyseq tasks: error: ") and err.count("\n") == 1, err
    assert "--subword.vocab_size must be at most 1,000,000" in err
    assert (tmp_path / "params.yaml").read_bytes() == before


# -- line endings -----------------------------------------------------------------------------------


def test_an_edit_keeps_every_lines_ending(tmp_path):
    """A CRLF params.yaml stays CRLF: each kept line byte for byte, the new lines CRLF too."""
    path = tmp_path / "params.yaml"
    path.write_bytes(PARAMS_TEXT.replace("\n", "\r\n").encode("utf-8"))
    text, raw = read_params_text(path)
    assert "\r" not in text and raw == path.read_bytes().decode("utf-8")
    new_text = with_line_endings(raw, insert_entries(text, "tasks", ["  qa: data/raw/qa/all.tsv"]))
    old_lines, new_lines = raw.split("\r\n"), new_text.split("\r\n")
    assert "\n" not in "".join(new_lines)  # no bare LF anywhere
    assert [line for line in new_lines if line not in old_lines] == ["  qa: data/raw/qa/all.tsv"]
    assert yaml.safe_load(new_text)["tasks"]["qa"] == "data/raw/qa/all.tsv"


def test_a_mixed_file_keeps_each_lines_own_ending():
    raw = "tasks:\n  a: x\r\nmechanisms: [encdec]\r\n"
    new_text = with_line_endings(raw, insert_entries(raw.replace("\r\n", "\n"), "tasks", ["  b: y"]))
    assert new_text == "tasks:\n  a: x\r\n  b: y\r\nmechanisms: [encdec]\r\n"
    assert with_line_endings("a: 1\n", "a: 1\nb: 2\n") == "a: 1\nb: 2\n"
    assert re.fullmatch(r"(?:[^\r\n]*\r\n)*", with_line_endings("a:\r\n", "a:\n  b: 1\n"))


def test_check_refuses_a_huge_subword_in_a_prepare_section(tmp_path, capsys):
    params = yaml.safe_load(PARAMS_TEXT)
    params["prepare"]["copy_rules"]["subword"] = {"vocab_size": 2_147_483_647}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    code, err = check(tmp_path / "params.yaml", capsys)
    assert code == 2
    assert "prepare.copy_rules.subword.vocab_size must be at most 1,000,000" in one_line(err)
