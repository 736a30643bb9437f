"""scripts/eval_options.py: each row decodes the trained model with its one evaluate setting changed."""

import json
import os
import subprocess
import sys

from benchmarks.toy import TASK
from pipeline.config.params import load_params
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.decoding.decode import decode_table
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.training.checkpoints import load_model
from pipeline.vocab.vocabulary import Vocab
from tests.helpers import REPO


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
         "--mechanisms", "rnnsearch", "--settings", "ban_unk=true", "replace_unk=true", "--columns", "rouge1",
         "--json", str(out)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]["rnnsearch"]
    assert set(rows) == {"ban_unk=True", "replace_unk=True"}  # no evaluate stage ran: no "as evaluated" row
    assert rows["ban_unk=True"]["test"]["unk_tokens"] == 0
    assert rows["replace_unk=True"]["test"]["unk_tokens"] < plain_unk  # source words took their place
    assert rows["ban_unk=True"]["test"]["n"] == len(plain)
    assert "| rnnsearch | ban_unk=True |" in done.stdout
