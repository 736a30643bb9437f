"""Hostile and careless input on the own-data path (the ``parallel`` reader that ``tasks add`` sets up,
and ``predict``), case by case as docs/guarantees.md lists them: a record that is broken is
quarantined at ``file:line`` and the rest kept; a file that is broken (or in the wrong encoding, or
a split that would be empty) is one error naming the file and what to do, with nothing written;
formats' own variants (CRLF, a BOM, RFC 4180 quoting) read exactly as the plain file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.data.corpora import parallel
from pipeline.data.corpora.common import CorpusFormatError, EmptySplitError
from pipeline.io.parallel import serial_map
from tests.helpers import TASK

GOOD = [(f"question {i} x", f"answer {i}") for i in range(20)]
EVAL = {"valid": [(f"valid q {i}", f"valid a {i}") for i in range(5)], "test": [(f"test q {i}", f"test a {i}") for i in range(5)]}  # fmt: skip


def tsv(pairs, header="question\tanswer") -> bytes:
    return (header + "\n" + "".join(f"{s}\t{t}\n" for s, t in pairs)).encode()


def prepare(tmp_path: Path, train: bytes | None, name: str = "train.tsv", **settings) -> dict:
    """Write train (``name``) and the valid/test TSVs, run the reader into tmp_path/out; the manifests."""
    if train is not None:
        (tmp_path / name).write_bytes(train)
    for split, pairs in EVAL.items():
        (tmp_path / f"{split}.tsv").write_bytes(tsv(pairs))
    cfg = parallel.Config.from_dict(
        {"train_file": str(tmp_path / name), "valid_file": str(tmp_path / "valid.tsv"),
         "test_file": str(tmp_path / "test.tsv"), "src_col": "question", "tgt_col": "answer", **settings}
    )  # fmt: skip
    return parallel.write_splits(cfg, tmp_path / "out", serial_map)


def quarantined(tmp_path: Path) -> list[tuple[str, str]]:
    lines = (tmp_path / "out" / "train" / "quarantine.jsonl").read_text().splitlines()
    return [(r["reason"], r["record"]["where"]) for r in map(json.loads, lines)]


def parquet(path: Path, columns: dict) -> bytes:
    pq.write_table(pa.table(columns), path)
    return path.read_bytes()


# (id, train file name, its bytes, the quarantined records (reason, file:line)) -- the other 20 rows kept
QUARANTINE_CASES = [
    ("ragged_rows", "train.tsv", tsv([*GOOD[:10], ("a\tb", "c"), *GOOD[10:]]) + b"lonely\n",
     [("bad_field_count", "train.tsv:12"), ("bad_field_count", "train.tsv:23")]),
    ("latin1_line", "train.tsv", tsv([*GOOD, ("caf\xe9", "x")]).replace(b"caf\xc3\xa9", b"caf\xe9"),
     [("invalid_utf8", "train.tsv:22")]),
    ("100k_character_line", "train.tsv", tsv([*GOOD, ("x" * 100_000, "y")]), [("line_too_long", "train.tsv:22")]),
    ("100k_character_token", "train.tsv", tsv([*GOOD, ("q " + "y" * 9_000, "z")]), [("token_too_long", "train.tsv:22")]),
    ("empty_sides", "train.tsv", tsv([*GOOD, ("", "answer only"), ("question only", ""), ("  ", " ")]),
     [("empty_src", "train.tsv:22"), ("empty_tgt", "train.tsv:23"), ("empty_line", "train.tsv:24")]),
    ("nul_byte", "train.tsv", tsv([*GOOD, ("a\x00b", "c")]), [("nul_byte", "train.tsv:22")]),
    ("jsonl_broken_lines", "train.jsonl",
     "".join(json.dumps({"question": s, "answer": t}) + "\n" for s, t in GOOD).encode()
     + b'{"question": "x", "answer"\n[1, 2]\n{"question": 5, "answer": "a"}\n{"answer": "a"}\n',
     [("bad_json", "train.jsonl:21"), ("bad_json", "train.jsonl:22"), ("bad_field_type", "train.jsonl:23"),
      ("missing_field", "train.jsonl:24")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "data", "expected"), [c[1:] for c in QUARANTINE_CASES], ids=[c[0] for c in QUARANTINE_CASES]
)
def test_a_broken_record_is_quarantined_at_its_line_and_the_rest_kept(tmp_path, name, data, expected):
    manifests = prepare(tmp_path, data, name)
    assert manifests["train"]["rows"] == 20
    assert manifests["train"]["rows_in"] == 20 + len(expected)
    assert quarantined(tmp_path) == expected


def test_parquet_nulls_are_empty_texts_quarantined_with_their_row(tmp_path):
    questions = [s for s, _ in GOOD] + [None]
    data = parquet(tmp_path / "t.parquet", {"question": questions, "answer": [t for _, t in GOOD] + ["a"]})
    manifests = prepare(tmp_path, data, "train.parquet")
    assert manifests["train"]["rows"] == 20
    assert quarantined(tmp_path) == [("empty_src", "train.parquet:21")]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("train.tsv", tsv(GOOD).replace(b"\n", b"\r\n")),
        ("train.tsv", b"\xef\xbb\xbf" + tsv(GOOD)),
        ("train.csv", b"question,answer\n" + b"".join(f'"{s}","{t}"\n'.encode() for s, t in GOOD)),
    ],
    ids=["crlf", "bom", "quoted_csv"],
)
def test_format_variants_read_exactly_as_the_plain_file(tmp_path, name, data):
    (tmp_path / "plain").mkdir()
    plain = prepare(tmp_path / "plain", tsv(GOOD))
    variant = prepare(tmp_path, data, name)
    assert variant["train"]["rows"] == plain["train"]["rows"] == 20
    assert quarantined(tmp_path) == []

    def pairs(root):  # (src, tgt) of every row, in order: no \r, no BOM, no quote left in a token
        parts = sorted((root / "out" / "train").glob("part-*.arrow"))
        return [(r["src"], r["tgt"]) for part in parts for r in pa.ipc.open_file(part).read_all().to_pylist()]

    assert pairs(tmp_path) == pairs(tmp_path / "plain")
    if name == "train.tsv":  # the same file name: the same rows to the byte, ids included
        assert variant["train"]["content_sha256"] == plain["train"]["content_sha256"]


def test_quoted_csv_fields_keep_delimiters_quotes_and_line_breaks(tmp_path):
    data = b'question,answer\n"a, b ""c""",x\n"two\nlines",y\n' + b"".join(f"{s},{t}\n".encode() for s, t in GOOD)
    prepare(tmp_path, data, "train.csv")
    rows = pa.ipc.open_file(next((tmp_path / "out" / "train").glob("part-*.arrow"))).read_all().to_pylist()
    assert rows[0]["src"] == ["a,", "b", '"c"'] and rows[0]["id"] == "train.csv:2"
    assert rows[1]["src"] == ["two", "lines"] and rows[1]["id"] == "train.csv:3"  # the line the record starts on


ERROR_CASES = [
    ("missing_file", None, "train.tsv", {}, FileNotFoundError, "train.tsv"),
    ("missing_column", tsv(GOOD, "query\tanswer"), "train.tsv", {}, CorpusFormatError,
     "no column 'question'; the columns found are ['query', 'answer']"),
    ("header_names_a_column_twice", tsv([(s, t + "\tz") for s, t in GOOD], "question\tanswer\tquestion"), "train.tsv", {},
     CorpusFormatError, "the header names column 'question' 2 times"),
    ("utf16", tsv(GOOD).decode().encode("utf-16"), "train.tsv", {}, CorpusFormatError,
     "the file is UTF-16 (its byte-order mark), not UTF-8"),
    ("latin1_file", tsv([(f"caf\xe9 {i}", f"th\xe9 {i}") for i in range(20)]).decode().encode("latin-1"), "train.tsv",
     {}, EmptySplitError, "(invalid_utf8): the file is not UTF-8 (Latin-1? convert it"),
    ("parquet_integers", "ints", "train.parquet", {}, CorpusFormatError, "column 'question' holds int64, not strings"),
    ("identical_splits", tsv(EVAL["valid"]), "train.tsv", {}, EmptySplitError,
     "all 5 records were quarantined (src_in_valid 5): every source is also in the valid split"),
    ("csv_open_quote", b'question,answer\n"a,b\n', "train.csv", {}, CorpusFormatError, "train.csv:2: malformed CSV"),
    ("truncated_gz", "gz", "train.tsv.gz", {}, CorpusFormatError, "train.tsv.gz"),
    ("empty_file", b"", "train.tsv", {}, CorpusFormatError, "train.tsv"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "name", "settings", "error", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_a_broken_file_is_one_error_naming_it_and_nothing_is_written(tmp_path, data, name, settings, error, message):
    if data == "ints":
        data = parquet(tmp_path / "t.parquet", {"question": list(range(20)), "answer": [t for _, t in GOOD]})
    elif data == "gz":
        import gzip

        data = gzip.compress(tsv(GOOD))[:-40]
    with pytest.raises(error) as raised:
        prepare(tmp_path, data, name, **settings)
    assert message in str(raised.value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch left


# ---------------------------------------------------------------------------------------------
# predict on empty, binary, huge or missing input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "code", "output", "message"),
    [
        (b"", 0, "", ""),
        (b"\n\n", 0, "\n\n", ""),
        (bytes(range(256)) * 4, 2, None, "copyseq predict: error: line 2: not valid UTF-8 (byte 0x80 at byte 118)\n"),
        (b"a " + b"s1 " * 350_000 + b"b\n", 2, None,
         "copyseq predict: error: line 1: 1050003 characters, over the limit of 20000 (serving.max_input_chars)\n"),
        (None, 2, None, "copyseq predict: error: --input {input}: no such file\n"),
    ],
    ids=["empty", "blank_lines", "binary", "1MB_line", "missing"],
)  # fmt: skip
def test_predict_on_empty_binary_huge_or_missing_input(toy_project, tmp_path, capsys, content, code, output, message):
    from pipeline.serving.predict import main

    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    if content is not None:
        inp.write_bytes(content)
    args = ["--checkpoint", str(toy_project / "data/checkpoints" / TASK / "copynet"), "--task", TASK,
            "--params", str(toy_project / "params.yaml"), "--vocab", str(toy_project / "data/vocab" / TASK),
            "--input", str(inp), "--output", str(out)]  # fmt: skip
    capsys.readouterr()
    assert main(args) == code
    assert capsys.readouterr().err == message.format(input=inp)
    assert (out.read_text() if out.exists() else None) == output  # a refusal writes nothing
