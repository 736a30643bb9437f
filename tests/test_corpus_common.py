"""The reader contract: quarantine accounting, dedup/leakage removal, ordered parallel maps, paths."""

from __future__ import annotations

import functools
import os

import pytest

from pipeline.corpora.common import (
    CorpusFormatError,
    Quarantined,
    SplitStats,
    write_corpus,
)
from pipeline.parallel import ProcessMap, chunked, serial_map
from pipeline.shards import make_schema, read_split
from tests.conftest import quarantine, shard_row


def test_write_corpus_counts_duplicates_leaks_and_quarantine(tmp_path):
    splits = {
        "train": iter(
            [
                shard_row("t1", "a b", "a"),
                shard_row("t2", "a b", "a"),  # exact duplicate of t1
                shard_row("t3", "a b", "b"),  # same source, other target: kept
                shard_row("t4", "x y", "x"),  # source identical to a test source: leakage
                Quarantined("empty_target", "train.txt:5", {"src": "q"}),
                shard_row("t6", "c d", "c"),
            ]
        ),
        "test": iter([shard_row("e1", "x y", "y"), shard_row("e2", "x y", "y")]),  # eval splits keep duplicates
    }
    stats = {"train": SplitStats()}
    stats["train"].add("too_long", 3)
    manifests = write_corpus(tmp_path, splits, make_schema(), params={"k": 1}, stats=stats)

    train = manifests["train"]
    assert train["rows"] == 3 and train["rows_in"] == 6 and train["rows_quarantined"] == 3
    assert train["quarantine_reasons"] == {"duplicate_pair": 1, "empty_target": 1, "src_in_test": 1}
    assert train["stats"] == {"too_long": 3}
    assert read_split(tmp_path / "train").column("id").to_pylist() == ["t1", "t3", "t6"]
    assert manifests["test"]["rows"] == 2 and manifests["test"]["rows_quarantined"] == 0
    lines = quarantine(tmp_path / "train")
    assert {x["reason"] for x in lines} == {"duplicate_pair", "empty_target", "src_in_test"}
    assert {"where": "train.txt:5", "record": {"src": "q"}} in [x["record"] for x in lines]
    assert list(manifests) == ["train", "test"]  # the caller's order, though test was written first


def test_write_corpus_failure_leaves_no_split(tmp_path):
    def broken():
        yield shard_row("t1", "a", "a")
        raise CorpusFormatError("train.txt", 7, "unclosed <doc>")

    with pytest.raises(CorpusFormatError, match=r"train\.txt:7: unclosed <doc>"):
        write_corpus(tmp_path, {"train": broken()}, make_schema())
    assert not (tmp_path / "train").exists()
    assert os.listdir(tmp_path) == []  # no temp dirs left behind


def _square_all(offset: int, chunk: list[int]) -> list[int]:
    return [x * x + offset for x in chunk]


def test_process_map_keeps_order_and_equals_serial():
    chunks = list(chunked(range(1000), 37))
    fn = functools.partial(_square_all, 1)
    expected = list(serial_map(fn, chunks))
    with ProcessMap(workers=2, max_in_flight=3) as pmap:
        assert list(pmap(fn, chunks)) == expected
    assert sum(len(c) for c in chunks) == 1000 and len(chunks[-1]) == 1000 % 37


def test_resolve_paths_relative_to_raw_root(tmp_path):
    from flows.prepare import resolve_paths

    got = resolve_paths(
        {
            "docs_dir": "a",
            "map_file": "/abs/m.txt",
            "test_files": ["x", "y"],
            "min_count": 5,
            "dict_file": None,
            "cache_dir": "data/cache",
        },
        tmp_path,
        tmp_path / "project",
    )
    assert got == {
        "docs_dir": str(tmp_path / "a"),
        "map_file": "/abs/m.txt",
        "test_files": [str(tmp_path / "x"), str(tmp_path / "y")],
        "min_count": 5,
        "dict_file": None,
        "cache_dir": str(tmp_path / "project" / "data/cache"),
    }


def test_unknown_reader_is_named():
    from pipeline.corpora import reader_module

    with pytest.raises(ValueError, match=r"unknown reader 'nope'.*copynet_rules"):
        reader_module("nope")


def test_corpus_format_error_survives_a_process_boundary():
    import pickle

    err = pickle.loads(pickle.dumps(CorpusFormatError("a/b.txt", 3, "unclosed <seg>")))
    assert isinstance(err, CorpusFormatError) and str(err) == "a/b.txt:3: unclosed <seg>" and err.line == 3
