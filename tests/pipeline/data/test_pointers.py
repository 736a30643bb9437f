"""Pointer Softmax (Gulcehre et al. 2016, section 5.2) pointer data: pure annotation functions,
entity tagging, and the Gigaword pointer reader on fixtures and on ../shared/data."""

from __future__ import annotations

import importlib.util
import pickle

import pyarrow as pa
import pytest

from pipeline.data.text import entities, pointers
from pipeline.data.text.entities import (
    SpacyTagger,
    TagFormatError,
    TaggerUnavailable,
    entity_mask,
    is_all_caps,
    parse_slash_tags,
    truecase_from_text,
)
from pipeline.data.text.pointers import (
    PlaceholderCollision,
    PointerCounter,
    entity_pointers,
    pointers_per_100,
    unk_pointers,
)
from tests.helpers import FIXTURES as FIXTURES_ROOT
from tests.helpers import StubTagger, quarantine, rows_by_id, shared_path

T, F = True, False


# --------------------------------------------------------------------------- #
# UNK pointers
# --------------------------------------------------------------------------- #

SRC = "tang gonghong set a world record in athens gonghong".split()
TGT = "china 's tang gonghong sets world record".split()
SRC_VOCAB = {"set", "a", "world", "record", "in", "athens"}
TGT_VOCAB = {"china", "'s", "tang", "sets", "world"}


def test_unk_pointers_hand_computed():
    ann = unk_pointers(SRC, TGT, SRC_VOCAB, TGT_VOCAB)
    assert ann.src == "<unk> <unk> set a world record in athens <unk>".split()
    assert ann.tgt == "china 's tang <unk> sets world <unk>".split()
    # gonghong: first source occurrence (1, not 8); record: a target UNK whose source word is in
    # the source shortlist still points (5); tang/world are in the target shortlist: no pointer
    # although they occur in the source.
    assert ann.tgt_pointer == [-1, -1, -1, 1, -1, -1, 5]
    assert ann.tgt_switch == [F, F, F, T, F, F, T]
    assert ann.n_pointers == 2


def test_unk_pointer_to_a_source_unk_and_unmatched_target_unk():
    # The source word is itself rare (UNK in the source) -- the pointer is still made (paper:
    # "the source can have an UNK in the matching position, but we still created a pointer").
    ann = unk_pointers(["zyx", "won"], ["zyx", "qwv", "won"], {"won"}, {"won"})
    assert ann.src == ["<unk>", "won"]
    assert ann.tgt == ["<unk>", "<unk>", "won"]
    assert ann.tgt_pointer == [0, -1, -1]  # qwv: UNK, not in the source -> shortlist UNK
    assert ann.tgt_switch == [T, F, F]


def test_unk_markers_already_in_the_input_never_point():
    # Rush-format data: "UNK"/"<unk>" replaced words we cannot recover; matching them would
    # point at an arbitrary different word.
    ann = unk_pointers(["nec", "UNK", "<unk>"], ["UNK", "<unk>", "nec"], {"nec", "UNK"}, {"nec", "UNK"})
    assert ann.src == ["nec", "<unk>", "<unk>"]
    assert ann.tgt == ["<unk>", "<unk>", "nec"]
    assert ann.tgt_pointer == [-1, -1, -1]
    assert ann.tgt_switch == [F, F, F]


def test_unk_pointers_custom_unk_and_empty_target():
    ann = unk_pointers(["a", "b"], [], {"a"}, set(), unk="UNK")
    assert (ann.src, ann.tgt, ann.tgt_pointer, ann.tgt_switch) == (["a", "UNK"], [], [], [])


# --------------------------------------------------------------------------- #
# Entity pointers
# --------------------------------------------------------------------------- #

E_SRC = "barack obama met angela merkel in berlin , obama said".split()
E_SRC_MASK = [T, T, F, T, T, F, T, F, T, F]
E_TGT = "obama and merkel meet in paris".split()
E_TGT_MASK = [T, F, T, F, F, T]


def test_entity_pointers_hand_computed():
    ann = entity_pointers(E_SRC, E_SRC_MASK, E_TGT, E_TGT_MASK)
    # ids left to right, source first; the repeated "obama" shares id 2; token level, so the
    # headline's lone "obama" matches the source's "barack obama".
    assert ann.src == ["@entity1", "@entity2", "met", "@entity3", "@entity4", "in", "@entity5", ",", "@entity2", "said"]
    assert ann.tgt == ["@entity2", "and", "@entity4", "meet", "in", "@entity6"]  # paris: new id 6
    assert ann.tgt_pointer == [1, -1, 4, -1, -1, -1]  # first occurrence of @entity2 is position 1
    assert ann.tgt_switch == [T, F, T, F, F, F]


def test_entity_pointers_only_exact_anonymised_matches():
    # "berlin" untagged in the source, tagged in the target: it is a placeholder only in the
    # target, so no pointer; "said" tagged nowhere stays a word even though it is in the source.
    ann = entity_pointers(["obama", "in", "berlin", "said"], [T, F, F, F], ["berlin", "said", "obama"], [T, F, T])
    assert ann.src == ["@entity1", "in", "berlin", "said"]
    assert ann.tgt == ["@entity2", "said", "@entity1"]
    assert ann.tgt_pointer == [-1, -1, 0]
    assert ann.tgt_switch == [F, F, T]


def test_entity_ids_restart_per_document():
    a = entity_pointers(["x", "y"], [T, T], ["y"], [T])
    b = entity_pointers(["y"], [T], ["y"], [T])
    assert a.src == ["@entity1", "@entity2"] and a.tgt_pointer == [1]
    assert b.src == ["@entity1"] and b.tgt == ["@entity1"] and b.tgt_pointer == [0]


def test_entity_placeholder_collision_and_mask_length():
    with pytest.raises(PlaceholderCollision, match="@entity3"):
        entity_pointers(["@entity3", "x"], [F, T], ["x"], [T])
    with pytest.raises(ValueError, match="source: 2 tokens but 1 entity flags"):
        entity_pointers(["a", "b"], [T], [], [])
    assert pointers.is_placeholder("@entity12") and not pointers.is_placeholder("@entity")
    with pytest.raises(ValueError):
        pointers.entity_placeholder(0)


# --------------------------------------------------------------------------- #
# Rates
# --------------------------------------------------------------------------- #


def test_pointer_counter_rates():
    counter = PointerCounter()
    counter.add(unk_pointers(SRC, TGT, SRC_VOCAB, TGT_VOCAB))  # 2 pointers, 2 target UNKs
    counter.add(entity_pointers(E_SRC, E_SRC_MASK, E_TGT, E_TGT_MASK))  # 2 pointers
    counter.add(unk_pointers(["a"], ["b"], {"a"}, set()))  # 0 pointers, 1 target UNK
    assert counter.per_100 == pytest.approx(400 / 3)
    assert counter.as_stats() == {
        "examples": 3,
        "tgt_tokens": 14,
        "pointers": 4,
        "examples_with_pointer": 2,
        "tgt_unk": 3,
        "pointers_per_100_examples": 133.33,
    }
    assert pointers_per_100(27, 1000) == pytest.approx(2.7)
    assert pointers_per_100(5, 0) == 0.0
    assert pointers.PAPER_POINTERS_PER_100["entity"] == {"train": 161.0, "valid": 139.0}


# --------------------------------------------------------------------------- #
# Entity labels
# --------------------------------------------------------------------------- #


def test_parse_slash_tags():
    tokens, labels = parse_slash_tags("Qian/PERSON Qichen/PERSON met/O 1/2/O U.S./LOCATION ./O\n")
    assert tokens == ["Qian", "Qichen", "met", "1/2", "U.S.", "."]
    assert labels == ["PERSON", "PERSON", "O", "O", "LOCATION", "O"]
    assert parse_slash_tags("   ") == ([], [])
    for bad in ("Qian/PERSON met", "/O", "met/"):
        with pytest.raises(TagFormatError, match="not word/LABEL"):
            parse_slash_tags(bad)


def test_entity_mask_named_types_only():
    labels = ["B-PER", "I-PER", "O", "DATE", "GPE", "CARDINAL", "ORGANIZATION", "S-MISC", "MONEY"]
    assert entity_mask(labels) == [T, T, F, F, T, F, T, T, F]
    assert entity_mask(labels, keep={"DATE"}) == [F, F, F, T, F, F, F, F, F]


def test_truecase_all_caps_headline():
    # most frequent spelling wins ('new' x2 over 'NEW'); hyphenated words whole; 'U.K.' through its
    # core 'U.K'; words absent from the body ('aviation') are lowercased
    body = (
        "Visiting Economics Minister Kuo Ming-tsai was wary of the new EU-Taiwan "
        "rules. Kuo met the press in Taipei's new terminal; the U.K. said NEW things."
    )
    headline = "KUO MING-TSAI WARY OF NEW EU-TAIWAN AVIATION RULES IN U.K. 'S TAIPEI".split()
    assert is_all_caps(headline) and not is_all_caps(["Kuo", "MET"]) and not is_all_caps(["1997"])
    assert truecase_from_text(headline, body) == (
        "Kuo Ming-tsai wary of new EU-Taiwan aviation rules in U.K. 's Taipei".split()
    )


def test_tagger_stub_and_label_alignment_check():
    batch = [["Qian", "met", "Obuchi"], []]
    labels = StubTagger()(batch)
    entities.check_labels(batch, labels)
    assert [entity_mask(x) for x in labels] == [[T, F, T], []]
    with pytest.raises(ValueError, match="do not align"):
        entities.check_labels(batch, [["O"], []])


def test_spacy_tagger_missing_model_is_a_clear_error():
    tagger = SpacyTagger("no_such_spacy_model_xyz")
    assert pickle.loads(pickle.dumps(tagger)).model == "no_such_spacy_model_xyz"
    with pytest.raises(TaggerUnavailable, match="not installed"):
        tagger([["Qian", "met", "Obuchi"]])


HAVE_SPACY_MODEL = (
    importlib.util.find_spec("spacy") is not None and importlib.util.find_spec(entities.DEFAULT_SPACY_MODEL) is not None
)


@pytest.mark.skipif(not HAVE_SPACY_MODEL, reason="spaCy or its English model is not installed (extra 'ner')")
def test_spacy_tagger_real_model():
    tagger = SpacyTagger()
    batch = [
        "Visiting Chinese Trade Minister Kuo Ming-tsai met reporters in Osaka on Monday .".split(),
        [],
        "-LRB- By Chiang Yu-ting -RRB-".split(),
    ]
    labels = tagger(batch)
    entities.check_labels(batch, labels)
    assert labels[0][4:6] == ["PERSON", "PERSON"]
    assert labels[0][9] == "GPE"
    assert labels[0][11] == "DATE"
    assert entity_mask(labels[0]) == [F, T, F, F, T, T, F, F, F, T, F, F, F]
    assert labels[1] == []
    assert labels[2] == ["O", "O", "PERSON", "PERSON", "O"]
    # CoreNLP-style token labels: the span's leading article and its brackets are O.
    words = "The European Chamber of Trade -LRB- EuroCham -RRB- in Kaohsiung appealed to the United Kingdom .".split()
    assert tagger([words])[0] == [
        "O",
        "ORG",
        "ORG",
        "ORG",
        "ORG",
        "O",
        "ORG",
        "O",
        "O",
        "GPE",
        "O",
        "O",
        "O",
        "GPE",
        "GPE",
        "O",
    ]


@pytest.mark.skipif(not HAVE_SPACY_MODEL, reason="spaCy or its English model is not installed (extra 'ner')")
def test_sgml_entity_pointers_with_spacy(tmp_path):
    manifests = gp.write_splits(_sgml_cfg("entity"), tmp_path)  # the default tagger: spaCy
    rows = rows_by_id(tmp_path / "train")
    acer = rows["CNA_ENG_19971001.0002"]
    assert acer["src"][:6] == ["@entity1", "'s", "@entity2", "@entity3", "posted", "record"]  # Taiwan 's Acer Inc.
    assert acer["tgt"] == "acer posts record profits in @entity1".split()  # headline "Acer" untagged
    assert acer["tgt_pointer"] == [-1, -1, -1, -1, -1, 0]
    lee = rows["CNA_ENG_19971001.0004"]
    assert lee["tgt"] == "@entity1 @entity2 @entity7 @entity4 @entity5 in @entity6".split()
    assert lee["tgt_pointer"] == [1, 2, -1, 6, 7, -1, 9]
    assert manifests["train"]["stats"]["pointers"] == 6


# --------------------------------------------------------------------------- #
# The Gigaword pointer reader
# --------------------------------------------------------------------------- #

from pipeline.data.corpora import gigaword_pointers as gp  # noqa: E402
from pipeline.data.corpora.common import CorpusFormatError, EmptySplitError  # noqa: E402
from pipeline.io.shards import read_split  # noqa: E402

FIXTURES = FIXTURES_ROOT / "gigaword_pointers"


def _sgml_cfg(mode: str, **extra) -> gp.Config:
    return gp.Config.from_dict(
        {
            "format": "sgml",
            "mode": mode,
            "sgml_files": [str(FIXTURES / "train.sgml")],
            "test_sgml_files": [str(FIXTURES / "test.sgml")],
            "valid_fraction": 0.0,
            "test_fraction": 0.0,
            **extra,
        }
    )


def test_config_checks():
    with pytest.raises(ValueError, match="mode must be one of"):
        _sgml_cfg("both")
    with pytest.raises(ValueError, match="unknown Config settings"):
        gp.Config.from_dict({"sgml_files": ["x"], "moed": "unk"})
    with pytest.raises(ValueError, match="needs train files"):
        gp.Config.from_dict({"format": "rush", "test_src_file": "a", "test_tgt_file": "b"})
    assert gp.SCHEMA.field("tgt_pointer").type == pa.list_(pa.int32())
    assert gp.SCHEMA.field("tgt_switch").type == pa.list_(pa.bool_())


def _sgml_train(tmp_path, mode: str, tagger=None, **settings):
    """The SGML fixture written in ``mode``: its manifests and train rows by id (2 train rows, 1 test)."""
    manifests = gp.write_splits(_sgml_cfg(mode, **settings), tmp_path, **({"tagger": tagger} if tagger else {}))
    assert {s: m["rows"] for s, m in manifests.items()} == {"train": 2, "valid": 0, "test": 1}
    return manifests, rows_by_id(tmp_path / "train")


def test_sgml_unk_pointers_hand_computed(tmp_path):
    manifests, rows = _sgml_train(tmp_path, "unk", unk_min_count=2)
    assert manifests["train"]["quarantine_reasons"] == {"bad_headline_word": 1, "non_story": 1}
    # Train counts (>= 2): source {acer chairman stan shih in taipei on the 's .}, target {in}.
    acer = rows["CNA_ENG_19971001.0002"]
    assert (
        acer["src"]
        == (
            "<unk> 's acer <unk> <unk> <unk> <unk> in the <unk> <unk> <unk> chairman stan shih "
            "<unk> <unk> in taipei on <unk> ."
        ).split()
    )
    assert acer["tgt_orig"] == "acer posts record profits in taiwan".split()
    assert acer["tgt"] == "<unk> <unk> <unk> <unk> in <unk>".split()
    assert acer["tgt_pointer"] == [2, -1, 5, 6, -1, 0]  # posts: only "posted" in the source
    assert acer["tgt_switch"] == [T, F, T, T, F, T]
    assert acer["refs"] == [acer["tgt"]]
    lee = rows["CNA_ENG_19971001.0004"]
    assert lee["tgt"] == "<unk> <unk> <unk> <unk> <unk> in <unk>".split()
    assert lee["tgt_pointer"] == [1, 2, -1, 6, 7, -1, 9]
    test = rows_by_id(tmp_path / "test")["CNA_ENG_20040301.0007"]  # the train vocabulary applies
    assert (
        test["src"]
        == (
            "acer <unk> stan shih <unk> on <unk> <unk> the <unk> <unk> <unk> <unk> <unk> <unk> "
            "<unk> in <unk> <unk> <unk> ."
        ).split()
    )
    assert test["tgt_pointer"] == [3, -1, 0, 11, 12, -1, 17]
    stats = manifests["train"]["stats"]
    assert {
        k: stats[k]
        for k in (
            "examples",
            "pointers",
            "pointers_per_100_examples",
            "tgt_unk",
            "src_vocab",
            "tgt_vocab",
            "docs",
            "filtered_bad_headline_word",
        )
    } == {
        "examples": 2,
        "pointers": 9,
        "pointers_per_100_examples": 450.0,
        "tgt_unk": 11,
        "src_vocab": 10,
        "tgt_vocab": 1,
        "docs": 4,
        "filtered_bad_headline_word": 1,
    }
    assert manifests["test"]["stats"]["pointers_per_100_examples"] == 500.0


def test_sgml_entity_pointers_with_stub_tagger(tmp_path):
    manifests, rows = _sgml_train(tmp_path, "entity", tagger=StubTagger())
    acer = rows["CNA_ENG_19971001.0002"]
    # The all-caps headline was recased from the body ("Acer posts record profits in Taiwan").
    assert (
        acer["src"]
        == (
            "@entity1 's @entity2 @entity3 posted record profits in the third quarter , chairman "
            "@entity4 @entity5 told reporters in @entity6 on @entity7 ."
        ).split()
    )
    assert acer["tgt"] == "@entity2 posts record profits in @entity1".split()
    assert acer["tgt_pointer"] == [2, -1, -1, -1, -1, 0]
    assert acer["tgt_orig"] == "acer posts record profits in taiwan".split()
    lee = rows["CNA_ENG_19971001.0004"]  # a mixed-case headline is tagged as it is
    assert lee["tgt"] == "@entity2 @entity3 @entity9 @entity5 @entity6 @entity10 @entity7".split()
    assert lee["tgt_pointer"] == [1, 2, -1, 6, 7, -1, 9]
    test = rows_by_id(tmp_path / "test")["CNA_ENG_20040301.0007"]
    assert test["tgt"] == "@entity3 says @entity1 will expand in @entity6".split()
    assert test["tgt_pointer"] == [3, -1, 0, -1, -1, -1, 17]
    stats = manifests["train"]["stats"]
    assert {
        k: stats[k]
        for k in (
            "examples",
            "pointers",
            "pointers_per_100_examples",
            "headlines_recased",
            "src_entity_tokens",
            "tgt_entity_tokens",
            "entity_ids",
        )
    } == {
        "examples": 2,
        "pointers": 7,
        "pointers_per_100_examples": 350.0,
        "headlines_recased": 1,
        "src_entity_tokens": 15,
        "tgt_entity_tokens": 9,
        "entity_ids": 17,
    }
    assert manifests["test"]["stats"]["pointers_per_100_examples"] == 300.0


def test_process_pool_gives_the_serial_result(tmp_path):
    from pipeline.io.parallel import ProcessMap

    cfg = _sgml_cfg("entity", chunk_size=1)  # one document per chunk: chunks cross processes
    serial = gp.write_splits(cfg, tmp_path / "serial", tagger=StubTagger())
    with ProcessMap(2) as pool:
        pooled = gp.write_splits(cfg, tmp_path / "pool", map_chunks=pool, tagger=StubTagger())
    for split in ("train", "test"):
        assert pooled[split]["content_sha256"] == serial[split]["content_sha256"]
        assert pooled[split]["stats"] == serial[split]["stats"]


def test_sgml_bad_input(tmp_path):
    for mode in ("unk", "entity"):
        cfg = gp.Config.from_dict(
            {"mode": mode, "sgml_files": [str(FIXTURES / "bad_utf8.sgml")], "valid_fraction": 0.0, "test_fraction": 0.0}
        )
        # its only document is quarantined: an empty train split is an error naming the file
        bad = FIXTURES / "bad_utf8.sgml"
        with pytest.raises(EmptySplitError, match=r"its only record was quarantined \(invalid_utf8 1\)") as err:
            gp.write_splits(cfg, tmp_path / mode, tagger=StubTagger())
        assert err.value.paths == [str(bad)] and f"first: {bad}:1 (invalid_utf8)" in str(err.value)
        assert not (tmp_path / mode).exists()
        cfg = gp.Config.from_dict(
            {
                "mode": mode,
                "sgml_files": [str(bad), str(FIXTURES / "train.sgml")],
                "valid_fraction": 0.0,
                "test_fraction": 0.0,
            }
        )
        manifests = gp.write_splits(cfg, tmp_path / mode, tagger=StubTagger())
        assert manifests["train"]["quarantine_reasons"]["invalid_utf8"] == 1
        cfg = gp.Config.from_dict({"mode": mode, "sgml_files": [str(FIXTURES / "unclosed.sgml")]})
        with pytest.raises(CorpusFormatError, match=r"unclosed.sgml:5: unclosed <TEXT>"):
            gp.write_splits(cfg, tmp_path / "x", tagger=StubTagger())


def test_missing_tagger_fails_before_reading(tmp_path):
    cfg = _sgml_cfg("entity", ner_model="no_such_spacy_model_xyz")
    with pytest.raises(TaggerUnavailable):
        gp.write_splits(cfg, tmp_path)
    assert not (tmp_path / "train").exists()


def _rush_cfg(mode: str, **extra) -> gp.Config:
    return gp.Config.from_dict({"format": "rush", "mode": mode, **extra})


def test_rush_unk_pointers_hand_computed(tmp_path):
    cfg = _rush_cfg(
        "unk",
        unk_min_count=2,
        train_src_file=str(FIXTURES / "train.article.txt"),
        train_tgt_file=str(FIXTURES / "train.title.txt"),
        test_src_file=str(FIXTURES / "input.txt"),
        test_tgt_file=str(FIXTURES / "task1_ref0.txt"),
    )
    manifests = gp.write_splits(cfg, tmp_path)
    rows = list(rows_by_id(tmp_path / "train").values())
    assert [r["src"] for r in rows] == [
        "tang <unk> set a world record in athens .".split(),
        "<unk> <unk> tang <unk> a world <unk> in athens .".split(),
        "<unk> <unk> set a record .".split(),
    ]
    assert [r["tgt"] for r in rows] == [
        "china 's tang <unk> sets world record".split(),
        "china 's tang <unk> world <unk>".split(),
        "<unk> sets record".split(),
    ]
    # wins: not in the source ("won"); zhang -> the source's first token, itself a Rush <unk> slot.
    assert [r["tgt_pointer"] for r in rows] == [[-1, -1, -1, 1, -1, -1, -1], [-1, -1, -1, -1, -1, 6], [0, -1, -1]]
    (test,) = rows_by_id(tmp_path / "test").values()
    assert test["id"] == "input.txt:1"
    assert test["src"] == "<unk> <unk> <unk> tang <unk> in athens .".split()
    assert test["tgt"] == ["<unk>"] * 5
    assert test["tgt_pointer"] == [0, -1, -1, 5, 6]  # the test set's own UNK never points
    assert manifests["train"]["stats"]["pointers_per_100_examples"] == 100.0
    assert (manifests["train"]["stats"]["src_vocab"], manifests["train"]["stats"]["tgt_vocab"]) == (8, 6)
    assert manifests["test"]["stats"]["pointers"] == 3


def test_rush_tagged_entity_pointers_and_bad_lines(tmp_path):
    cfg = _rush_cfg(
        "entity",
        max_tokens=20,
        train_src_file=str(FIXTURES / "train.article.tag"),
        train_tgt_file=str(FIXTURES / "train.title.tag"),
    )
    manifests = gp.write_splits(cfg, tmp_path)
    rows = list(rows_by_id(tmp_path / "train").values())
    assert [r["id"] for r in rows] == ["train.article.tag:1", "train.article.tag:2", "train.article.tag:7"]
    assert rows[0]["src"] == [
        "@entity1",
        "@entity2",
        "met",
        "@entity3",
        "@entity4",
        "in",
        "@entity5",
        ",",
        "@entity2",
        "said",
        ".",
    ]
    assert rows[0]["tgt"] == ["@entity2", "and", "@entity4", "meet", "in", "@entity6"]
    assert rows[0]["tgt_pointer"] == [1, -1, 4, -1, -1, -1]
    assert rows[1]["src"] == ["@entity1", "'s", "@entity2", "posted", "####", "profits", "."]  # DATE: no entity
    assert rows[1]["tgt"] == ["@entity2", "profits", "up", "in", "####"]
    assert rows[1]["tgt_pointer"] == [2, -1, -1, -1, -1]
    assert rows[1]["src_orig"] == ["taiwan", "'s", "acer", "posted", "####", "profits", "."]
    # An input "@entity1" is digit-masked to "@entity#" by the Rush normalisation: a plain word,
    # never a placeholder.
    assert rows[2]["src"] == ["users", "of", "@entity#", "complained", "."]
    assert rows[2]["tgt_pointer"] == [-1]
    m = manifests["train"]
    assert m["quarantine_reasons"] == {"bad_tags": 1, "empty_src": 1, "invalid_utf8": 1, "src_too_long": 1}
    assert (m["rows_in"], m["rows"]) == (7, 3)
    assert {
        k: m["stats"][k]
        for k in (
            "examples",
            "pointers",
            "pointers_per_100_examples",
            "src_entity_tokens",
            "tgt_entity_tokens",
            "entity_ids",
        )
    } == {
        "examples": 3,
        "pointers": 3,
        "pointers_per_100_examples": 100.0,
        "src_entity_tokens": 8,
        "tgt_entity_tokens": 4,
        "entity_ids": 8,
    }
    where = {q["reason"]: q["record"]["where"] for q in quarantine(tmp_path / "train")}
    assert where["bad_tags"] == "train.article.tag:4" and where["invalid_utf8"] == "train.article.tag:5"


def test_rush_tagged_file_errors(tmp_path):
    cfg = _rush_cfg(
        "entity", train_src_file=str(FIXTURES / "train.article.tag"), train_tgt_file=str(FIXTURES / "short.title.tag")
    )
    with pytest.raises(CorpusFormatError, match=r"train.article.tag:2: line-aligned files differ"):
        gp.write_splits(cfg, tmp_path)
    # The plain (untagged) Rush release given to entity mode: an error at its first line.
    cfg = _rush_cfg(
        "entity", train_src_file=str(FIXTURES / "train.article.txt"), train_tgt_file=str(FIXTURES / "train.title.txt")
    )
    with pytest.raises(CorpusFormatError, match=r"train.article.txt:1: .*neither case nor tags"):
        gp.write_splits(cfg, tmp_path)
    assert not (tmp_path / "train").exists()


# --------------------------------------------------------------------------- #
# ../shared/data (skipped when absent)
# --------------------------------------------------------------------------- #


def _summary(manifests: dict) -> dict:
    return {
        s: (m["rows"], m["rows_quarantined"], m["stats"]["pointers"], m["stats"]["pointers_per_100_examples"])
        for s, m in manifests.items()
    }


@pytest.mark.shared_data
def test_shared_cna_sgml_unk(tmp_path):
    cna = shared_path("gigaword_raw_cna_sample")
    cfg = gp.Config.from_dict({"mode": "unk", "sgml_files": [str(cna / "cna_eng_*")]})
    manifests = gp.write_splits(cfg, tmp_path)
    # (rows, quarantined, pointers, per 100): 1,048 train pairs make a tiny vocabulary (956 source
    # / 290 target words >= 5), hence far more UNKs than the paper's 3.8M pairs (2.7 / 9.1).
    assert _summary(manifests) == {
        "train": (1045, 660, 2033, 193.99),
        "valid": (56, 38, 128, 228.57),
        "test": (67, 14, 146, 217.91),
    }
    train = manifests["train"]
    assert (train["stats"]["src_vocab"], train["stats"]["tgt_vocab"]) == (956, 290)
    assert train["quarantine_reasons"]["non_story"] == 257 and train["quarantine_reasons"]["bad_headline_word"] == 343
    table = read_split(tmp_path / "valid")
    for row in table.to_pylist():  # every pointer is a target UNK pointing at its original word
        for t, p in enumerate(row["tgt_pointer"]):
            assert row["tgt_switch"][t] == (p >= 0)
            if p >= 0:
                assert row["tgt"][t] == "<unk>" and row["src_orig"][p] == row["tgt_orig"][t]
                assert row["tgt_orig"][t] not in row["src_orig"][:p]


@pytest.mark.shared_data
def test_shared_cna_sgml_entity_stub_tagger(tmp_path):
    cna = shared_path("gigaword_raw_cna_sample")
    cfg = gp.Config.from_dict({"mode": "entity", "sgml_files": [str(cna / "cna_eng_*")]})
    manifests = gp.write_splits(cfg, tmp_path, tagger=StubTagger())
    assert _summary(manifests) == {
        "train": (1034, 671, 1453, 137.86),
        "valid": (56, 38, 82, 146.43),
        "test": (67, 14, 101, 150.75),
    }
    assert manifests["train"]["stats"]["headlines_recased"] == 1053  # CNA headlines are upper case
    for row in read_split(tmp_path / "test").to_pylist():
        for t, p in enumerate(row["tgt_pointer"]):
            if p >= 0:
                assert row["tgt"][t] == row["src"][p] and row["tgt"][t].startswith("@entity")


@pytest.mark.shared_data
def test_shared_rush_release_unk(tmp_path):
    train, test = shared_path("gigaword_train_slice"), shared_path("gigaword_test_rush")
    cfg = gp.Config.from_dict(
        {
            "format": "rush",
            "mode": "unk",
            "train_src_file": str(train / "train.article.txt"),
            "train_tgt_file": str(train / "train.title.txt"),
            "test_src_file": str(test / "input.txt"),
            "test_tgt_file": str(test / "task1_ref0.txt"),
        }
    )
    manifests = gp.write_splits(cfg, tmp_path)
    assert _summary(manifests) == {"train": (874, 126, 1442, 163.68), "test": (1451, 0, 3284, 226.33)}
    assert manifests["train"]["quarantine_reasons"] == {"duplicate_pair": 126}
    first = read_split(tmp_path / "test").slice(0, 1).to_pylist()[0]
    assert first["tgt_orig"] == "nec <unk> in computer sales tie-up".split()  # the release's UNK
    assert first["tgt_pointer"][:2] == [2, -1]  # nec -> "japan 's nec"; <unk> never points
