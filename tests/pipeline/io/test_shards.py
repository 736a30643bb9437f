"""Tests for pipeline.io.shards: manifest accounting, round trip, atomicity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.io import shards
from pipeline.io.files import write_json_atomic, write_text_atomic
from pipeline.io.shards import ShardWriter, make_schema, read_manifest, read_split
from tests.helpers import REPO, quarantine

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


# --------------------------------------------------------------------------- #
# Temp dirs left by a killed writer
# --------------------------------------------------------------------------- #

KILLED_WRITER = """
import sys, time
from pipeline.io.shards import ShardWriter, make_schema
w = ShardWriter(sys.argv[1], make_schema(), rows_per_part=1)
w.write([{"id": "a", "src": ["x"], "tgt": ["y"], "refs": [["y"]]}] * 3)
print(w.tmp_dir, flush=True)
time.sleep(60)
"""


def _killed_writer(out: Path) -> Path:
    """Run a writer for ``out`` in a child process, SIGKILL it mid-write; its temp dir is left."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        tmp = Path(proc.stdout.readline().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    assert tmp.is_dir() and len(list(tmp.glob("part-*"))) == 3  # what a killed prepare leaves
    return tmp


def test_new_writer_removes_what_a_killed_writer_left(tmp_path: Path) -> None:
    out = tmp_path / "train"
    _write_previous(out)  # a published split, as DVC tracks it
    dead = _killed_writer(out)
    assert dead.parent == tmp_path and dead.name.startswith(".train.tmp-")
    # an interrupted swap's old copy, other splits' temp dirs, look-alikes and other files stay apart
    old = tmp_path / ".train.old-0123abcd"
    other_split = tmp_path / ".valid.tmp-abcd1234"
    look_alikes = [tmp_path / ".train.tmp-short", tmp_path / ".train.tmp-abcd1234x", tmp_path / "notes.tmp-abcd1234"]
    for d in (old, other_split, *look_alikes):
        d.mkdir()
    (tmp_path / ".train.tmp-file1234").write_text("a file, not a writer's dir")

    with ShardWriter(out, SCHEMA) as live:
        assert live.removed_stale == [old, dead]  # the dead writer's dir (its lock is free), the old copy
        assert not dead.exists() and not old.exists()
        with ShardWriter(out, SCHEMA) as w:  # a second writer of the same split while one lives
            assert w.removed_stale == []  # the live writer's dir is locked: left alone
            assert live.tmp_dir.is_dir()
            w.write(make_rows(2))
        assert live.tmp_dir.is_dir()
        live.write(make_rows(1))
    assert read_split(out).column("id").to_pylist() == ["ex0"]  # the live writer published last
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "train",
            ".train.tmp-file1234",
            ".valid.tmp-abcd1234",
            ".train.tmp-short",
            ".train.tmp-abcd1234x",
            "notes.tmp-abcd1234",
        ]
    )


def test_old_copy_kept_while_its_split_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "train"
    old = tmp_path / ".train.old-0123abcd"  # killed between moving train aside and moving the new one in
    old.mkdir()
    assert shards.remove_stale_temp_dirs(out) == []  # it holds the last published split
    assert old.is_dir()
    out.mkdir()
    assert shards.remove_stale_temp_dirs(out) == [old]


def test_finish_then_publish_or_abort(tmp_path: Path) -> None:
    w = ShardWriter(tmp_path / "a", SCHEMA)
    w.write(make_rows(2))
    m = w.finish()
    assert m["rows"] == 2 and not (tmp_path / "a").exists() and (w.tmp_dir / "manifest.json").is_file()
    with pytest.raises(RuntimeError, match="finished"):
        w.write(make_rows(1))
    assert w.publish() == m == read_manifest(tmp_path / "a")
    assert w.close() == m  # idempotent
    v = ShardWriter(tmp_path / "b", SCHEMA)
    v.finish()
    v.abort()
    with pytest.raises(RuntimeError, match="closed or aborted"):
        v.publish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_atomic_writes_get_the_umask_mode_not_0600(tmp_path):
    """mkstemp/mkdtemp create 0600/0700 entries; what is published has the mode open()/mkdir() give."""
    import os
    import stat

    from pipeline.io.files import UMASK, write_text_atomic
    from pipeline.io.shards import ShardWriter, make_schema

    write_text_atomic(tmp_path / "f.txt", "x")
    assert stat.S_IMODE(os.stat(tmp_path / "f.txt").st_mode) == 0o666 & ~UMASK != 0o600  # (umask 022: 0644)
    with ShardWriter(tmp_path / "split", make_schema()) as writer:
        writer.write([{"id": "0", "src": ["a"], "tgt": ["b"], "refs": [["b"]]}])
    assert stat.S_IMODE(os.stat(tmp_path / "split").st_mode) == 0o777 & ~UMASK
