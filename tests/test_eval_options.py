"""scripts/eval_options.py: each row decodes the trained model with its one evaluate setting changed."""

import json
import os
import re
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
    assert "| rnnsearch | as evaluated | 50.00 | 1 | 1 | 0 | - |" in shown


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


def test_the_help_gives_every_option_a_text_and_names_every_settings_key(eval_options, capsys):
    """`--help` says what each option takes: --task (needed unless --print), every key --settings
    accepts (the evaluate section's) with an example, what --json and --params are, what --print reads."""
    options = {a.dest: a for a in eval_options.parser()._actions if a.dest != "help"}
    assert set(options) == {"task", "mechanisms", "splits", "settings", "params", "columns", "json", "print_json"}
    assert all(len(a.help or "") > 20 for a in options.values()), {d: a.help for d, a in options.items()}
    with pytest.raises(SystemExit) as done:
        eval_options.main(["--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "-m MECHANISM [MECHANISM ...], --mechanisms MECHANISM" in shown
    assert "--task TASK" in shown and "needed unless --print" in shown
    assert all(key in shown for key in EvalConfig.__dataclass_fields__)  # every key --settings accepts
    assert "--settings ban_unk=true replace_unk=true average_last=3" in shown  # an example
    assert "params.yaml" in options["params"].help and "--print" in options["json"].help
    assert "``" not in shown  # the docstring's markup is not shown


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "copynet", "-m", "rnnsearch"],
        ["-m", "copynet", "rnnsearch"],
        ["--mechanisms", "copynet", "-m", "rnnsearch"],
    ],
)
def test_m_repeated_is_mechanisms_as_copyseq_run_takes_it(eval_options, argv):
    """`copyseq run -m copynet -m rnnsearch` and `eval-options -m copynet -m rnnsearch` name rows alike."""
    parse = eval_options.parser().parse_args
    assert parse(["--task", TASK, "--mechanisms", "copynet", "rnnsearch"]).mechanisms == ["copynet", "rnnsearch"]
    assert parse(["--task", TASK, *argv]).mechanisms == ["copynet", "rnnsearch"]
    assert parse(["--task", TASK]).mechanisms is None  # default: the trained mechanisms of params.yaml


def test_the_output_is_tables_and_progress_lines_with_the_empty_outputs_no_dict_dumps(eval_options, toy_copy, capsys):
    """Each decoded row says what it decoded and how long it took; the rows' figures are in the table
    (the empty outputs, which ban_unk may cause, among them), not Python dicts of 15-digit floats."""
    evaluated = TaskPaths(TASK, toy_copy).evaluation("rnnsearch")
    (evaluated / "predictions").mkdir(parents=True)
    (evaluated / "metrics.json").write_text(json.dumps({"test": {"n": 3, "top1": 100 / 3}}))
    lines = [{"pred": ""}, {"pred": "a <unk>"}, {"pred": []}]  # two empty outputs
    (evaluated / "predictions" / "test.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = toy_copy / "options.json"
    argv = ["--task", TASK, "--params", str(toy_copy / "params.yaml"), "-m", "rnnsearch", "--splits", "test",
            "--settings", "ban_unk=true", "--columns", "top1", "--json", str(out)]  # fmt: skip
    assert eval_options.main(argv) == 0
    shown = capsys.readouterr().out
    assert "{" not in shown and "': " not in shown, shown
    assert re.search(r"\d\.\d{3,}", shown) is None, shown  # figures rounded as in the table
    assert "| mechanism | setting | top1 | <unk> tokens | lines with <unk> | empty outputs | length |" in shown
    assert "| rnnsearch | as evaluated | 33.33 | 1 | 1 | 2 | - |" in shown
    row = json.loads(out.read_text())["rows"]["rnnsearch"]["ban_unk=True"]["test"]
    assert f"| rnnsearch | ban_unk=True | {row['top1']:.2f} | 0 | 0 | {row['empty_outputs']} |" in shown
    assert f"rnnsearch ban_unk=True: test, {row['n']} examples decoded in {row['seconds']} s" in shown
