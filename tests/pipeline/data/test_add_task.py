"""``python -m pipeline.data.tasks add``: your own corpus as a task in one command -- the entries it
writes, params.yaml's comments and layout kept, the task ``ready`` and prepared, and the refusals."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline.config.validation import SettingsError
from pipeline.data import tasks
from pipeline.data.add_task import METRICS
from pipeline.data.corpora.common import EmptySplitError
from pipeline.data.prepare import prepare_job, scratch_folder, write_job
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
        "champion": "valid.rouge2",
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
    assert "next: copyseq run support_replies   (this task alone" in out

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
    assert params["task_settings"]["faq"]["champion"] == "valid.bleu"
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
    err = capsys.readouterr().err
    assert "the task's raw input (the directory holding all its files, which DVC watches)" in err
    assert "would be data/, where the pipeline writes its outputs: put the files in a directory of their own" in err
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copy(FIX / "train.tsv", elsewhere / "train.tsv")
    argv = ["mine", "--file", str(elsewhere / "train.tsv"), "--valid-fraction", "0.2", "--test-fraction", "0.2"]
    with pytest.raises(SystemExit):
        add(*argv)
    assert "is outside the project" in capsys.readouterr().err


# --------------------------------------------------------------------------- #
# Hostile and careless input (docs/guarantees.md, "Your own data"): one message, exit 2, nothing written
# --------------------------------------------------------------------------- #

FILE_ARGS = ["--file", "data/raw/qa/all.tsv", "--valid-fraction", "0.2", "--test-fraction", "0.2",
             "--src-col", "question", "--tgt-col", "answer"]  # fmt: skip


@pytest.fixture
def qa(project) -> Path:
    """data/raw/qa/all.tsv: 40 pairs with a header, and dup.tsv, whose header names 'q' twice."""
    raw = project / "data" / "raw" / "qa"
    raw.mkdir(parents=True)
    rows = [f"question {i} x\tanswer {i}" for i in range(40)]
    (raw / "all.tsv").write_text("question\tanswer\n" + "\n".join(rows) + "\n")
    (raw / "dup.tsv").write_text("q\tq\tanswer\n" + "\n".join(f"a {i}\tb {i}\tc {i}" for i in range(40)) + "\n")
    (project / "data" / "shards" / "qa").mkdir(parents=True)
    shutil.copy(raw / "all.tsv", project / "data" / "shards" / "qa" / "all.tsv")
    return project


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["qa", *FILE_ARGS, "--max-len", "0"], "task_settings.qa.evaluate.max_len is 0: must be >= 1"),
        (["qa", *FILE_ARGS, "--max-len", "-5"], "task_settings.qa.evaluate.max_len is -5: must be >= 1"),
        (["qa", *FILE_ARGS, "--max-len", "300"], "max_len=300 is over the serving limit serving.max_output_len=200"),
        (["qa", *FILE_ARGS, "--subword", "-3"], "--subword.vocab_size must be an integer >= 260, got -3"),
        (["qa", *FILE_ARGS, "--subword", "0"], "--subword.vocab_size must be an integer >= 260, got 0"),
        (["qa", *FILE_ARGS, "--delimiter", "ab"], "--delimiter 'ab': one character, for tsv/csv files"),
        (["qa", *FILE_ARGS[:1], "data/shards/qa/all.tsv", *FILE_ARGS[2:]], "lies in a folder the pipeline writes"),
        (
            ["qa", *FILE_ARGS[:2], "--valid-fraction", "0.001", *FILE_ARGS[4:]],
            "--valid-fraction 0.001 of the 40 records of all.tsv selects about 0.04 records",
        ),
        (
            ["qa", "--file", "data/raw/qa/dup.tsv", *FILE_ARGS[2:6], "--src-col", "q", "--tgt-col", "answer"],
            "dup.tsv: the header names column 'q' 2 times",
        ),
        (["a" * 302, *FILE_ARGS], "task name of 302 characters: at most 64"),
        (["qa", *FILE_ARGS, "--train", "data/raw/qa/all.tsv"], "give --train or --file, not both"),
    ],
    ids=[
        "max_len_0",
        "max_len_negative",
        "max_len_over_serving",
        "subword_negative",
        "subword_0",
        "delimiter",
        "file_in_outputs",
        "fraction_too_small",
        "header_twice",
        "long_name",
        "train_and_file",
    ],  # fmt: skip
)
def test_careless_values_are_refused_before_anything_is_written(qa, capsys, argv, message):
    before = (qa / "params.yaml").read_text()
    with pytest.raises(SystemExit) as exit_:
        add(*argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert (
        err.startswith(("copyseq tasks: error: ", "copyseq tasks add: error: ")) and err.count("\n") == 1
    )  # one line: no usage block, no traceback
    assert (qa / "params.yaml").read_text() == before


@pytest.mark.parametrize("inline", ["tasks: {}", "tasks: {copy_rules: pipeline/data/corpora/copynet_rules.py}"])
def test_an_inline_tasks_block_is_rewritten_as_a_block_and_the_task_added(qa, capsys, inline):
    text = (qa / "params.yaml").read_text()
    text = re.sub(r"^tasks:\n(?:[ \t#][^\n]*\n)*", inline + "\n", text, count=1, flags=re.M)
    (qa / "params.yaml").write_text(text)
    before = yaml.safe_load(text)
    assert add("qa", *FILE_ARGS) == 0
    after = yaml.safe_load((qa / "params.yaml").read_text())
    assert after["tasks"] == {**before["tasks"], "qa": "data/raw/qa/all.tsv"}
    assert after["prepare"]["qa"]["reader"] == "parallel"
    assert {k: v for k, v in after.items() if k not in ("tasks", "prepare", "task_settings")} == {
        k: v for k, v in before.items() if k not in ("tasks", "prepare", "task_settings")
    }


def test_a_fraction_that_selects_nothing_says_so_in_the_prepare_stage(qa):
    """A fraction whose expected count is over one may still select no record (a hash split): the
    prepare stage names the fraction and the record count, not "no record reached it"."""
    assert add("qa", *FILE_ARGS) == 0
    params = yaml.safe_load((qa / "params.yaml").read_text())
    params["prepare"]["qa"]["valid_fraction"] = 0.025  # 40 records: 1 expected; the hash selects none
    (qa / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(EmptySplitError, match="valid_fraction 0.025 of the train file's 40 records selected none"):
        write_job(prepare_job("qa", str(qa / "params.yaml")), serial_map)
    assert not (qa / "data" / "shards" / "qa" / "train").exists()
    assert [p.name for p in (qa / "data" / "shards").iterdir()] == ["qa"]  # no scratch left beside it


def test_the_same_data_prepared_in_two_checkouts_gives_the_same_bytes(qa, tmp_path_factory):
    """Nothing DVC hashes names the checkout's folder: the outputs of prepare (and so their dvc.lock
    hashes, which are hashes of these bytes) are equal in two checkouts in different folders."""
    assert add("qa", *FILE_ARGS, "--subword", "300") == 0
    other = tmp_path_factory.mktemp("elsewhere") / "another" / "checkout"
    shutil.copytree(qa, other)
    outputs = []
    for root in (qa, other):
        write_job(prepare_job("qa", str(root / "params.yaml")), serial_map)
        shards = root / "data" / "shards" / "qa"
        outputs.append({str(p.relative_to(shards)): p.read_bytes() for p in sorted(shards.rglob("*")) if p.is_file()})
    assert outputs[0] == outputs[1]
    manifest = json.loads(outputs[0]["train/manifest.json"])
    assert manifest["params"]["input_params"]["train_file"] == "data/raw/qa/all.tsv"
    assert str(qa) not in json.dumps(manifest) and str(other) not in json.dumps(manifest)


KILLED_PREPARE = """
import sys, time
from pathlib import Path
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import ProcessMap, serial_map

params, pool, flag = sys.argv[1], sys.argv[2] == "pool", Path(sys.argv[3])

def stalling(map_chunks):  # the third chunk never comes back: the parent kills us there
    def run(fn, chunks):
        for i, result in enumerate(map_chunks(fn, chunks)):
            if i == 2:
                flag.touch()
                time.sleep(600)
            yield result
    return run

with ProcessMap(2 if pool else 1) as pool_map:
    write_job(prepare_job("qa", params), stalling(pool_map))
"""


def _stalled_prepare(qa: Path, tmp_path: Path, route: str, sig: int) -> tuple[Path, list[int], int]:
    """Add task qa (300 pairs, chunks of 10; ``route``: one file carved by fractions, or a file per
    split; serial or a pool of 2), prepare it in a clean copy uninterrupted, then in ``qa`` in a
    process that stalls at its third chunk and gets ``sig`` there. Returns the clean copy, the
    killed process's pool workers and its exit code."""
    raw = qa / "data" / "raw" / "qa"
    rows = [f"question {i} x\tanswer {i}" for i in range(300)]
    (raw / "all.tsv").write_text("question\tanswer\n" + "\n".join(rows) + "\n")
    shutil.rmtree(qa / "data" / "shards")
    if route.startswith("files"):
        for split, part in (("train", rows[:200]), ("valid", rows[200:250]), ("test", rows[250:])):
            (raw / f"{split}.tsv").write_text("question\tanswer\n" + "\n".join(part) + "\n")
        argv = [
            "--train",
            "data/raw/qa/train.tsv",
            "--valid",
            "data/raw/qa/valid.tsv",
            "--test",
            "data/raw/qa/test.tsv",
        ]
        assert add("qa", *argv, *FILE_ARGS[6:]) == 0
    else:
        assert add("qa", *FILE_ARGS) == 0
    params = yaml.safe_load((qa / "params.yaml").read_text())
    params["prepare"]["qa"]["chunk_size"] = 10
    (qa / "params.yaml").write_text(yaml.safe_dump(params))
    clean = tmp_path / "clean"
    shutil.copytree(qa, clean, ignore=shutil.ignore_patterns("shards"))
    write_job(prepare_job("qa", str(clean / "params.yaml")), serial_map)

    flag = tmp_path / "stalled"
    pool = "pool" if route.endswith("pool") else "serial"
    script = [sys.executable, "-c", KILLED_PREPARE, str(qa / "params.yaml"), pool, str(flag)]
    proc = subprocess.Popen(
        script, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the prepare ended before it stalled"
            time.sleep(0.05)
        workers = _children(proc.pid)
        os.kill(proc.pid, sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)], "pool workers outlived the prepare"
    return clean, workers, proc.returncode


def _same_output(clean: Path, qa: Path) -> None:
    shards, again = clean / "data" / "shards" / "qa", qa / "data" / "shards" / "qa"
    files = sorted(p.relative_to(shards) for p in shards.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((shards / f).read_bytes() == (again / f).read_bytes() for f in files)


@pytest.mark.parametrize("route", ["fractions-serial", "fractions-pool", "files-pool"])
def test_a_prepare_killed_with_sigkill_leaves_nothing_behind_after_the_next_run(qa, tmp_path, route):
    """prepare killed with SIGKILL mid-way (hash split: while spilling; files: while writing splits),
    in-process or with a process pool: its pool workers die with it, and the next run removes its
    scratch and temporary directories and writes the same output as a run never interrupted."""
    clean, _, code = _stalled_prepare(qa, tmp_path, route, signal.SIGKILL)
    assert code == -signal.SIGKILL
    shards, scratch = qa / "data" / "shards", scratch_folder(qa)
    left = [*shards.rglob(".*"), *scratch.rglob(".*")]
    assert left, "the killed run left no scratch: the precondition"
    if route.startswith("fractions"):  # killed while spilling: the spill is in the scratch folder only
        assert [p.name.split(".spill-")[0] for p in scratch.iterdir()] == [".qa"]
        assert not list(shards.glob(".*"))  # nothing hidden beside the DVC output
    write_job(prepare_job("qa", str(qa / "params.yaml")), serial_map)
    assert not list(shards.rglob(".*")) and not list(scratch.rglob(".*"))  # the killed run's scratch: gone
    _same_output(clean, qa)


def test_prepare_scratch_is_outside_data_shards_and_gitignored(qa, tmp_path, monkeypatch):
    """A prepare's scratch (here a hash split's spill) lives in data/tmp/prepare, not in data/shards/: a
    killed run whose rerun DVC answers from its run cache (the flow never runs, nothing removes it)
    leaves nothing beside the DVC outputs, and git ignores the folder. Manifests still name no
    scratch folder of this checkout (the same bytes as when scratch went beside the output)."""
    import pipeline.data.corpora.parallel as parallel_reader

    assert add("qa", *FILE_ARGS, "--subword", "300") == 0
    seen = []
    real = parallel_reader.scratch_dir

    def watching(parent, prefix):
        seen.append(Path(parent))
        return real(parent, prefix)

    monkeypatch.setattr(parallel_reader, "scratch_dir", watching)
    manifests = write_job(prepare_job("qa", str(qa / "params.yaml")), serial_map)
    assert seen == [qa / "data" / "tmp" / "prepare"], seen  # the words' spill (a subword task's words too)
    assert [p.name for p in (qa / "data" / "shards").iterdir()] == ["qa"]
    assert manifests["train"]["params"]["input_split"] == "data/shards/.qa.words/train"
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", "data/tmp/prepare/.qa.spill-x/train.pkl"]
    )
    assert ignored.returncode == 0, "data/tmp/ is not in .gitignore"


@pytest.mark.parametrize("route", ["fractions-pool", "files-pool"])
def test_ctrl_c_in_prepare_leaves_nothing_behind(qa, tmp_path, route):
    """Ctrl-C (SIGINT) mid-way: the run removes its own scratch and temporary directories, publishes
    no split, and its workers end; the next run writes the same output as one never interrupted."""
    clean, _, code = _stalled_prepare(qa, tmp_path, route, signal.SIGINT)
    assert code != 0
    shards = qa / "data" / "shards"
    assert not list(shards.rglob(".*")) and not list(shards.rglob("manifest.json"))  # nothing left, nothing published
    assert not list(scratch_folder(qa).rglob(".*"))
    write_job(prepare_job("qa", str(qa / "params.yaml")), serial_map)
    _same_output(clean, qa)


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (8000, r"subword.vocab_size 8000 is too large for this train split: sentencepiece can make at most \d+ pieces"),
        (260, r"subword.vocab_size 260 is smaller than the \d+ pieces sentencepiece must keep"),
    ],
)
def test_a_subword_size_the_data_cannot_give_is_one_message_of_prepare(qa, size, message):
    """What only the data can tell (40 pairs cannot make 8,000 pieces; their characters and the 256
    byte pieces need more than 260): the prepare stage names the setting and the size that works,
    and writes nothing (before: sentencepiece's internal error)."""
    assert add("qa", *FILE_ARGS, "--subword", str(size)) == 0
    if size == 260:  # more distinct characters than 260 - 259 byte and special pieces leave room for
        (qa / "data/raw/qa/all.tsv").write_text(
            "question\tanswer\n" + "".join(f"{chr(0x4E00 + i)} q {i}\t{chr(0x4F00 + i)} a\n" for i in range(40))
        )
    with pytest.raises(SettingsError, match=message):
        write_job(prepare_job("qa", str(qa / "params.yaml")), serial_map)
    assert [p.name for p in (qa / "data" / "shards").iterdir()] == ["qa"]  # the stray copy of all.tsv only
    assert [p.name for p in (qa / "data" / "shards" / "qa").iterdir()] == ["all.tsv"]
