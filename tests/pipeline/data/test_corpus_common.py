"""The reader contract: quarantine accounting, dedup/leakage removal, ordered parallel maps, paths."""

from __future__ import annotations

import functools
import os

import pytest

from pipeline.data.corpora.common import CorpusFormatError, EmptySplitError, Quarantined, SplitStats, write_corpus
from pipeline.data.corpora.inputs import TextLimits, count_lines, open_input, read_input, resolve_input, row_name
from pipeline.io.parallel import ProcessMap, chunked, serial_map
from pipeline.io.shards import make_schema, read_split
from tests.helpers import quarantine, shard_row


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
    from pipeline.data.prepare import resolve_paths

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
    from pipeline.data.corpora import reader_module

    with pytest.raises(ValueError, match=r"unknown reader 'nope'.*copynet_rules"):
        reader_module("nope")


def test_corpus_format_error_survives_a_process_boundary():
    import pickle

    err = pickle.loads(pickle.dumps(CorpusFormatError("a/b.txt", 3, "unclosed <seg>")))
    assert isinstance(err, CorpusFormatError) and str(err) == "a/b.txt:3: unclosed <seg>" and err.line == 3


# --------------------------------------------------------------------------- #
# Empty splits, all-or-nothing publishing, stale temp dirs
# --------------------------------------------------------------------------- #


def test_empty_train_split_is_an_error_naming_its_files_and_nothing_is_published(tmp_path):
    out = tmp_path / "out"
    write_corpus(
        out, {"train": iter([shard_row("t0", "old", "o")]), "test": iter([shard_row("e0", "p", "q")])}, make_schema()
    )
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    splits = {
        "train": iter([Quarantined("nul_byte", "a.txt:1", {}), Quarantined("invalid_utf8", "b.txt:2", {})]),
        "test": iter([shard_row("e1", "x y", "y")]),  # written first, finished, then discarded
    }
    with pytest.raises(EmptySplitError) as err:
        write_corpus(out, splits, make_schema(), sources={"train": ["a.txt", "b.txt"]})
    assert str(err.value) == (
        "a.txt, b.txt: the train split would have no rows: all 2 records were quarantined "
        "(invalid_utf8 1, nul_byte 1); first: a.txt:1 (nul_byte), b.txt:2 (invalid_utf8)"
    )
    assert isinstance(err.value, CorpusFormatError) and err.value.paths == ["a.txt", "b.txt"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # the old test split stays
    assert sorted(p.name for p in out.iterdir()) == ["test", "train"]  # no temp dirs

    with pytest.raises(EmptySplitError, match=r"^test\.txt: the test split would have no rows: no record reached it"):
        write_corpus(tmp_path / "new", {"test": iter([])}, make_schema(), sources={"test": ["test.txt"]})
    assert not (tmp_path / "new").exists()  # made for the run, removed again


def test_optional_split_may_be_empty(tmp_path):
    splits = {"train": iter([shard_row("t1", "a", "b")]), "valid": iter([])}
    manifests = write_corpus(tmp_path, splits, make_schema(), optional_splits=("valid",))
    assert (manifests["valid"]["rows"], manifests["train"]["rows"]) == (0, 1)


def test_empty_split_error_survives_a_process_boundary():
    import pickle

    err = pickle.loads(pickle.dumps(EmptySplitError("train", ["a.txt"], "no rows")))
    assert isinstance(err, EmptySplitError) and str(err) == "a.txt: no rows" and err.split == "train"


def test_write_corpus_removes_a_dead_writers_temp_dir(tmp_path):
    stale = tmp_path / ".train.tmp-abcd1234"  # nobody holds its lock: a killed run's
    stale.mkdir()
    (stale / "part-00000.arrow").write_bytes(b"half")
    write_corpus(tmp_path, {"train": iter([shard_row("t1", "a", "b")])}, make_schema())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]


# --------------------------------------------------------------------------- #
# Input files: gzip, limits
# --------------------------------------------------------------------------- #


def test_open_input_reads_gzip_by_name_or_magic_and_names_the_file_when_broken(tmp_path):
    import gzip

    text = b"".join(b"line %d\n" % i for i in range(1, 20001))
    (tmp_path / "plain.txt").write_bytes(text)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "no_suffix").write_bytes(gzip.compress(text))  # gzip data under a plain name
    for name in ("plain.txt", "a.txt.gz", "no_suffix"):
        with open_input(tmp_path / name) as fh:
            assert list(fh) == text.splitlines(keepends=True)
        assert read_input(tmp_path / name) == text
        assert count_lines(tmp_path / name) == 20000

    data = gzip.compress(text)
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusFormatError) as err:
        with open_input(tmp_path / "cut.txt.gz") as fh:
            for _ in fh:
                pass
    assert err.value.path == str(tmp_path / "cut.txt.gz") and 1 < err.value.line < 20000
    assert "truncated or corrupt gzip data (EOFError" in str(err.value)
    with pytest.raises(CorpusFormatError, match=r"cut\.txt\.gz:\d+: truncated or corrupt gzip data"):
        count_lines(tmp_path / "cut.txt.gz")
    (tmp_path / "fake.gz").write_bytes(b"plain text named .gz\n")
    with pytest.raises(CorpusFormatError, match=r"fake\.gz:1: not valid gzip data \(BadGzipFile"):
        read_input(tmp_path / "fake.gz")

    assert resolve_input(tmp_path / "a.txt") == tmp_path / "a.txt.gz"  # only the gzipped one exists
    assert resolve_input(tmp_path / "plain.txt") == tmp_path / "plain.txt"
    assert resolve_input(tmp_path / "none.txt") == tmp_path / "none.txt"
    assert (row_name("a.txt.gz"), row_name("a.txt")) == ("a.txt", "a.txt")


def test_text_limits_rules_in_order():
    limits = TextLimits(max_line_chars=20, max_token_chars=5)
    assert limits.problem("short words only") is None
    assert limits.problem("a\x00b") == ("nul_byte", {"char_offset": 1})
    assert limits.problem("x" * 21) == ("line_too_long", {"chars": 21, "max_line_chars": 20})
    assert limits.problem("ok abcdef ok") == (
        "token_too_long",
        {"token_chars": 6, "max_token_chars": 5, "token_head": "abcdef"},
    )
    assert limits.line_problem("abcdefgh") is None  # no token rule
    bad = limits.check_lines("fine\r\nline two\r\nsix666 x\n", "f.txt", 10)
    assert (bad.reason, bad.where, bad.record["line"]) == ("token_too_long", "f.txt:12", "six666 x")
    assert limits.check_lines("fine\nalso fine\n", "f.txt", 1) is None
    for bad_value in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_line_chars must be an integer >= 1"):
            TextLimits(max_line_chars=bad_value)
