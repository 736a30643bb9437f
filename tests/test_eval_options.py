"""scripts/eval_options.py: each row decodes the trained model with its one evaluate setting changed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.toy import TASK
from pipeline.config.params import load_params
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.decoding.decode import decode_table
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.training.checkpoints import load_model
from pipeline.vocab.vocabulary import Vocab
from tests.helpers import REPO, load_script


def test_ban_and_replace_unk_rows_remove_the_unk_a_plain_decode_emits(toy_project, tmp_path):
    # The plain decode of the toy test split (fillers never seen in training) emits <unk>: the precondition.
    params = effective_params(load_params(toy_project / "params.yaml"), TASK, "rnnsearch")
    paths = TaskPaths(TASK, toy_project)
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    model, _ = load_model(paths.checkpoints("rnnsearch") / "model.pt", "rnnsearch", "cpu", vocabs)
    plain = decode_table(model, read_split(paths.split("test")), *vocabs, EvalConfig.from_params(params), "cpu")
    plain_unk = sum(r["pred"].count("<unk>") for r in plain)
    assert plain_unk > 0

    out = tmp_path / "options.json"
    done = subprocess.run(
        [sys.executable, "scripts/eval_options.py", "--task", TASK, "--params", str(toy_project / "params.yaml"),
         "--mechanisms", "rnnsearch", "--settings", "ban_unk=true", "replace_unk=true", "--columns", "top1",
         "--splits", "test", "--json", str(out)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]["rnnsearch"]
    assert set(rows) == {"ban_unk=True", "replace_unk=True"}  # no evaluate stage ran: no "as evaluated" row
    assert rows["ban_unk=True"]["test"]["unk_tokens"] == 0
    assert rows["replace_unk=True"]["test"]["unk_tokens"] < plain_unk  # source words took their place
    assert rows["ban_unk=True"]["test"]["n"] == len(plain)
    assert "| rnnsearch | ban_unk=True |" in done.stdout


@pytest.fixture(scope="module")
def eval_options():
    """scripts/eval_options.py as a module (its import pins the math libraries in os.environ: undone)."""
    return load_script("eval_options")


@pytest.fixture
def toy_copy(toy_project, tmp_path) -> Path:
    """A copy of the toy project whose params.yaml also lists WEAN, which is not trained there."""
    root = tmp_path / "toy"
    shutil.copytree(toy_project, root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["mechanisms"] = [*params["mechanisms"], "wean"]
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mechanisms", "wean", "--settings", "ban_unk=true"], "--mechanisms: wean not trained for toy_copy"),
        (["--settings", "beam_size=abc"], "evaluate.beam_size is 'abc': must be an integer"),
        (["--settings", "beam_size=0"], "evaluate.beam_size is 0: must be >= 1"),
        (["--settings", "max_len=0"], "evaluate.max_len is 0: must be >= 1"),
        (["--settings", "max_len=-5"], "evaluate.max_len is -5: must be >= 1"),
        (["--settings", "ban_unk=maybe"], "evaluate.ban_unk is 'maybe': must be true or false"),
        (["--settings", "average_last=2"], "copynet kept 0 step checkpoint(s)"),
        (["--settings", "beams=3"], "--settings: 'beams=3' is not <evaluate key>=<value>"),
        (["--splits", "dev"], "--splits: no shards for dev"),
    ],
)
def test_refusals_exit_2_with_one_message_before_any_decoding(eval_options, toy_copy, capsys, argv, message):
    out = toy_copy / "options.json"
    argv = ["--task", TASK, "--params", str(toy_copy / "params.yaml"), "--json", str(out), *argv]
    assert eval_options.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("copyseq eval-options: error: ") and message in captured.err
    assert "Traceback" not in captured.err and captured.out == ""  # nothing decoded, nothing printed
    assert not out.exists()


def test_default_mechanisms_skip_the_untrained_and_as_evaluated_shows_unscored_splits_as_dashes(
    eval_options, toy_copy, capsys
):
    # the evaluate stage scored test only (its evaluate.splits): the valid split has no "as evaluated" figures
    evaluated = TaskPaths(TASK, toy_copy).evaluation("rnnsearch")
    (evaluated / "predictions").mkdir(parents=True)
    (evaluated / "metrics.json").write_text(json.dumps({"test": {"n": 1, "top1": 50.0}}))
    (evaluated / "predictions" / "test.jsonl").write_text(json.dumps({"pred": "a <unk>"}) + "\n")
    out = toy_copy / "options.json"
    argv = ["--task", TASK, "--params", str(toy_copy / "params.yaml"), "--splits", "valid", "test",
            "--settings", "ban_unk=true", "--columns", "top1", "--json", str(out)]  # fmt: skip
    assert eval_options.main(argv) == 0
    shown = capsys.readouterr().out
    assert "skipped (not trained for toy_copy): wean" in shown
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"copynet", "rnnsearch"}
    assert set(rows["rnnsearch"]["as evaluated"]) == {"test"}
    assert "| rnnsearch | as evaluated | - | - | - | - |" in shown  # valid: not scored by the stage
    assert "| rnnsearch | as evaluated | 50.00 | 1 | 1 | - |" in shown


@pytest.mark.parametrize(
    ("evaluate", "columns"),
    [
        ({}, ["top1", "top10"]),  # the toy task's metric: exact match (evaluate.topk 10)
        ({"metric": "bleu"}, ["bleu"]),  # a text metric without compare.columns: what `tasks add` gives it
        ({"metric": "rouge_f"}, ["rouge1", "rouge2", "rougeL"]),
    ],
    ids=["exact_match", "bleu", "rouge_f"],
)
def test_the_columns_follow_the_task_s_metric_and_hold_numbers(eval_options, toy_copy, capsys, evaluate, columns):
    """Without --columns each split's table shows its metric's columns, as the comparison page does,
    each with a figure: an exact-match task is not shown ROUGE columns of '-'."""
    params = yaml.safe_load((toy_copy / "params.yaml").read_text())
    params["evaluate"].update(evaluate)
    (toy_copy / "params.yaml").write_text(yaml.safe_dump(params))
    out = toy_copy / "options.json"
    argv = ["--task", TASK, "--params", str(toy_copy / "params.yaml"), "--mechanisms", "copynet",
            "--settings", "beam_size=2", "--splits", "test", "--json", str(out)]  # fmt: skip
    assert eval_options.main(argv) == 0
    shown = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["columns"] == {"test": columns}
    assert "| mechanism | setting | " + " | ".join(columns) + " | <unk> tokens |" in shown
    (row,) = [line for line in shown.splitlines() if line.startswith("| copynet | beam_size=2 |")]
    cells = [c.strip() for c in row.strip("|").split("|")][2 : 2 + len(columns)]
    assert all(c != "-" and float(c) == pytest.approx(report["rows"]["copynet"]["beam_size=2"]["test"][k], abs=5e-3)
               for c, k in zip(cells, columns)), row  # fmt: skip
    # --print shows the same tables from the --json
    assert eval_options.main(["--print", str(out)]) == 0
    assert row in capsys.readouterr().out


def test_the_options_are_scored_on_the_validation_split_unless_told(eval_options):
    """Options are chosen on validation: the default split is valid; test is scored only when asked."""
    assert eval_options.parser().parse_args(["--task", TASK]).splits == ["valid"]
    assert eval_options.parser().parse_args(["--task", TASK, "--splits", "valid", "test"]).splits == ["valid", "test"]
