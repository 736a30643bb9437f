"""A features column (tags kept apart from the source, ``features_col``): the parallel reader splits it
on ``features_sep`` into the shards' ``features`` column in every table format, records the settings
in the manifest, treats (src, features) as the source for duplicates and leakage, and gives a missing
column the errors of any other column; ``tasks add --features-col`` writes the setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.data import tasks
from pipeline.data.corpora import parallel, raw_input
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import serial_map
from pipeline.io.shards import read_manifest
from tests.helpers import FIXTURES, REPO, quarantine, split_rows

FIX = FIXTURES / "parallel_features"
SETTINGS = {"src_col": "lemma", "tgt_col": "form", "features_col": "tags", "tokenizer": "chars"}
# train.tsv's rows as written: line 4 repeats line 2 (a duplicate pair), line 7's (sing, V;PRS;3;SG) is
# in test (a leak); the same lemmas under other tags are other examples.
TRAIN = [
    ("walk", ["V", "PST"], "walked"),
    ("walk", ["V", "PRS", "3", "SG"], "walks"),
    ("walk", ["V", "V.PTCP", "PRS"], "walking"),  # " V ; V.PTCP ;; PRS ": trimmed, the empty tag dropped
    ("sing", ["V", "PST"], "sang"),
    ("go", ["V", "PST"], "went"),
]
TEST = [("sing", ["V", "PRS", "3", "SG"], "sings"), ("go", ["V", "PRS", "3", "SG"], "goes"), ("see", [], "see")]


def run(tmp_path: Path, fmt: str, **settings) -> tuple[dict, dict]:
    cfg = {f"{s}_file": str(FIX / f"{s}.{fmt}") for s in ("train", "valid", "test")}
    manifests = parallel.write_splits(parallel.Config.from_dict({**cfg, **SETTINGS, **settings}), tmp_path / "out")
    return manifests, {s: split_rows(tmp_path / "out" / s) for s in manifests}


def triples(rows: list[dict]) -> list[tuple[str, list[str], str]]:
    return [("".join(r["src"]), r["features"], "".join(r["tgt"])) for r in rows]


def test_tsv_features_are_split_trimmed_and_kept_apart_from_the_source(tmp_path):
    manifests, rows = run(tmp_path, "tsv")
    assert triples(rows["train"]) == TRAIN
    assert triples(rows["test"]) == TEST  # an empty cell: no tags
    assert rows["train"][0]["src"] == ["w", "a", "l", "k"]  # the tokeniser reads the source only
    reasons = [(q["reason"], q["record"]["where"]) for q in quarantine(tmp_path / "out" / "train")]
    assert reasons == [("duplicate_pair", "train.tsv:4"), ("src_in_test", "train.tsv:7")]
    assert quarantine(tmp_path / "out" / "train")[1]["record"]["record"]["features"] == "V;PRS;3;SG"
    params = manifests["train"]["params"]
    assert (params["features_col"], params["features_sep"]) == ("tags", ";")
    schema = read_manifest(tmp_path / "out" / "train")["schema"]
    assert "features: list<item: string>" in schema


def test_jsonl_gives_the_same_rows_and_quarantines_a_missing_or_wrong_features_field(tmp_path):
    _, rows = run(tmp_path, "jsonl")
    assert triples(rows["train"]) == TRAIN and triples(rows["test"]) == TEST
    found = {q["record"]["where"]: (q["reason"], q["record"]["record"]) for q in quarantine(tmp_path / "out" / "train")}
    assert found["train.jsonl:8"][0] == "missing_field" and found["train.jsonl:8"][1]["missing"] == ["tags"]
    assert found["train.jsonl:9"][0] == "bad_field_type" and found["train.jsonl:9"][1]["field"] == "tags"


def test_parquet_by_another_separator_and_a_headerless_tsv_by_index(tmp_path):
    for split, lemmas in (("train", ["walk", "go", "sing"]), ("valid", ["talk", "see", "run"])):
        tags = ["V+PST", None, " V + PRS "]  # a null cell: no tags
        pq.write_table(pa.table({"lemma": lemmas, "tags": tags, "form": lemmas}), tmp_path / f"{split}.parquet")
    cfg = {**SETTINGS, "features_sep": "+"}
    cfg.update({f"{s}_file": str(tmp_path / f"{s}.parquet") for s in ("train", "valid")})
    parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "pq")
    assert [r["features"] for r in split_rows(tmp_path / "pq" / "valid")] == [["V", "PST"], [], ["V", "PRS"]]

    (tmp_path / "t.tsv").write_text("walk\tV;PST\twalked\n")
    (tmp_path / "v.tsv").write_text("go\t;V;PST\twent\n")
    cfg = {"train_file": str(tmp_path / "t.tsv"), "valid_file": str(tmp_path / "v.tsv"), "header": False}
    cfg.update(src_col=0, features_col=1, tgt_col=2, tokenizer="chars")
    parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "idx")
    assert triples(split_rows(tmp_path / "idx" / "valid")) == [("go", ["V", "PST"], "went")]


def test_a_missing_features_column_is_the_error_of_any_missing_column(tmp_path):
    cfg = {
        "train_file": str(FIX / "train.tsv"),
        "valid_file": str(FIX / "valid.tsv"),
        **SETTINGS,
        "features_col": "msd",
    }
    with pytest.raises(
        CorpusFormatError, match=r"valid\.tsv:1: no column 'msd'; the columns found are \['lemma', 'tags', 'form'\]"
    ):
        parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "o")
    assert not (tmp_path / "o").exists()
    pq.write_table(pa.table({"lemma": ["go"], "form": ["went"]}), tmp_path / "t.parquet")
    cfg.update(train_file=str(tmp_path / "t.parquet"), valid_file=str(tmp_path / "t.parquet"))
    with pytest.raises(CorpusFormatError, match=r"no column 'msd'; the columns found are \['lemma', 'form'\]"):
        parallel.write_splits(parallel.Config.from_dict(cfg), tmp_path / "o")


def test_features_settings_are_checked_and_absent_without_a_features_column():
    base = {"train_file": "t.tsv", "valid_fraction": 0.1}
    with pytest.raises(ValueError, match=r"format text has no columns \(.*features_col\)"):
        parallel.Config.from_dict(
            {"train_src_file": "a.src", "train_tgt_file": "a.tgt", "valid_fraction": 0.1, "features_col": "x"}
        )
    with pytest.raises(ValueError, match="features_sep must be a non-empty string"):
        parallel.Config.from_dict({**base, "features_col": "tags", "features_sep": ""})
    with pytest.raises(ValueError, match="columns must differ"):
        parallel.Config.from_dict({**base, "src_col": "tags", "features_col": "tags"})
    plain = parallel.Config.from_dict(base)
    assert "features_col" not in plain.manifest_params() and "features" not in plain.schema().names


def test_raw_features_are_split_as_the_column_was():
    settings = {"reader": "parallel", "features_col": "tags", "features_sep": "+"}
    assert raw_input.features_splitter(settings)(" V + PST ++") == ["V", "PST"]
    with pytest.raises(ValueError, match="has no features column"):
        raw_input.features_splitter({"reader": "parallel"})


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = tmp_path / "data" / "raw" / "inflect"
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        shutil.copy(FIX / f"{split}.tsv", raw / f"{split}.tsv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ADD = ["--params", "params.yaml", "add", "inflect", "--train", "data/raw/inflect/train.tsv", "--valid",
       "data/raw/inflect/valid.tsv", "--test", "data/raw/inflect/test.tsv", "--src-col", "lemma", "--tgt-col",
       "form", "--tokenizer", "chars", "--metric", "exact_match"]  # fmt: skip


def test_tasks_add_features_col_writes_the_setting_and_prepare_reads_it(project):
    assert tasks.main([*ADD, "--features-col", "tags", "--features-sep", ";"]) == 0
    prepare = yaml.safe_load((project / "params.yaml").read_text())["prepare"]["inflect"]
    assert prepare["features_col"] == "tags" and "features_sep" not in prepare  # the default is not written
    manifests = write_job(prepare_job("inflect", str(project / "params.yaml")), serial_map)
    assert manifests["train"]["params"]["features_col"] == "tags"
    assert [r["features"] for r in split_rows(project / "data/shards/inflect/test")] == [t for _, t, _ in TEST]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--features-col", "msd"], "train.tsv: no column 'msd'; the columns found are ['lemma', 'tags', 'form']"),
        (["--features-col", "lemma"], "columns must differ"),
        (["--features-col", "tags", "--features-sep", ""], "features_sep must be a non-empty string"),
    ],
)
def test_tasks_add_refuses_a_bad_features_column_in_one_line(project, capsys, argv, message):
    before = (project / "params.yaml").read_text()
    with pytest.raises(SystemExit) as exit_:
        tasks.main([*ADD, *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert (project / "params.yaml").read_text() == before
