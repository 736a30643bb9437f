"""A group column (each example's natural group, ``group_col``): the parallel reader stores it, trimmed,
as the shards' ``group`` column and quarantines an empty cell ``empty_group``; ``tasks add --group-col``
writes the setting and ``compare.resample_by: group`` into the task's settings, so the comparison's
intervals resample whole groups of the test split; a missing column and a text corpus are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.data.add_task import NewTask, task_settings_entry
from pipeline.data.corpora import parallel
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import serial_map
from pipeline.reporting.compare import CompareConfig
from pipeline.stages.compare import comparison_intervals
from tests.helpers import FIXTURES, quarantine, split_rows
from tests.pipeline.data.test_add_task import add, project  # noqa: F401  (the fixture: a project with params.yaml)

TASK = "docs"
# (src, tgt, the doc cell as written); a doc is a group: its sentences are not independent examples
TRAIN = [
    ("the cat sat", "cat sat", "d1"),
    ("a dog ran far", "dog ran", " d1 "),  # trimmed: d1
    ("birds sing loud", "birds sing", "d2"),
    ("no group here", "no group", ""),  # empty_group
    ("blank group too", "blank group", "   "),  # empty_group
    ("rain fell all day", "rain fell", "17"),
]
VALID = [("sun rose early", "sun rose", "d4"), ("wind blew hard", "wind blew", "d4")]
TEST = [
    ("fish swim deep", "fish swim", "t1"),
    ("cows eat grass", "cows eat", "t1"),
    ("owls hunt at night", "owls hunt", "t2"),
    ("bees make honey", "bees make", "t2"),
    ("ants carry leaves", "ants carry", " t3"),
]
FILES = ["--train", f"data/raw/{TASK}/train.tsv", "--valid", f"data/raw/{TASK}/valid.tsv",
         "--test", f"data/raw/{TASK}/test.tsv", "--metric", "exact_match"]  # fmt: skip


def write_tsvs(root: Path) -> None:
    raw = root / "data" / "raw" / TASK
    raw.mkdir(parents=True)
    for split, rows in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        lines = ["src\ttgt\tdoc", *("\t".join(row) for row in rows)]
        (raw / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def grouped(project) -> Path:  # noqa: F811
    """``tasks add docs ... --group-col doc`` in the project, then the prepare stage's job."""
    write_tsvs(project)
    assert add(TASK, *FILES, "--group-col", "doc") == 0
    write_job(prepare_job(TASK, str(project / "params.yaml")), serial_map)
    return project


def test_tasks_add_group_col_writes_the_settings_and_the_shards_get_each_rows_group(grouped, capsys):
    params = yaml.safe_load((grouped / "params.yaml").read_text())
    assert params["prepare"][TASK]["group_col"] == "doc"
    assert params["task_settings"][TASK]["compare"] == {"resample_by": "group"}
    shards = grouped / "data" / "shards" / TASK
    groups = {s: [(" ".join(r["src"]), r["group"]) for r in split_rows(shards / s)] for s in ("train", "valid", "test")}
    assert groups["train"] == [
        ("the cat sat", "d1"),
        ("a dog ran far", "d1"),
        ("birds sing loud", "d2"),
        ("rain fell all day", "17"),
    ]
    assert groups["valid"] == [("sun rose early", "d4"), ("wind blew hard", "d4")]
    assert [g for _, g in groups["test"]] == ["t1", "t1", "t2", "t2", "t3"]
    manifest = json.loads((shards / "train" / "manifest.json").read_text())
    assert manifest["params"]["group_col"] == "doc"
    assert "group: string" in manifest["schema"]


def test_an_empty_group_cell_is_quarantined_and_counted(grouped):
    train = grouped / "data" / "shards" / TASK / "train"
    found = [(q["reason"], q["record"]["where"]) for q in quarantine(train)]
    assert found == [("empty_group", "train.tsv:5"), ("empty_group", "train.tsv:6")]
    assert json.loads((train / "manifest.json").read_text())["quarantine_reasons"] == {"empty_group": 2}


def test_the_comparison_resamples_the_test_splits_groups(grouped):
    """compare's own resolution (compare.resample_by, else the reader's) on the task's effective params
    names ``group``, and its intervals resample the test split's 3 groups, read from the shards."""
    params = effective_params(yaml.safe_load((grouped / "params.yaml").read_text()), TASK)
    assert CompareConfig.from_params(params).resample_by == "group"
    paths = TaskPaths(TASK, grouped)
    rows = split_rows(paths.split("test"))
    for mech, right in (("copynet", lambda g: True), ("encdec", lambda g: g == "t1")):
        records = [{"id": r["id"], "tgt": r["tgt"], "nbest": [r["tgt"] if right(r["group"]) else ["x"]]} for r in rows]
        out = paths.predictions(mech, "test")
        out.parent.mkdir(parents=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    intervals = comparison_intervals(paths, ["copynet", "encdec"], params)
    assert intervals["test"]["resample_by"] == "group"
    assert intervals["test"]["unit"] == "3 groups"
    encdec = intervals["test"]["cells"]["top1"]["encdec"]
    assert encdec["mean"] == pytest.approx(40.0) and (encdec["low"], encdec["high"]) != (40.0, 40.0)


def test_the_compare_entry_keeps_the_metric_columns_beside_the_group():
    entry = task_settings_entry(NewTask(name="x", metric="bleu", group_col="doc"), Path("data/raw/x"))
    assert entry["compare"] == {"columns": ["bleu"], "resample_by": "group"}
    assert "compare" not in task_settings_entry(NewTask(name="x", metric="exact_match"), Path("data/raw/x"))


def test_tasks_add_refuses_a_missing_group_column_in_one_line(project, capsys):  # noqa: F811
    write_tsvs(project)
    before = (project / "params.yaml").read_text()
    with pytest.raises(SystemExit) as exit_:
        add(TASK, *FILES, "--group-col", "document")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "train.tsv: no column 'document'; the columns found are ['src', 'tgt', 'doc']" in err
    assert (project / "params.yaml").read_text() == before


def test_the_text_format_refuses_a_group_column(project, capsys):  # noqa: F811
    raw = project / "data" / "raw" / "lines"
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (raw / f"{split}.src").write_text("a b c\n")
        (raw / f"{split}.tgt").write_text("a b\n")
    before = (project / "params.yaml").read_text()
    files = [
        a for s in ("train", "valid", "test") for a in (f"--{s}", f"data/raw/lines/{s}.src", f"data/raw/lines/{s}.tgt")
    ]
    with pytest.raises(SystemExit) as exit_:
        add("lines", *files, "--group-col", "doc")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "copyseq tasks: error: --group-col is for table files (tsv, csv, jsonl, parquet, arrow), not text files"
    )
    assert (project / "params.yaml").read_text() == before
    with pytest.raises(ValueError, match=r"format text has no columns \(.*group_col"):
        parallel.Config.from_dict({"train_src_file": "a.src", "train_tgt_file": "a.tgt", "valid_fraction": 0.1,
                                   "group_col": "doc"})  # fmt: skip


def test_group_settings_are_absent_without_a_group_column_and_the_source_may_be_the_group(tmp_path):
    base = {"train_file": "t.tsv", "valid_fraction": 0.1}
    plain = parallel.Config.from_dict(base)
    assert "group_col" not in plain.manifest_params() and "group" not in plain.schema().names
    with pytest.raises(ValueError, match="columns must differ"):
        parallel.Config.from_dict({**base, "src_col": "a", "tgt_col": "a", "group_col": "a"})
    fix = FIXTURES / "parallel_features"  # lemma, tags, form: one group per lemma
    cfg = {f"{s}_file": str(fix / f"{s}.tsv") for s in ("train", "valid", "test")}
    cfg.update(src_col="lemma", tgt_col="form", group_col="lemma", tokenizer="chars")
    parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "out")
    rows = split_rows(tmp_path / "out" / "train")
    assert rows and all(r["group"] == "".join(r["src"]) for r in rows)


def test_jsonl_and_parquet_groups_missing_null_or_numbers(tmp_path):
    lines = [{"src": "a b", "tgt": "a", "doc": "d1"}, {"src": "c d", "tgt": "c"}, {"src": "e f", "tgt": "e", "doc": None},
             {"src": "g h", "tgt": "g", "doc": 17}, {"src": "i j", "tgt": "i", "doc": ["x"]}]  # fmt: skip
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(o) + "\n" for o in lines))
    (tmp_path / "v.jsonl").write_text(json.dumps({"src": "k l", "tgt": "k", "doc": "d9"}) + "\n")
    cfg = {"train_file": str(tmp_path / "t.jsonl"), "valid_file": str(tmp_path / "v.jsonl"), "group_col": "doc"}
    parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "js")
    assert [r["group"] for r in split_rows(tmp_path / "js" / "train")] == ["d1", "17"]
    found = [(q["reason"], q["record"]["where"]) for q in quarantine(tmp_path / "js" / "train")]
    assert found == [("empty_group", "t.jsonl:2"), ("empty_group", "t.jsonl:3"), ("bad_field_type", "t.jsonl:5")]

    pq.write_table(
        pa.table({"src": ["a b", "c d", "e f"], "tgt": ["a", "c", "e"], "doc": [3, None, 5]}), tmp_path / "t.pq"
    )
    pq.write_table(pa.table({"src": ["k l"], "tgt": ["k"], "doc": [9]}), tmp_path / "v.pq")
    cfg = {"train_file": str(tmp_path / "t.pq"), "valid_file": str(tmp_path / "v.pq"), "group_col": "doc"}
    parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "pq")
    assert [r["group"] for r in split_rows(tmp_path / "pq" / "train")] == ["3", "5"]
    assert [q["reason"] for q in quarantine(tmp_path / "pq" / "train")] == ["empty_group"]
