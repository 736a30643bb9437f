"""Tests for pipeline.shards: manifest accounting, round trip, atomicity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline import shards
from pipeline.shards import (
    ShardWriter,
    make_schema,
    read_manifest,
    read_split,
    write_json_atomic,
    write_text_atomic,
)
from tests.conftest import quarantine

SCHEMA = make_schema([pa.field("n", pa.int32())])


def make_rows(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "id": f"ex{i}",
            "src": [f"a{i}", "b"],
            "tgt": [f"c{i}"] * (i % 3),
            "refs": [[f"c{i}"], ["d", "e"]],
            "n": i,
        }
        for i in range(start, start + n)
    ]


def leftovers(parent: Path) -> list[str]:
    """Hidden temp/old dirs and partial files anywhere under ``parent``."""
    return sorted(
        str(p.relative_to(parent)) for p in parent.rglob("*") if p.name.startswith(".") or p.name.endswith(".partial")
    )


def test_manifest_counts_and_parts(tmp_path: Path) -> None:
    out = tmp_path / "train"
    with ShardWriter(out, SCHEMA, rows_per_part=4, params={"seed": 7}) as w:
        w.write(make_rows(3))
        w.quarantine({"raw": "x"}, "empty target")
        w.write(make_rows(7, start=3))  # 10 rows total -> parts of 4, 4, 2
        w.quarantine({"raw": "y"}, "empty target")
        w.quarantine({"raw": "z"}, "too long")
    m = w.close()  # second close returns the same manifest

    assert m == read_manifest(out)
    assert m["rows"] == 10
    assert m["rows_quarantined"] == 3
    assert m["rows_in"] == 13 == m["rows"] + m["rows_quarantined"]
    assert m["quarantine_reasons"] == {"empty target": 2, "too long": 1}
    assert [p["rows"] for p in m["parts"]] == [4, 4, 2]
    assert [p["file"] for p in m["parts"]] == [
        "part-00000.arrow",
        "part-00001.arrow",
        "part-00002.arrow",
    ]
    assert m["params"] == {"seed": 7}
    assert m["schema"] == str(SCHEMA)
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "part-00000.arrow",
        "part-00001.arrow",
        "part-00002.arrow",
        "quarantine.jsonl",
    ]
    q = quarantine(out)
    assert q == [
        {"reason": "empty target", "record": {"raw": "x"}},
        {"reason": "empty target", "record": {"raw": "y"}},
        {"reason": "too long", "record": {"raw": "z"}},
    ]
    assert leftovers(tmp_path) == []


def test_sha256_matches_files(tmp_path: Path) -> None:
    out = tmp_path / "s"
    with ShardWriter(out, SCHEMA, rows_per_part=3) as w:
        w.write(make_rows(5))
    m = read_manifest(out)
    hashes = []
    for part in m["parts"]:
        digest = hashlib.sha256((out / part["file"]).read_bytes()).hexdigest()
        assert part["sha256"] == digest
        hashes.append(digest)
    expected = hashlib.sha256("".join(h + "\n" for h in hashes).encode()).hexdigest()
    assert m["content_sha256"] == expected


def test_round_trip(tmp_path: Path) -> None:
    rows = make_rows(11)
    out = tmp_path / "s"
    with ShardWriter(out, SCHEMA, rows_per_part=4) as w:
        w.write(rows[:5])
        w.write(rows[5:])
    table = read_split(out)
    assert table.schema == SCHEMA
    assert table.num_rows == 11
    assert table.to_pylist() == rows


def test_empty_split_keeps_schema(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    with ShardWriter(out, SCHEMA) as w:
        w.quarantine({"bad": 1}, "unparseable")
    m = read_manifest(out)
    assert (m["rows"], m["rows_in"], m["rows_quarantined"]) == (0, 1, 1)
    assert [p["rows"] for p in m["parts"]] == [0]
    table = read_split(out)
    assert table.num_rows == 0 and table.schema == SCHEMA


def test_quarantine_file_always_written(tmp_path: Path) -> None:
    out = tmp_path / "s"
    with ShardWriter(out, SCHEMA) as w:
        w.write(make_rows(2))
    assert (out / "quarantine.jsonl").read_text() == ""
    assert read_manifest(out)["quarantine_reasons"] == {}


def test_identical_input_gives_identical_bytes(tmp_path: Path) -> None:
    for name in ("a", "b"):
        with ShardWriter(tmp_path / name, SCHEMA, rows_per_part=4, params={"k": 1}) as w:
            w.write(make_rows(9))
    for f in sorted(p.name for p in (tmp_path / "a").iterdir()):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_rewrite_replaces_previous_split(tmp_path: Path) -> None:
    out = tmp_path / "s"
    with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
        w.write(make_rows(5))  # 3 parts
    with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
        w.write(make_rows(1, start=100))  # 1 part
    assert sorted(p.name for p in out.glob("part-*")) == ["part-00000.arrow"]
    assert read_split(out).column("id").to_pylist() == ["ex100"]
    assert leftovers(tmp_path) == []


def _write_previous(out: Path) -> dict[str, bytes]:
    with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
        w.write(make_rows(3))
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_exception_in_with_block_leaves_previous_split(tmp_path: Path) -> None:
    out = tmp_path / "s"
    before = _write_previous(out)
    with pytest.raises(RuntimeError, match="boom"):
        with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
            w.write(make_rows(5, start=50))  # two full parts already on disk (in tmp)
            assert len(list(w.tmp_dir.glob("part-*"))) == 2
            raise RuntimeError("boom")
    assert not w.tmp_dir.exists()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []


def test_exception_without_previous_split_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "s"
    with pytest.raises(RuntimeError):
        with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
            w.write(make_rows(3))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError, match=str(out)):
        read_split(out)


def test_failure_during_part_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "s"
    before = _write_previous(out)
    real_new_file = shards.pa.ipc.new_file
    partials: list[Path] = []

    class ExplodingWriter:
        """Writes the schema header for real, then fails mid-part."""

        def __init__(self, sink, schema):
            self._inner = real_new_file(sink, schema)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write_table(self, table):
            partials.extend(p for p in tmp_path.rglob("*.partial"))
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        with ShardWriter(out, SCHEMA, rows_per_part=2) as w:
            w.write(make_rows(2))  # first part succeeds
            monkeypatch.setattr(shards.pa.ipc, "new_file", ExplodingWriter)
            w.write(make_rows(2, start=2))  # second part fails mid-write
    assert partials, "the failing write should have had a partial file on disk"
    assert not any(p.exists() for p in partials)
    assert not w.tmp_dir.exists()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []


def test_failure_when_writer_constructor_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "s"

    def refuse(sink, schema):
        raise OSError("cannot open")

    monkeypatch.setattr(shards.pa.ipc, "new_file", refuse)
    w = ShardWriter(out, SCHEMA, rows_per_part=10)
    w.write(make_rows(3))  # buffered only
    with pytest.raises(OSError, match="cannot open"):
        w.close()  # flush fails -> aborted
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="closed or aborted"):
        w.write(make_rows(1))


def test_schema_mismatch_rejected(tmp_path: Path) -> None:
    rows = make_rows(1)
    del rows[0]["n"]
    with pytest.raises(ValueError, match="missing \\['n'\\]"):
        with ShardWriter(tmp_path / "s", SCHEMA) as w:
            w.write(rows)
    assert list(tmp_path.iterdir()) == []


def test_unclosed_writer_is_cleaned_up(tmp_path: Path) -> None:
    w = ShardWriter(tmp_path / "s", SCHEMA, rows_per_part=1)
    w.write(make_rows(2))
    tmp_dir = w.tmp_dir
    assert tmp_dir.exists()
    del w  # CPython: refcount drops to zero, finalizer runs
    assert not tmp_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_read_split_without_manifest(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    with pytest.raises(FileNotFoundError, match="nothing"):
        read_split(tmp_path / "nothing")


def test_make_schema() -> None:
    assert SCHEMA.names == ["id", "src", "tgt", "refs", "n"]
    assert SCHEMA.field("refs").type == pa.list_(pa.list_(pa.string()))
    assert make_schema().names == ["id", "src", "tgt", "refs"]
    with pytest.raises(ValueError, match="duplicate"):
        make_schema([pa.field("id", pa.string())])


def test_atomic_helpers(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert path.read_text().endswith("\n")
    write_text_atomic(path, "hello\n")
    assert path.read_text() == "hello\n"
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]

    class Unserializable:
        pass

    with pytest.raises(TypeError):
        write_json_atomic(path, {"x": Unserializable()})
    assert path.read_text() == "hello\n"
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]


def test_atomic_write_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.txt"
    write_text_atomic(path, "old\n")

    def fail_replace(src, dst):
        assert Path(src).read_text() == "new\n"  # the temp file was complete
        raise OSError("rename failed")

    monkeypatch.setattr(shards.os, "replace", fail_replace)
    with pytest.raises(OSError, match="rename failed"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
