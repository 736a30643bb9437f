"""The parallel reader (your own corpus): every format gives the same rows, references from columns
and lists, hash splits that keep a source in one split, the tokenisers and their raw-text twins,
quarantine reasons at file:line and malformed files as errors naming file and line."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.data.corpora import parallel, raw_input
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.parallel import serial_map
from tests.helpers import FIXTURES, quarantine, split_rows

FIX = FIXTURES / "parallel"
TRAIN_SRC = [
    ["Where", "is", "Anna", "Smith", "?"],
    ["Call", "me", "at", "555", "now"],
    ["Is", "order", "42", "late", "?"],
]
TRAIN_TGT = [
    ["Anna", "Smith", "is", "in", "Paris", "."],
    ["I", "call", "555", "now", "."],
    ["Order", "42", "arrives", "today", "."],
]
ALT = [["She", "is", "in", "Paris", "."], None, ["Yes", ",", "order", "42", "is", "late", "."]]


def run(tmp_path: Path, **settings) -> tuple[dict, dict]:
    """write_splits on ``settings`` (file names relative to the fixtures); manifests and rows by split."""
    for key, value in list(settings.items()):
        if key.endswith("_file"):
            settings[key] = str(FIX / value) if not Path(value).is_absolute() else value
        elif key.endswith("_files"):
            settings[key] = [str(FIX / v) for v in value]
    out = tmp_path / "out"
    manifests = parallel.write_splits(parallel.Config.from_dict(settings), out)
    for split, m in manifests.items():
        assert m["rows_in"] == m["rows"] + m["rows_quarantined"], split
    return manifests, {s: split_rows(out / s) for s in manifests}


def pairs(rows: list[dict]) -> list[tuple[list[str], list[list[str]]]]:
    return [(r["src"], r["refs"]) for r in rows]


def expected_train(with_alt: bool) -> list[tuple[list[str], list[list[str]]]]:
    return [(s, [t] + ([a] if with_alt and a else [])) for s, t, a in zip(TRAIN_SRC, TRAIN_TGT, ALT)]


def test_tsv_with_header_columns_by_name_and_reference_columns(tmp_path):
    manifests, rows = run(
        tmp_path, train_file="train.tsv", valid_file="valid.tsv", test_file="test.tsv",
        src_col="question", tgt_col="answer", ref_cols=["alt"],
    )  # fmt: skip
    assert pairs(rows["train"]) == expected_train(with_alt=True)
    assert [r["id"] for r in rows["train"]] == ["train.tsv:2", "train.tsv:3", "train.tsv:4"]
    assert [r["tgt"] for r in rows["train"]] == TRAIN_TGT  # tgt = the first reference
    assert pairs(rows["test"]) == [
        (["What", "is", "ZX-417", "?"], [["ZX-417", "is", "a", "router", "."], ["A", "router", "."]]),
        (["Where", "is", "order", "7", "?"], [["Order", "7", "is", "here", "."]]),
    ]
    stats = manifests["train"]["stats"]
    assert stats["empty_refs"] == 1  # line 3's empty alt is left out, counted
    assert stats["src_tokens"] == 15 and stats["ref_tokens"] == 6 + 5 + 5 + 5 + 7
    # reference tokens found in the source (case-sensitive): Anna Smith is (3) + is (1) | 555 now (2) |
    # 42 (1) + order 42 late (3)
    assert stats["ref_tokens_in_src"] == 10
    assert manifests["train"]["params"]["tokenizer"] == "whitespace"


def test_the_same_rows_from_text_jsonl_csv_parquet_arrow(tmp_path):
    _, tsv = run(tmp_path / "tsv", train_file="train.tsv", valid_file="valid.tsv", src_col="question", tgt_col="answer")
    _, text = run(
        tmp_path / "text", train_src_file="train.src", train_tgt_file="train.tgt", valid_src_file="valid.src",
        valid_tgt_file="valid.tgt", valid_ref_files=["valid.ref1"],
    )  # fmt: skip
    _, jsonl = run(tmp_path / "jsonl", train_file="train.jsonl", valid_file="valid.jsonl", src_col="q", tgt_col="a")
    assert pairs(tsv["train"]) == pairs(text["train"]) == pairs(jsonl["train"]) == expected_train(with_alt=False)
    assert [r["id"] for r in text["train"]] == ["train.src:1", "train.src:2", "train.src:3"]
    assert pairs(text["valid"]) == [
        (["Who", "is", "Bob", "Lee", "?"], [["Bob", "Lee", "is", "a", "cat", "."], ["A", "cat", "."]])
    ]
    _, with_list = run(
        tmp_path / "list", train_file="train.jsonl", valid_file="valid.jsonl", src_col="q", tgt_col="a", refs_col="more"
    )
    assert pairs(with_list["train"]) == expected_train(with_alt=True)

    _, csv_rows = run(
        tmp_path / "csv", train_file="train.csv", valid_file="valid.csv", src_col="question", tgt_col="answer"
    )
    assert [r["id"] for r in csv_rows["train"]] == [
        "train.csv:2",
        "train.csv:3",
        "train.csv:4",
    ]  # a record's first line
    assert csv_rows["train"][2]["tgt"] == ["Order", "42", "arrives", "today", ",", "really", "."]  # quoted newline

    table = pa.table({"question": [" ".join(s) for s in TRAIN_SRC], "answer": [" ".join(t) for t in TRAIN_TGT],
                      "alt": [[" ".join(a)] if a else [] for a in ALT]})  # fmt: skip
    valid = pa.table({"question": ["Who is Bob Lee ?"], "answer": ["Bob Lee is a cat ."], "alt": [["A cat ."]]})
    pq.write_table(table, tmp_path / "train.parquet", row_group_size=2)
    pq.write_table(valid, tmp_path / "valid.parquet")
    for name, t in (("train.arrow", table), ("valid.arrow", valid)):
        with pa.ipc.new_file(tmp_path / name, t.schema) as writer:
            writer.write_table(t, max_chunksize=2)
    for fmt in ("parquet", "arrow"):
        _, got = run(
            tmp_path / fmt, train_file=str(tmp_path / f"train.{fmt}"), valid_file=str(tmp_path / f"valid.{fmt}"),
            src_col="question", tgt_col="answer", refs_col="alt", chunk_size=1,
        )  # fmt: skip
        assert pairs(got["train"]) == expected_train(with_alt=True), fmt
        assert [r["id"] for r in got["train"]] == [f"train.{fmt}:1", f"train.{fmt}:2", f"train.{fmt}:3"]


def test_headerless_tsv_columns_by_index_and_gzip(tmp_path):
    lines = (FIX / "train.tsv").read_bytes().split(b"\n", 1)[1]
    (tmp_path / "train.tsv.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "valid.tsv").write_bytes((FIX / "valid.tsv").read_bytes().split(b"\n", 1)[1])
    _, rows = run(
        tmp_path, train_file=str(tmp_path / "train.tsv.gz"), valid_file=str(tmp_path / "valid.tsv"),
        header=False, src_col=0, tgt_col=1, ref_cols=[2],
    )  # fmt: skip
    assert pairs(rows["train"]) == expected_train(with_alt=True)
    assert rows["train"][0]["id"] == "train.tsv:1"  # the .gz is not part of the id


def test_record_problems_are_quarantined_at_file_and_line(tmp_path):
    (tmp_path / "train.tsv").write_bytes(
        b"q\ta\n"
        b"fine one\tgood answer\n"  # 2: a row
        b"only one field\n"  # 3: bad_field_count
        b"\t\n"  # 4: empty_line (whitespace only)
        b"   \tno source\n"  # 5: empty_src
        b"bad \xff byte\tx\n"  # 6: invalid_utf8
        b"fine one\tgood answer\n"  # 7: duplicate_pair
        b"nul \x00 here\tx\n"  # 8: nul_byte
        b"many\t" + b"w " * 30 + b"\n"  # 9: tgt_too_long (max_tokens 20)
    )
    (tmp_path / "valid.jsonl").write_text(
        '{"q": "v one", "a": "t one"}\n'
        "not json\n"  # bad_json
        "[1, 2]\n"  # bad_json (not an object)
        '{"q": "v two"}\n'  # missing_field
        '{"q": "v three", "a": 3}\n'  # bad_field_type
        "\n"  # empty_line
    )
    settings = {"train_file": str(tmp_path / "train.tsv"), "valid_file": str(tmp_path / "valid.jsonl"),
                "src_col": "q", "tgt_col": "a", "max_tokens": 20}  # fmt: skip
    manifests = parallel.write_splits(parallel.Config.from_dict(settings), tmp_path / "out")
    train = {q["record"]["where"]: q["reason"] for q in quarantine(tmp_path / "out" / "train")}
    assert train == {
        "train.tsv:3": "bad_field_count",
        "train.tsv:4": "empty_line",
        "train.tsv:5": "empty_src",
        "train.tsv:6": "invalid_utf8",
        "train.tsv:7": "duplicate_pair",
        "train.tsv:8": "nul_byte",
        "train.tsv:9": "tgt_too_long",
    }
    valid = {q["record"]["where"]: q["reason"] for q in quarantine(tmp_path / "out" / "valid")}
    assert valid == {
        "valid.jsonl:2": "bad_json",
        "valid.jsonl:3": "bad_json",
        "valid.jsonl:4": "missing_field",
        "valid.jsonl:5": "bad_field_type",
        "valid.jsonl:6": "empty_line",
    }
    assert (manifests["train"]["rows"], manifests["valid"]["rows"]) == (1, 1)


def test_malformed_files_are_errors_naming_file_and_line(tmp_path):
    (tmp_path / "train.csv").write_text('q,a\nfine,row\n"unclosed,quote\nnext,row\n')
    (tmp_path / "valid.csv").write_text("q,a\nx,y\n")
    base = {"valid_file": str(tmp_path / "valid.csv"), "src_col": "q", "tgt_col": "a"}
    with pytest.raises(CorpusFormatError) as err:
        parallel.write_splits(
            parallel.Config.from_dict({**base, "train_file": str(tmp_path / "train.csv")}), tmp_path / "o"
        )
    assert str(err.value).startswith(f"{tmp_path / 'train.csv'}:3: malformed CSV")
    assert not (tmp_path / "o").exists()

    (tmp_path / "a.src").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.tgt").write_text("uno\ndos\n")
    cfg = parallel.Config.from_dict(
        {"train_src_file": str(tmp_path / "a.src"), "train_tgt_file": str(tmp_path / "a.tgt"), "valid_fraction": 0.5}
    )
    with pytest.raises(CorpusFormatError, match=r"a\.src:3: line-aligned files differ in length"):
        parallel.write_splits(cfg, tmp_path / "o")

    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    cfg = parallel.Config.from_dict({**base, "train_file": str(tmp_path / "bad.parquet")})
    with pytest.raises(CorpusFormatError, match=r"bad\.parquet: not a readable Parquet file"):
        parallel.write_splits(cfg, tmp_path / "o")
    pq.write_table(pa.table({"q": ["a b"], "x": ["c"]}), tmp_path / "t.parquet")
    cfg = parallel.Config.from_dict({**base, "train_file": str(tmp_path / "t.parquet")})
    with pytest.raises(CorpusFormatError, match=r"t\.parquet: no column 'a'; the columns found are \['q', 'x'\]"):
        parallel.write_splits(cfg, tmp_path / "o")
    pq.write_table(pa.table({"q": ["a b"], "a": [3]}), tmp_path / "n.parquet")
    cfg = parallel.Config.from_dict({**base, "train_file": str(tmp_path / "n.parquet")})
    with pytest.raises(CorpusFormatError, match=r"column 'a' holds int64, not strings"):
        parallel.write_splits(cfg, tmp_path / "o")


def test_settings_errors_name_the_setting():
    with pytest.raises(ValueError, match="needs a train file"):
        parallel.Config.from_dict({"valid_file": "v.tsv"})
    with pytest.raises(ValueError, match="valid has a file and a valid_fraction"):
        parallel.Config.from_dict({"train_file": "t.tsv", "valid_file": "v.tsv", "valid_fraction": 0.1})
    with pytest.raises(ValueError, match="needs a valid split"):
        parallel.Config.from_dict({"train_file": "t.tsv"})
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        parallel.Config.from_dict({"train_file": "t.tsv", "valid_fraction": 0.1, "tokenizer": "spacy"})
    with pytest.raises(ValueError, match=r"columns are 0-based column indices \(header: false\), got 'q'"):
        parallel.Config.from_dict({"train_file": "t.tsv", "valid_fraction": 0.1, "header": False, "src_col": "q"})
    with pytest.raises(ValueError, match=r"unknown Config settings \['src_column'\]"):
        parallel.Config.from_dict({"train_file": "t.tsv", "valid_fraction": 0.1, "src_column": "q"})


def _bucket(src: str, seed: int) -> float:
    """The split rule written again from its docstring: keyed BLAKE2b of the tokens joined by 0x1f."""
    digest = hashlib.blake2b(src.replace(" ", "\x1f").encode(), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big") / 2**64


def test_one_file_split_by_a_hash_of_the_source(tmp_path):
    lines = [f"source {i % 500} text\ttarget {i}" for i in range(1000)]  # every source twice
    (tmp_path / "all.tsv").write_text("src\ttgt\n" + "\n".join(lines) + "\n")
    settings = {"train_file": str(tmp_path / "all.tsv"), "valid_fraction": 0.1, "test_fraction": 0.2, "chunk_size": 64}
    manifests = parallel.write_splits(parallel.Config.from_dict(settings), tmp_path / "out")
    expect = {"train": 0, "valid": 0, "test": 0}
    for i in range(500):
        u = _bucket(f"source {i} text", 0)
        expect["test" if u < 0.2 else "valid" if u < 0.3 else "train"] += 2
    assert {s: m["rows"] for s, m in manifests.items()} == expect
    assert sum(expect.values()) == 1000 and 150 < expect["test"] < 250 and 60 < expect["valid"] < 140
    sources = {s: {" ".join(r["src"]) for r in split_rows(tmp_path / "out" / s)} for s in manifests}
    assert not (
        sources["train"] & sources["valid"] or sources["train"] & sources["test"] or sources["valid"] & sources["test"]
    )
    assert manifests["train"]["quarantine_reasons"] == {}  # the twin sources differ in target: not duplicates
    assert not list(tmp_path.glob(".out.spill-*"))  # the scratch files are gone
    again = parallel.write_splits(parallel.Config.from_dict(settings), tmp_path / "again")
    assert {s: m["content_sha256"] for s, m in again.items()} == {s: m["content_sha256"] for s, m in manifests.items()}


def test_tokenizers_and_token_steps():
    moses = parallel.TokenSpec("moses", lang="en", lowercase=True, mask_digits=True)
    assert moses.tokens("Hello, World! Order 4217 isn't here.") == [
        "hello", ",", "world", "!", "order", "####", "isn", "'t", "here", ".",
    ]  # fmt: skip
    assert parallel.TokenSpec("chars").tokens("你好 ab") == ["你", "好", "a", "b"]
    assert parallel.TokenSpec("jieba").tokens("我爱北京天安门") == ["我", "爱", "北京", "天安门"]
    assert parallel.TokenSpec("whitespace", mask_digits=True).tokens(" Call  555 ") == ["Call", "###"]


def test_raw_text_is_tokenised_as_the_shards_are(tmp_path):
    (tmp_path / "t.tsv").write_text("src\ttgt\nHello, Anna! Order 4217?\tHi Anna.\n")
    (tmp_path / "v.tsv").write_text("src\ttgt\nSecond one.\tTwo.\n")
    settings = {"reader": "parallel", "train_file": str(tmp_path / "t.tsv"), "valid_file": str(tmp_path / "v.tsv"),
                "tokenizer": "moses", "lowercase": True, "mask_digits": True}  # fmt: skip
    parallel.write_splits(
        parallel.Config.from_dict({k: v for k, v in settings.items() if k != "reader"}), tmp_path / "o"
    )
    (shard,) = [r["src"] for r in split_rows(tmp_path / "o" / "train")]
    assert shard == ["hello", ",", "anna", "!", "order", "####", "?"]
    assert raw_input.accepts_raw_text(settings)
    assert raw_input.source_tokenizer(settings)("Hello, Anna! Order 4217?") == shard
    assert raw_input.source_tokenizer(settings, pretokenized=True)("Hello , Anna 12") == ["hello", ",", "anna", "##"]
    assert raw_input.detokenize(["hi", "anna", "."], settings) == "hi anna ."
    assert raw_input.detokenize(["你", "好"], {**settings, "tokenizer": "chars"}) == "你好"
    assert raw_input.source_tokenizer({"reader": "parallel", "tokenizer": "chars"})("你好 ab") == ["你", "好", "a", "b"]


def test_prepare_stage_reads_the_task_through_params(tmp_path):
    raw = tmp_path / "data" / "raw" / "mine"
    raw.mkdir(parents=True)
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(FIX / name, raw / name)
    params = {
        "tasks": {"mine": "data/raw/mine"},
        "prepare": {"mine": {"reader": "parallel", "train_file": "train.tsv", "valid_file": "valid.tsv",
                             "test_file": "test.tsv", "src_col": "question", "tgt_col": "answer"}},
    }  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    manifests = write_job(prepare_job("mine", str(tmp_path / "params.yaml")), serial_map)
    assert {s: m["rows"] for s, m in manifests.items()} == {"train": 3, "valid": 1, "test": 2}
    written = json.loads((tmp_path / "data/shards/mine/test/manifest.json").read_text())
    assert written["params"]["test_file"] == "data/raw/mine/test.tsv"  # relative: the same bytes in any checkout


def test_parquet_cells_are_checked_like_lines(tmp_path):
    table = pa.table(
        {
            "q": ["fine one", "nul \x00 here", "x" * 20_000, "long " + "y" * 600, None, "fine two"],
            "a": ["t one", "t", "t", "t", "t", None],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    pq.write_table(pa.table({"q": [b"valid \xff"], "a": [b"t"]}), tmp_path / "bytes.parquet")
    pq.write_table(pa.table({"q": [b"v one"], "a": [b"t"]}), tmp_path / "v.parquet")
    settings = {"train_file": str(tmp_path / "t.parquet"), "valid_file": str(tmp_path / "v.parquet"),
                "test_file": str(tmp_path / "bytes.parquet"), "src_col": "q", "tgt_col": "a"}  # fmt: skip
    with pytest.raises(
        CorpusFormatError, match=r"its only record was quarantined \(invalid_utf8 1\); first: bytes\.parquet:1"
    ):
        parallel.write_splits(parallel.Config.from_dict(settings), tmp_path / "out")
    del settings["test_file"]
    manifests = parallel.write_splits(parallel.Config.from_dict(settings), tmp_path / "out")
    assert (manifests["train"]["rows_in"], manifests["train"]["rows"]) == (6, 1)
    reasons = {q["record"]["where"]: q["reason"] for q in quarantine(tmp_path / "out" / "train")}
    assert reasons == {
        "t.parquet:2": "nul_byte",
        "t.parquet:3": "line_too_long",
        "t.parquet:4": "token_too_long",
        "t.parquet:5": "empty_src",
        "t.parquet:6": "empty_tgt",
    }
    assert [r["src"] for r in split_rows(tmp_path / "out" / "train")] == [["fine", "one"]]
    assert split_rows(tmp_path / "out" / "valid")[0]["src"] == ["v", "one"]  # a binary column, decoded
