"""Europarl en-fr + newstest2011 reader (Pointer Softmax section 5.3): formats, filters, pointers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.data.corpora import europarl as E
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.io.parallel import ProcessMap
from pipeline.io.shards import read_split
from pipeline.vocab.vocabulary import Vocab, build_vocab, count_tokens
from tests.helpers import FIXTURES as FIXTURES_ROOT
from tests.helpers import quarantine, rows_by_id, shared_path

FIXTURES = FIXTURES_ROOT / "europarl"
T, F = True, False


def fixture_config(root: Path = FIXTURES, **overrides) -> E.Config:
    """The fixture with a 4-word target shortlist (8 with the specials) and max_len 20."""
    settings = dict(
        europarl_dir=str(root),
        newstest_dir=str(root / "dev"),
        max_len=20,
        shortlist_size=8,
        dictionary_file=str(root / "dict.fr-en.tsv"),
    )
    return E.Config.from_dict({**settings, **overrides})


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("europarl")
    return out, E.write_splits(fixture_config(), out)


# --------------------------------------------------------------------------- #
# The fixture, end to end
# --------------------------------------------------------------------------- #


def test_train_filters_and_counts(written):
    out, manifests = written
    train = manifests["train"]
    assert (train["rows"], train["rows_in"]) == (5, 10)
    assert train["quarantine_reasons"] == {
        "duplicate_pair": 1,
        "empty_tgt": 1,
        "invalid_utf8": 1,
        "longer_than_max_len": 1,
        "src_in_valid": 1,
    }
    where = {q["reason"]: q["record"]["where"] for q in quarantine(out / "train")}
    assert (
        where
        == {
            "src_in_valid": "europarl-v7.fr-en:5",  # "Mr President, I wish to raise a procedural matter." is a newstest source
            "longer_than_max_len": "europarl-v7.fr-en.en:6",  # 22 / 29 tokens > 20
            "duplicate_pair": "europarl-v7.fr-en:7",
            "empty_tgt": "europarl-v7.fr-en.fr:8",
            "invalid_utf8": "europarl-v7.fr-en.fr:9",  # a Latin-1 byte on the French side
        }
    )
    assert list(rows_by_id(out / "train")) == [f"europarl-v7.fr-en:{n}" for n in (1, 2, 3, 4, 10)]


def test_shortlist_is_the_vocab_stages_rule_over_the_written_train_targets(written):
    out, _ = written
    shortlist = Vocab.load(out / "shortlist.fr.txt")
    # ',' x4; '.' and 'de' x3 (tie broken by string); then the count-2 words 'Je' < 'la' < 'le' start with 'Je'
    assert shortlist.itos == ["<pad>", "<unk>", "<s>", "</s>", ",", ".", "de", "Je"]
    assert shortlist.counts[4:] == [4, 3, 3, 2]
    assert build_vocab(count_tokens(read_split(out / "train"), "tgt"), max_size=8).itos == shortlist.itos


def test_pointer_heuristic_on_train_rows(written):
    out, manifests = written
    rows = rows_by_id(out / "train")
    r2 = rows["europarl-v7.fr-en:2"]
    assert r2["src"] == "I warmly welcome the delegation from Ottawa arriving on Tuesday 9 October 2012 .".split()
    assert r2["tgt"][:8] == ["Je", "salue", "chaleureusement", "la", "délégation", "d'", "Ottawa", "qui"]
    # identical: Ottawa->6, 9->10, 2012->12; dictionary: salue->welcome 2, chaleureusement->warmly 1 (the
    # pointers cross), mardi->Tuesday 9, octobre->October 11; 'Je' and '.' are in the shortlist; the rest
    # (la, délégation: no entry, d', qui, est, arrivée, le) go to the location softmax (-1).
    assert r2["tgt_pointer"] == [-1, 2, 1, -1, -1, -1, 6, -1, -1, -1, -1, 9, 10, 11, 12, -1]
    assert r2["tgt_switch"] == [F] + [T] * 14 + [F]
    r1 = rows["europarl-v7.fr-en:1"]  # Examination of the motion -> Examen de la motion
    # 'Examen' is cased: the dictionary's 'examen' -> 'Examination' does not apply
    assert (r1["tgt_pointer"], r1["tgt_switch"]) == ([-1, -1, -1, 3], [T, F, T, T])
    r10 = rows["europarl-v7.fr-en:10"]
    # Madame -> Mrs (dictionary, second sense: 'Madam' is not in the source), Hartley (identical)
    assert r10["tgt_pointer"][:4] == [-1, -1, 2, 3]
    assert all(r["refs"] == [r["tgt"]] for r in rows.values())
    # rows 1, 2, 3, 4, 10: tgt 4 + 16 + 14 + 10 + 13; oov 3 + 14 + 10 + 8 + 10; identical 1 + 3 + 1 + 2 + 1
    # (motion; Ottawa 9 2012; vote; ( ); Hartley); dictionary 0 + 4 + 0 + 0 + 1
    assert manifests["train"]["stats"] == {
        "tgt_tokens": 57,
        "tgt_oov": 45,
        "pointers_identical": 8,
        "pointers_dictionary": 5,
        "oov_unmatched": 32,
        "identical_per_100": 160.0,
        "dictionary_per_100": 100.0,
        "pointers_per_100": 260.0,
        "shortlist_words": 4,
        "dictionary_words": 9,
    }


def test_sgm_segments_matched_by_docid_and_seg_id(written):
    out, manifests = written
    test = rows_by_id(out / "test")
    # the reference file lists the documents, and the segments of a document, in another order
    assert list(test) == [
        "newstest2011:europarl-fixture-1:1",
        "newstest2011:europarl-fixture-1:2",
        "newstest2011:aktualne.cz-fixture-2:1",
    ]
    seg = test["newstest2011:europarl-fixture-1:2"]
    assert seg["src"] == ["The", "Parliament", "stood", "&", "applauded", "the", "two", "laureates", "."]
    assert seg["tgt"] == ["Le", "Parlement", "s'", "est", "levé", "&", "a", "applaudi", "les", "deux", "lauréats", "."]
    assert seg["tgt_pointer"] == [-1, 1, -1, -1, -1, 3, -1, -1, -1, -1, -1, -1]  # Parlement (dictionary), & (identical)
    # Monsieur -> Mr, Président -> President (the first sense; 'Chairman' is the second)
    assert test["newstest2011:europarl-fixture-1:1"]["tgt_pointer"][:3] == [0, -1, 1]
    assert test["newstest2011:aktualne.cz-fixture-2:1"]["tgt_pointer"] == [0, -1, -1, -1, -1, -1, -1, 5, -1, 8, -1]
    for split in ("valid", "test"):  # the paper's dev set is newstest2011 too (dl4mt-material)
        assert manifests[split]["rows"] == 3 and manifests[split]["rows_quarantined"] == 0
        # tgt 12 + 12 + 11; oov 9 + 11 + 9; identical 0 + 1 + 3; dictionary 2 + 1 + 0
        assert manifests[split]["stats"] == {
            "tgt_tokens": 35,
            "tgt_oov": 29,
            "pointers_identical": 4,
            "pointers_dictionary": 3,
            "oov_unmatched": 22,
            "identical_per_100": 133.333,
            "dictionary_per_100": 100.0,
            "pointers_per_100": 233.333,
        }


def test_plain_test_files_give_the_same_pairs(written, tmp_path):
    out, _ = written
    manifests = E.write_splits(fixture_config(eval_format="plain"), tmp_path)
    plain = read_split(tmp_path / "test").to_pylist()
    sgm = read_split(out / "test").to_pylist()
    assert [r["id"] for r in plain] == ["newstest2011:1", "newstest2011:2", "newstest2011:3"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]
    assert strip(plain) == strip(sgm)
    assert (
        manifests["train"]["content_sha256"]
        == (json.loads((out / "train" / "manifest.json").read_text()))["content_sha256"]
    )


def test_valid_set_from_another_folder_and_format(written, tmp_path):
    """Validation on another WMT set (newstest2012, plain files in its own folder), test on newstest2011."""
    valid_dir = tmp_path / "dev2012"
    valid_dir.mkdir()
    for lang in ("en", "fr"):
        lines = (FIXTURES / "dev" / f"newstest2011.{lang}").read_text(encoding="utf-8").splitlines()
        (valid_dir / f"newstest2012.{lang}").write_text(
            "\n".join(f"{line} ." for line in lines[:2]) + "\n", encoding="utf-8"
        )
    out = tmp_path / "out"
    manifests = E.write_splits(
        fixture_config(valid_dir=str(valid_dir), valid_stem="newstest2012", valid_format="plain"), out
    )
    assert [r["id"] for r in read_split(out / "valid").to_pylist()] == ["newstest2012:1", "newstest2012:2"]
    assert read_split(out / "test").to_pylist() == read_split(written[0] / "test").to_pylist()  # still 2011 (SGML)
    assert manifests["valid"]["rows"] == 2
    with pytest.raises(ValueError, match="valid_format"):
        fixture_config(valid_format="xml")


def test_options_direction_unmatched_escape(tmp_path):
    cfg = fixture_config(src_lang="fr", tgt_lang="en", eval_format="plain", dictionary_file=None)
    E.write_splits(cfg, tmp_path / "fr-en")
    row = read_split(tmp_path / "fr-en" / "test").to_pylist()[0]
    assert row["src"][:3] == ["Monsieur", "le", "Président"] and row["tgt"][:2] == ["Mr", "President"]
    assert (tmp_path / "fr-en" / "shortlist.en.txt").is_file()

    cfg = fixture_config(unmatched="shortlist", escape=True)
    E.write_splits(cfg, tmp_path / "opts")
    seg = rows_by_id(tmp_path / "opts" / "test")["newstest2011:europarl-fixture-1:2"]
    assert seg["src"][3] == "&amp;" and seg["tgt"][2] == "s&apos;"  # tokenizer.perl's escaping
    assert seg["tgt_switch"] == [p >= 0 for p in seg["tgt_pointer"]]  # section 4: unmatched -> shortlist UNK


def test_process_pool_gives_identical_shards(written, tmp_path):
    out, manifests = written
    with ProcessMap(2) as pmap:
        parallel = E.write_splits(fixture_config(chunk_size=2), tmp_path, map_chunks=pmap)
    for split in ("train", "valid", "test"):
        assert parallel[split]["content_sha256"] == manifests[split]["content_sha256"]


def test_annotate_first_occurrence_and_sense_order():
    rules = E.PointerRules(frozenset({"le"}), {"chat": ("cat", "kitty")}, "location")
    pointers, switches, counts = E.annotate(["kitty", "x", "x", "cat"], ["le", "x", "chat", "y"], rules)
    assert pointers == [-1, 1, 3, -1]  # x: first of two; chat: 'cat' (first sense) though 'kitty' is earlier
    assert switches == [F, T, T, T]
    assert counts == E.PointerCounts(oov=3, identical=1, dictionary=1, unmatched=1)


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #


@pytest.fixture
def copy_root(tmp_path) -> Path:
    root = tmp_path / "raw"
    shutil.copytree(FIXTURES, root)
    return root


def test_mismatched_line_counts_name_the_shorter_file(copy_root, tmp_path):
    en = copy_root / "europarl-v7.fr-en.en"
    en.write_bytes(en.read_bytes() + b"One line too many.\n")
    with pytest.raises(CorpusFormatError, match=r"europarl-v7\.fr-en\.fr:11: ends after 10 lines"):
        E.write_splits(fixture_config(copy_root), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_absurdly_long_line_is_quarantined(tmp_path):
    manifests = E.write_splits(fixture_config(max_line_chars=120), tmp_path)
    assert manifests["train"]["quarantine_reasons"]["line_too_long"] == 1  # Europarl line 6: 123 characters
    assert "longer_than_max_len" not in manifests["train"]["quarantine_reasons"]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


SRC_SGM = "dev/newstest2011-src.en.sgm"
REF_SGM = "dev/newstest2011-ref.fr.sgm"


@pytest.mark.parametrize(
    "file, old, new, message",
    [
        (SRC_SGM, "matter.</seg>", "matter.", r"newstest2011-src\.en\.sgm:4: unclosed <seg>"),
        (
            SRC_SGM,
            "matter.</seg>\n</hl>",
            'matter.</seg><seg id="9">x</seg>\n</hl>',
            r"src\.en\.sgm:4: more than one <seg> on a line",
        ),
        (SRC_SGM, "</doc>\n<doc", "<doc", r"newstest2011-src\.en\.sgm:2: unclosed <doc> \(next <doc> at line 9\)"),
        (SRC_SGM, "</srcset>\n", "", r"newstest2011-src\.en\.sgm: unclosed <srcset>"),
        (
            SRC_SGM,
            '<doc docid="europarl-fixture-1" genre="news" origlang="en">\n',
            "",
            r"src\.en\.sgm:3: <seg> outside a <doc>",
        ),
        (
            SRC_SGM,
            '<seg id="2">',
            '<seg id="1">',
            r"src\.en\.sgm:7: duplicate seg id=1 in doc europarl-fixture-1 \(first at line 4\)",
        ),
        (SRC_SGM, '<p>\n<seg id="1"> ZDS', 'stray text\n<seg id="1"> ZDS', r"src\.en\.sgm:11: text outside a <seg>"),
        (REF_SGM, 'trglang="fr"', 'trglang="de"', r"ref\.fr\.sgm:1: <refset> has trglang='de', expected 'fr'"),
        # the source has seg 2, the reference lacks it: the reference file is named
        (
            REF_SGM,
            '<seg id="2">',
            '<seg id="3">',
            r"newstest2011-ref\.fr\.sgm: no segment docid=europarl-fixture-1 id=2 \(source newstest2011-src\.en\.sgm:7\)",
        ),
    ],
)
def test_malformed_sgml_fails_with_file_and_line(copy_root, tmp_path, file, old, new, message):
    _edit(copy_root / file, old, new)
    with pytest.raises(CorpusFormatError, match=message):
        E.write_splits(fixture_config(copy_root), tmp_path / "out")


def test_reference_segment_without_source_names_the_source_file(copy_root, tmp_path):
    _edit(copy_root / SRC_SGM, '<seg id="2"> The Parliament stood & applauded the two laureates.</seg>\n', "")
    with pytest.raises(
        CorpusFormatError,
        match=r"newstest2011-src\.en\.sgm: no segment docid=europarl-fixture-1 id=2 \(reference newstest2011-ref\.fr\.sgm:9",
    ):
        E.write_splits(fixture_config(copy_root), tmp_path / "out")


def test_invalid_utf8_segment_is_quarantined(copy_root, tmp_path):
    ref = copy_root / REF_SGM
    ref.write_bytes(ref.read_bytes().replace("à Brno".encode(), b"\xe0 Brno"))
    manifests = E.write_splits(fixture_config(copy_root), tmp_path)
    assert manifests["test"]["rows"] == 2 and manifests["test"]["quarantine_reasons"] == {"invalid_utf8": 1}
    assert quarantine(tmp_path / "test")[0]["record"]["where"] == "newstest2011-ref.fr.sgm:4"


@pytest.mark.parametrize(
    "line, message",
    [
        ("Parlement Parliament\n", r"dict\.fr-en\.tsv:13: expected '<target word><TAB><source word>'"),
        ("Parlement\t\n", r"dict\.fr-en\.tsv:13: expected"),
        ("Parlement\tEuropean Parliament\n", r"dict\.fr-en\.tsv:13: expected"),
    ],
)
def test_malformed_dictionary_line(copy_root, tmp_path, line, message):
    path = copy_root / "dict.fr-en.tsv"
    path.write_text(path.read_text(encoding="utf-8") + line, encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=message):
        E.write_splits(fixture_config(copy_root), tmp_path / "out")


def test_dictionary_not_utf8(copy_root):
    path = copy_root / "dict.fr-en.tsv"
    path.write_bytes(path.read_bytes() + b"\xe9t\xe9\tsummer\n")
    with pytest.raises(CorpusFormatError, match=r"dict\.fr-en\.tsv:13: not UTF-8"):
        E.load_dictionary(path)


def test_missing_file_and_bad_settings(copy_root, tmp_path):
    (copy_root / "dev" / "newstest2011-ref.fr.sgm").unlink()
    with pytest.raises(FileNotFoundError, match=r"newstest2011-ref\.fr\.sgm"):
        E.write_splits(fixture_config(copy_root), tmp_path / "out")
    with pytest.raises(ValueError, match="unknown Config settings"):
        E.Config.from_dict({"europarl_dir": "a", "newstest_dir": "b", "max_length": 50})
    with pytest.raises(ValueError, match="eval_format"):
        fixture_config(eval_format="xml")


# --------------------------------------------------------------------------- #
# The shared corpora (skipped when ../shared/data is absent)
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def shared() -> tuple[Path, Path]:
    return shared_path("europarl_en_fr"), shared_path("newstest2011_en_fr")


@pytest.mark.shared_data
def test_shared_sgm_and_plain_test_files_hold_the_same_text(shared):
    _, newstest = shared
    sgm = list(E.iter_sgm_pairs(newstest / "newstest2011-src.en.sgm", newstest / "newstest2011-ref.fr.sgm", "nt", "fr"))
    plain = list(E.iter_line_pairs(newstest / "newstest2011.en", newstest / "newstest2011.fr", "nt"))
    assert len(sgm) == len(plain) == 3003
    assert [(p.src, p.tgt) for p in sgm] == [(p.src.strip(), p.tgt.strip()) for p in plain]
    assert sgm[0].id == "nt:aktualne.cz-2010-12-02-60918:1"


@pytest.mark.shared_data
def test_shared_corpus(shared, tmp_path):
    europarl, newstest = shared
    cfg = E.Config(europarl_dir=str(europarl), newstest_dir=str(newstest), shortlist_size=2000)
    manifests = E.write_splits(cfg, tmp_path)
    train = manifests["train"]
    assert (train["rows"], train["rows_in"]) == (2512, 3000)
    assert train["quarantine_reasons"] == {"duplicate_pair": 19, "empty_tgt": 6, "longer_than_max_len": 463}
    assert train["stats"]["shortlist_words"] == 1996
    assert train["stats"]["pointers_identical"] == 545 and train["stats"]["pointers_dictionary"] == 0
    for split in ("valid", "test"):
        assert manifests[split]["rows"] == 3003 and manifests[split]["rows_quarantined"] == 0
        assert manifests[split]["stats"]["tgt_tokens"] == 84608
    first = read_split(tmp_path / "train").slice(0, 1).to_pylist()[0]
    assert (first["id"], first["src"], first["tgt"]) == (
        "europarl-v7.fr-en:1",
        ["Resumption", "of", "the", "session"],
        ["Reprise", "de", "la", "session"],
    )
    empty = [q["record"]["where"] for q in quarantine(tmp_path / "train") if q["reason"] == "empty_tgt"]
    assert empty == [f"europarl-v7.fr-en.fr:{n}" for n in (550, 1488, 1847, 1853, 1890, 2078)]
