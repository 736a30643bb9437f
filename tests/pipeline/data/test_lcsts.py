"""LCSTS reader: original PART_* format and CLGE TSV, char and jieba-word views, bad input."""

from __future__ import annotations

from pathlib import Path

import jieba
import pytest

from pipeline.data.corpora import lcsts
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.io.parallel import ProcessMap
from pipeline.io.shards import read_split
from tests.helpers import FIXTURES, quarantine, shared_path

FIX = FIXTURES / "lcsts"


def config(**kw) -> lcsts.Config:
    return lcsts.Config(**{"train_file": None, "valid_file": None, "test_file": None, **kw})


def parts(**kw) -> lcsts.Config:
    return lcsts.Config(
        train_file=str(FIX / "PART_I.txt"),
        valid_file=str(FIX / "PART_II.txt"),
        test_file=str(FIX / "PART_III.txt"),
        **kw,
    )


def chars(text: str) -> list[str]:
    return list(text)


# --------------------------------------------------------------------------- #
# Original format, char view
# --------------------------------------------------------------------------- #


def test_original_parts_make_train_valid_test_and_filter_by_label(tmp_path):
    manifests = lcsts.write_splits(parts(view="char"), tmp_path)
    assert list(manifests) == ["train", "valid", "test"]

    test = read_split(tmp_path / "test").to_pylist()
    assert [r["id"] for r in test] == ["PART_III.txt#0", "PART_III.txt#3", "PART_III.txt#6"]
    assert [r["human_label"] for r in test] == [4, 5, 3]
    assert test[0]["tgt"] == chars("深圳地铁新线今日开通") and test[0]["refs"] == [test[0]["tgt"]]
    assert test[0]["src"][:10] == ["深", "圳", "地", "铁", "7", "号", "线", "今", "日", "上"]
    assert test[0]["src"][20:24] == ["3", "0", ".", "2"]  # 30.2公里: ASCII digits are characters too
    assert test[1]["tgt"][:3] == ["P", "2", "P"]
    assert manifests["test"]["rows"] == 3 and manifests["test"]["rows_quarantined"] == 0
    assert manifests["test"]["stats"] == {
        "human_label_1": 1,
        "human_label_2": 1,
        "human_label_3": 1,
        "human_label_4": 1,
        "human_label_5": 1,
        "dropped_human_label_1": 1,
        "dropped_human_label_2": 1,
        "src_tokens": 117,
        "tgt_tokens": 30,
        "tgt_tokens_in_src": 23,
    }

    valid = manifests["valid"]
    assert valid["rows"] == 1 and valid["stats"]["dropped_human_label_2"] == 1
    assert read_split(tmp_path / "valid").column("id").to_pylist() == ["PART_II.txt#0"]

    # PART_I has no labels (kept); write_corpus removes the duplicate and the two leaked sources.
    train = manifests["train"]
    assert train["rows"] == 2 and train["rows_in"] == 5
    assert train["quarantine_reasons"] == {"duplicate_pair": 1, "src_in_test": 1, "src_in_valid": 1}
    rows = read_split(tmp_path / "train").to_pylist()
    assert [r["id"] for r in rows] == ["PART_I.txt#0", "PART_I.txt#4"]
    assert rows[0]["human_label"] is None
    assert manifests["test"]["params"]["tokenizer"] == "chars"
    assert "cache_dir" not in manifests["test"]["params"]


@pytest.mark.parametrize("threshold, kept", [(1, 5), (3, 3), (5, 1)])
def test_label_threshold_comes_from_config(tmp_path, threshold, kept):
    m = lcsts.write_splits(config(test_file=str(FIX / "PART_III.txt"), min_human_label=threshold), tmp_path)
    dropped = sum(n for k, n in m["test"]["stats"].items() if k.startswith("dropped_"))
    assert m["test"]["rows"] == kept and dropped == 5 - kept


# --------------------------------------------------------------------------- #
# Word view (jieba), cache, parallel
# --------------------------------------------------------------------------- #


def test_word_view_tokens_and_cached_rerun(tmp_path, monkeypatch):
    cfg = config(test_file=str(FIX / "PART_III.txt"), view="word", cache_dir=str(tmp_path / "cache"))
    first = lcsts.write_splits(cfg, tmp_path / "a")["test"]
    rows = read_split(tmp_path / "a" / "test").to_pylist()
    assert rows[0]["tgt"] == ["深圳", "地铁", "新线", "今日", "开通"]
    assert rows[1]["src"][:8] == ["近日", "杭州", "一家", "P2P", "平台", "负责人", "失联", "，"]
    assert first["params"]["tokenizer"] == f"jieba {jieba.__version__} HMM=True"

    calls = []
    real = jieba.lcut
    monkeypatch.setattr(jieba, "lcut", lambda *a, **k: calls.append(a) or real(*a, **k))
    second = lcsts.write_splits(cfg, tmp_path / "b")["test"]
    assert calls == []  # every text came from the cache
    assert second["content_sha256"] == first["content_sha256"]
    no_hmm = lcsts.write_splits(
        config(test_file=str(FIX / "PART_III.txt"), view="word", jieba_hmm=False, cache_dir=None), tmp_path / "c"
    )
    assert len(calls) == 6  # 3 kept docs x (summary, text), nothing cached for HMM off
    assert read_split(tmp_path / "c" / "test").to_pylist()[1]["src"][5:8] == ["负责人", "失", "联"]
    assert no_hmm["test"]["content_sha256"] != first["content_sha256"]


def test_process_pool_writes_the_serial_shards(tmp_path):
    for view in ("char", "word"):
        serial = lcsts.write_splits(parts(view=view, cache_dir=None, chunk_size=2), tmp_path / f"s{view}")
        with ProcessMap(2) as pool:
            pooled = lcsts.write_splits(parts(view=view, cache_dir=None, chunk_size=2), tmp_path / f"p{view}", pool)
        digests = [{s: m["content_sha256"] for s, m in ms.items()} for ms in (serial, pooled)]
        assert digests[0] == digests[1]


# --------------------------------------------------------------------------- #
# TSV (CLGE subset)
# --------------------------------------------------------------------------- #


def test_tsv_columns_are_summary_then_text(tmp_path):
    tsv = FIX / "tsv"
    cfg = config(train_file=str(tsv / "train.tsv"), valid_file=str(tsv / "val.tsv"), test_file=str(tsv / "test.tsv"))
    m = lcsts.write_splits(cfg, tmp_path)
    assert {s: x["rows"] for s, x in m.items()} == {"train": 2, "valid": 2, "test": 3}
    assert m["train"]["quarantine_reasons"] == {"duplicate_pair": 1, "src_in_test": 1}
    test = read_split(tmp_path / "test").to_pylist()
    assert test[0]["id"] == "test.tsv:1" and test[0]["human_label"] is None
    assert test[0]["tgt"] == chars("深圳地铁新线今日开通")
    assert test[0]["src"][-3:] == ["乘", "车", "。"]
    assert read_split(tmp_path / "train").column("id").to_pylist() == ["train.tsv:1", "train.tsv:2"]


def test_tsv_bad_lines_are_quarantined_with_their_line(tmp_path):
    m = lcsts.write_splits(config(test_file=str(FIX / "bad.tsv")), tmp_path)["test"]
    assert m["rows"] == 2 and m["rows_in"] == 8
    assert m["quarantine_reasons"] == {
        "bad_field_count": 2,
        "empty_line": 1,
        "empty_summary": 1,
        "invalid_utf8": 1,
        "short_text_too_long": 1,
    }
    q = quarantine(tmp_path / "test")
    assert [(x["reason"], x["record"]["where"]) for x in q] == [
        ("empty_line", "bad.tsv:2"),
        ("invalid_utf8", "bad.tsv:3"),
        ("bad_field_count", "bad.tsv:4"),
        ("bad_field_count", "bad.tsv:5"),
        ("empty_summary", "bad.tsv:6"),
        ("short_text_too_long", "bad.tsv:8"),
    ]
    assert q[1]["record"]["record"]["byte_offset"] == 58 and "\\xc3(" in q[1]["record"]["record"]["line"]
    assert q[5]["record"]["record"]["chars"] == 1140
    rows = read_split(tmp_path / "test").to_pylist()
    assert [r["id"] for r in rows] == ["bad.tsv:1", "bad.tsv:7"]
    assert rows[1]["src"][-1] == "。" and rows[1]["tgt"] == chars("北京明日迎来降雨")  # CRLF stripped


# --------------------------------------------------------------------------- #
# Bad original-format input
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "name, where, message",
    [
        ("unclosed_summary.txt", 5, r"<summary> opened at line 3 is not closed \(found '<short_text>'\)"),
        ("unclosed_doc.txt", 10, r"<doc id=1> is not closed before the end of the file"),
        ("doc_in_doc.txt", 9, r"<doc id=0> opened at line 1 is not closed"),
        ("unclosed_label.txt", 2, r"<human_label> is not closed on its line"),
        ("text_outside_doc.txt", 10, r"expected <doc id=N>, found '多位专家"),
        ("text_in_doc.txt", 3, r"unexpected '深圳地铁新线今日开通' inside <doc id=0>"),
    ],
)
def test_broken_structure_fails_with_file_and_line(tmp_path, name, where, message):
    with pytest.raises(CorpusFormatError, match=rf"{name}:{where}: {message}") as err:
        lcsts.write_splits(config(test_file=str(FIX / name)), tmp_path)
    assert err.value.line == where
    assert not (tmp_path / "test").exists()


def test_empty_file_fails(tmp_path):
    with pytest.raises(CorpusFormatError, match=r"empty\.txt: no <doc> records"):
        lcsts.write_splits(config(test_file=str(FIX / "empty.txt")), tmp_path)


def test_record_problems_are_quarantined_and_blank_lines_tolerated(tmp_path):
    m = lcsts.write_splits(config(test_file=str(FIX / "records.txt")), tmp_path)["test"]
    assert m["rows"] == 2 and m["rows_in"] == 8
    assert m["quarantine_reasons"] == {
        "bad_human_label": 2,
        "duplicate_summary": 1,
        "empty_summary": 1,
        "missing_human_label": 1,
        "missing_summary": 1,
    }
    q = quarantine(tmp_path / "test")
    assert [(x["reason"], x["record"]["where"]) for x in q] == [
        ("missing_summary", "records.txt:10"),
        ("bad_human_label", "records.txt:16"),
        ("bad_human_label", "records.txt:25"),
        ("missing_human_label", "records.txt:34"),
        ("duplicate_summary", "records.txt:42"),
        ("empty_summary", "records.txt:54"),
    ]
    assert q[2]["record"]["record"]["human_label"] == ["7"] and q[5]["record"]["record"]["doc_id"] == "6"
    rows = read_split(tmp_path / "test").to_pylist()
    assert [r["id"] for r in rows] == ["records.txt#0", "records.txt#7"]
    # doc 7: blank lines, inline <summary>, a short_text on two lines (joined; whitespace is no token)
    assert rows[1]["tgt"] == chars("北京明日迎来降雨")
    assert rows[1]["src"] == chars("北京市气象台发布预报，明日白天有中到大雨。")
    assert m["stats"]["blank_lines"] == 5 and m["stats"]["multiline_fields"] == 1


def test_invalid_utf8_quarantines_the_doc_at_its_line(tmp_path):
    m = lcsts.write_splits(config(test_file=str(FIX / "invalid_utf8.txt")), tmp_path)["test"]
    assert m["quarantine_reasons"] == {"invalid_utf8": 1}
    (q,) = quarantine(tmp_path / "test")
    assert q["record"]["where"] == "invalid_utf8.txt:13" and q["record"]["record"]["doc_id"] == "1"
    assert read_split(tmp_path / "test").column("id").to_pylist() == ["invalid_utf8.txt#0", "invalid_utf8.txt#2"]


def test_absurdly_long_text_is_quarantined(tmp_path):
    m = lcsts.write_splits(config(test_file=str(FIX / "too_long.txt")), tmp_path / "a")["test"]
    assert m["rows"] == 1 and m["quarantine_reasons"] == {"short_text_too_long": 1}
    (q,) = quarantine(tmp_path / "a" / "test")
    assert q["record"]["where"] == "too_long.txt:10" and q["record"]["record"]["chars"] == 1140
    relaxed = lcsts.write_splits(config(test_file=str(FIX / "too_long.txt"), max_chars=2000), tmp_path / "b")
    assert relaxed["test"]["rows"] == 2


def test_word_view_token_limit_applies_to_jieba_words_and_line_limit_to_raw_lines(tmp_path):
    tsv = tmp_path / "t.tsv"
    tsv.write_text(
        "北京abcdefghijklmnop明日有雨\t北京市气象台发布预报。\n北京明日有雨\t明日白天有中到大雨。\n", encoding="utf-8"
    )
    cfg = config(test_file=str(tsv), view="word", cache_dir=None, max_token_chars=10)
    m = lcsts.write_splits(cfg, tmp_path / "w")["test"]
    assert (m["rows"], m["quarantine_reasons"]) == (1, {"token_too_long": 1})  # jieba keeps the 16 letters whole
    (q,) = quarantine(tmp_path / "w" / "test")
    assert q["record"]["where"] == "t.tsv:1"
    assert q["record"]["record"]["token_chars"] == 16 and q["record"]["record"]["token_head"] == "abcdefghijklmnop"
    # the char view makes 1-character tokens, and a Chinese line is no whitespace token: kept
    assert lcsts.write_splits(config(test_file=str(tsv), max_token_chars=10), tmp_path / "c")["test"]["rows"] == 2
    m = lcsts.write_splits(config(test_file=str(tsv), max_line_chars=20), tmp_path / "l")["test"]
    assert (m["rows"], m["quarantine_reasons"]) == (1, {"line_too_long": 1})
    (q,) = quarantine(tmp_path / "l" / "test")
    assert (q["record"]["where"], q["record"]["record"]["chars"]) == ("t.tsv:1", 34)  # line 2 has 17


# --------------------------------------------------------------------------- #
# Config
# --------------------------------------------------------------------------- #


def test_config_rejects_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="unknown Config settings"):
        lcsts.Config.from_dict({"test_file": "x", "veiw": "char"})
    with pytest.raises(ValueError, match="view must be one of"):
        config(test_file="x", view="bpe")
    with pytest.raises(ValueError, match="at least one of"):
        config()
    with pytest.raises(FileNotFoundError, match="missing LCSTS file.*nope.txt"):
        lcsts.write_splits(config(test_file=str(tmp_path / "nope.txt")), tmp_path)
    cfg = lcsts.Config.from_dict({"train_file": None, "valid_file": None, "test_file": "t.txt", "view": "word"})
    assert cfg.split_files() == {"test": Path("t.txt")} and cfg.jieba_hmm and cfg.min_human_label == 3


# --------------------------------------------------------------------------- #
# The real data in ../shared/data (skipped when absent)
# --------------------------------------------------------------------------- #


@pytest.mark.shared_data
def test_shared_part_iii_half_both_views(tmp_path):
    part3 = shared_path("lcsts", "PART_III.txt")
    for view in ("char", "word"):
        m = lcsts.write_splits(config(test_file=str(part3), view=view, cache_dir=None), tmp_path / view)["test"]
        # 555 of the 1,106 docs; PROVENANCE: 364 of them scored >= 3 (the paper's 725 over both halves)
        assert m["rows"] == 364 and m["rows_quarantined"] == 0
        stats = m["stats"]
        assert [stats[f"human_label_{k}"] for k in range(1, 6)] == [83, 108, 114, 151, 99]
        assert stats["dropped_human_label_1"] == 83 and stats["dropped_human_label_2"] == 108
        first = read_split(tmp_path / view / "test").slice(0, 1).to_pylist()[0]
        assert first["id"] == "PART_III.txt#2" and first["human_label"] == 5
        expected = chars("雅虎宣布剥离阿里巴巴股份") if view == "char" else ["雅虎", "宣布", "剥离", "阿里巴巴", "股份"]
        assert first["tgt"] == expected
    assert m["stats"]["tgt_tokens"] == 3719 and m["stats"]["src_tokens"] == 22616  # word view


@pytest.mark.shared_data
def test_shared_clge_subset_char_view(tmp_path):
    folder = shared_path("lcsts_clge_subset")
    cfg = config(
        train_file=str(folder / "train.tsv"), valid_file=str(folder / "val.tsv"), test_file=str(folder / "test.tsv")
    )
    m = lcsts.write_splits(cfg, tmp_path)
    assert {s: x["rows_in"] for s, x in m.items()} == {"train": 8586, "valid": 974, "test": 997}  # file lines
    assert {s: x["rows"] for s, x in m.items()} == {"train": 8362, "valid": 974, "test": 997}
    assert m["train"]["quarantine_reasons"] == {"duplicate_pair": 168, "src_in_test": 9, "src_in_valid": 47}
    first = read_split(tmp_path / "train").slice(0, 1).to_pylist()[0]
    assert first["id"] == "train.tsv:1" and first["tgt"] == chars("林志颖公司疑涉虚假营销无厂房无研发")
    assert first["src"][:5] == chars("日前，方舟")
