"""Tests for pipeline.vocab.vocabulary."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.vocab.vocabulary import BOS, EOS, PAD, SPECIALS, UNK, Vocab, build_vocab, count_tokens

COUNTS = {"b": 5, "a": 5, "c": 7, "d": 1, "e": 2, "f": 2}


def test_specials_ids() -> None:
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert SPECIALS == ("<pad>", "<unk>", "<s>", "</s>")


def test_ordering_count_desc_then_token() -> None:
    v = build_vocab(COUNTS)
    assert v.itos == [*SPECIALS, "c", "a", "b", "e", "f", "d"]
    assert v.counts == [0, 0, 0, 0, 7, 5, 5, 2, 2, 1]
    assert [v.stoi[t] for t in v.itos] == list(range(10))
    assert len(v) == 10
    # insertion order of the counts dict does not matter
    assert build_vocab(dict(reversed(list(COUNTS.items())))) == v


def test_max_size_includes_specials_and_min_count() -> None:
    assert build_vocab(COUNTS, max_size=6).itos == [*SPECIALS, "c", "a"]
    assert build_vocab(COUNTS, max_size=4).itos == list(SPECIALS)
    assert build_vocab(COUNTS, min_count=2).itos == [*SPECIALS, "c", "a", "b", "e", "f"]
    assert build_vocab(COUNTS, max_size=7, min_count=5).itos == [*SPECIALS, "c", "a", "b"]
    assert build_vocab(COUNTS, max_size=100, min_count=6).itos == [*SPECIALS, "c"]
    with pytest.raises(ValueError, match="max_size=3"):
        build_vocab(COUNTS, max_size=3)


def test_specials_in_counts_are_not_duplicated() -> None:
    v = build_vocab({"<unk>": 9, "</s>": 4, "z": 1})
    assert v.itos == [*SPECIALS, "z"]
    assert v.counts == [0, 0, 0, 0, 1]


def test_lookup_and_encode() -> None:
    v = build_vocab(COUNTS)
    assert v.id("c") == 4
    assert v.id("zzz") == UNK
    assert v.encode(["a", "nope", "d", "</s>"]) == [5, UNK, 9, EOS]
    assert v.token(4) == "c"
    assert "a" in v and "nope" not in v
    with pytest.raises(IndexError):
        v.token(10)


def test_save_load_round_trip(tmp_path: Path) -> None:
    v = build_vocab({**COUNTS, "naïve": 3, "with space": 3})
    path = tmp_path / "vocab" / "src.txt"
    v.save(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["<pad>\t0", "<unk>\t0", "<s>\t0", "</s>\t0", "c\t7"]
    assert len(lines) == len(v)
    loaded = Vocab.load(path)
    assert loaded == v
    assert loaded.stoi == v.stoi
    assert loaded.encode(["naïve", "with space"]) == v.encode(["naïve", "with space"])
    assert [p.name for p in path.parent.iterdir()] == ["src.txt"]


def test_save_rejects_unstorable_token(tmp_path: Path) -> None:
    v = build_vocab({"bad\ttoken": 1})
    with pytest.raises(ValueError, match="cannot be stored"):
        v.save(tmp_path / "v.txt")
    assert not (tmp_path / "v.txt").exists()


GOOD_HEAD = "<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n"


@pytest.mark.parametrize(
    "text, line, message",
    [
        (GOOD_HEAD + "a\t3\nb 2\n", 6, "expected 'token<TAB>count'"),
        (GOOD_HEAD + "a\t3\nb\t2\t1\n", 6, "expected 'token<TAB>count'"),
        (GOOD_HEAD + "a\tmany\n", 5, "count is not a non-negative integer"),
        (GOOD_HEAD + "a\t-1\n", 5, "count is not a non-negative integer"),
        (GOOD_HEAD + "a\t3\n\nb\t1\n", 6, "expected 'token<TAB>count'"),
        (GOOD_HEAD + "a\t3\na\t1\n", 6, "duplicate token \\(first on line 5\\)"),
        ("<pad>\t0\n<s>\t0\n<unk>\t0\n</s>\t0\n", 2, "must be the special token '<unk>'"),
        ("a\t5\n" + GOOD_HEAD, 1, "must be the special token '<pad>'"),
        ("<pad>\t0\n<unk>\t0\n", 3, "file ends before the specials"),
    ],
)
def test_load_malformed_names_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "v.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"v.txt:{line}: {message}"):
        Vocab.load(path)


def test_count_tokens_list_and_nested_columns() -> None:
    table = pa.table(
        {
            "src": pa.array([["a", "b", "a"], [], ["c", None, "a"], None], type=pa.list_(pa.string())),
            "refs": pa.array([[["a"], ["b", "b"]], [], [["c"]], [[]]], type=pa.list_(pa.list_(pa.string()))),
        }
    )
    assert count_tokens(table, "src") == {"a": 3, "b": 1, "c": 1}
    assert count_tokens(table, "refs") == {"a": 1, "b": 2, "c": 1}
    assert count_tokens(table.slice(1, 1), "src") == {}
    with pytest.raises(KeyError, match="tgt"):
        count_tokens(table, "tgt")


def test_count_then_build_end_to_end(tmp_path: Path) -> None:
    table = pa.table({"tgt": [["x", "y", "x"], ["y", "x", "z"]]})
    v = build_vocab(count_tokens(table, "tgt"))
    assert v.itos == [*SPECIALS, "x", "y", "z"]
    assert v.counts[4:] == [3, 2, 1]
    assert v.encode(["z", "x", "w"]) == [6, 4, UNK]
