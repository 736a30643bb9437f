"""SentencePiece as an optional tokeniser: round trips, train-only training, determinism, re-tokenising shards."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.data.corpora.common import Quarantined, write_corpus
from pipeline.data.text import subword as S
from pipeline.io.parallel import ProcessMap
from pipeline.io.shards import make_schema, read_manifest, read_split
from tests.helpers import quarantine, shard_row, shared_path

EN = [
    "Resumption of the session",
    "I declare resumed the session of the European Parliament adjourned on Friday 17 December 1999.",
    "Please rise, then, for this minute' s silence.",
    "You will be aware from the press and television that there have been a number of bomb explosions.",
]
FR = [
    "Reprise de la session",
    "Je déclare reprise la session du Parlement européen qui avait été interrompue le vendredi 17 décembre.",
    "Je vous invite à vous lever pour cette minute de silence.",
    "Qu'est ce qu'il va se passer? CSSD ne connait ni Voldemort ni de pâtisserie à Prague.",
]
ZH = [
    "林志颖公司疑涉虚假营销无厂房无研发",
    "日前，方舟子发文直指林志颖旗下爱碧丽推销假保健品，引起哗然。",
    "号称有“逆生长”功效的爱碧丽“梦幻奇迹限量组”售价高达1080元，实际成本仅为每瓶4元！",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("spm") / "joint"
    return S.train_sentencepiece((EN + FR + ZH) * 20, prefix, vocab_size=400, hard_vocab_limit=False)


def test_round_trip_english_french_chinese(model):
    tok = S.SentencePieceTokenizer(model)
    unseen = [
        "Moelis & Co., which has already received $1.2 million, will get a $9.5-million payment.",
        "Les nouveaux élus de CSSD à la mairie devront surmonter une réelle barrière linguistique.",
        "韩方应对路径可以概括为：企业道歉担责；政府公正不护短；民间祈福关怀。",  # full-width punctuation
        "  two  spaces, a\ttab and «guillemets» ",
    ]
    for text in EN + FR + ZH + unseen:
        pieces = tok.encode(text)
        assert tok.decode(pieces) == text
    # a character the model never saw falls back to its UTF-8 bytes, never <unk>
    assert tok.encode("鑫") == ["▁", "<0xE9>", "<0x91>", "<0xAB>"]
    assert "<unk>" not in tok.encode(unseen[2])
    words = ["Qu'", "est", "ce", "qu'", "il", "va", "se", "passer", "?"]
    assert tok.decode_tokens(tok.encode_tokens(words)) == words
    assert tok.decode_tokens([]) == [] and tok.encode_tokens([]) == []


def test_same_input_and_seed_give_the_same_model(model, tmp_path):
    again = S.train_sentencepiece((EN + FR + ZH) * 20, tmp_path / "again", vocab_size=400, hard_vocab_limit=False)
    assert again.read_bytes() == model.read_bytes()
    assert (tmp_path / "again.vocab").read_text(encoding="utf-8") == model.with_suffix(".vocab").read_text(
        encoding="utf-8"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.model", "again.vocab"]  # no temp dir left


def test_training_reads_the_train_split_only(tmp_path):
    schema = make_schema()
    train = [shard_row(f"t{i}", s, t) for i, (s, t) in enumerate(zip(EN, FR))]
    write_corpus(
        tmp_path / "corpus",
        {
            "train": iter(train * 5),  # duplicates are quarantined by write_corpus; 4 rows stay
            "valid": iter([shard_row("v0", "Ωμέγα ψ", "Ωμέγα ψ")]),  # Greek: only in valid
            "test": iter([shard_row("e0", "Жук ж", "Жук ж")]),  # Cyrillic: only in test
        },
        schema,
    )
    model = S.train_sentencepiece_from_corpus(
        tmp_path / "corpus", tmp_path / "m", vocab_size=400, hard_vocab_limit=False
    )
    tok = S.SentencePieceTokenizer(model)
    pieces = {tok.sp.id_to_piece(i) for i in range(len(tok))}
    assert not any(ch in piece for piece in pieces for ch in "ΩμέγαψЖукж")
    assert tok.encode("ж") == ["▁", "<0xD0>", "<0xB6>"]  # bytes: the model never saw it
    assert "▁session" in pieces  # a frequent train word
    texts = list(S.split_texts(tmp_path / "corpus" / "train"))
    assert texts[:2] == [EN[0], FR[0]] and len(texts) == 8  # src then tgt of each of the 4 rows


def test_retokenize_split_keeps_accounting_and_round_trips(model, tmp_path):
    schema = make_schema([pa.field("rule_id", pa.int32()), pa.field("tgt_switch", pa.list_(pa.bool_()))])
    rows = [
        shard_row("a", "Reprise de la session", "Resumption of the session", rule_id=1, tgt_switch=[False] * 4),
        shard_row("b", "林 志颖 公司", "日前 ， 方舟子", rule_id=2, tgt_switch=[True, False, False]),
        shard_row("c", "odd \u2581token", "x", rule_id=3, tgt_switch=[False]),  # U+2581 cannot round-trip
    ]
    write_corpus(tmp_path / "words", {"train": iter([*rows, Quarantined("empty_tgt", "f.fr:9", {"src": "q"})])}, schema)

    with pytest.raises(ValueError, match=r"tgt_switch.*drop_columns"):
        S.retokenize_split(tmp_path / "words" / "train", tmp_path / "pieces" / "train", model)

    manifest = S.retokenize_split(
        tmp_path / "words" / "train", tmp_path / "pieces" / "train", model, drop_columns=["tgt_switch"]
    )
    assert (manifest["rows"], manifest["rows_in"]) == (2, 4)
    assert manifest["quarantine_reasons"] == {"empty_tgt": 1, "token_not_joinable": 1}
    assert manifest["params"]["input_content_sha256"] == read_manifest(tmp_path / "words" / "train")["content_sha256"]
    assert manifest["stats"]["src_tokens"] == 7 and manifest["stats"]["src_pieces"] >= 7
    out = read_split(tmp_path / "pieces" / "train")
    assert out.schema.names == ["id", "src", "tgt", "refs", "rule_id"]
    tok = S.SentencePieceTokenizer(model)
    for new, old in zip(out.to_pylist(), rows):
        assert new["id"] == old["id"] and new["rule_id"] == old["rule_id"]
        assert tok.decode_tokens(new["src"]) == old["src"] and tok.decode_tokens(new["tgt"]) == old["tgt"]
        assert [tok.decode_tokens(r) for r in new["refs"]] == old["refs"]
    first = out.to_pylist()[0]
    assert first["src"] == tok.encode("Reprise de la session")
    carried = quarantine(tmp_path / "pieces" / "train")
    assert carried[0] == {"reason": "empty_tgt", "record": {"where": "f.fr:9", "record": {"src": "q"}}}


def test_a_features_column_is_carried_as_it_is(model, tmp_path):
    """Tags kept apart from the source are not aligned with its words: no drop_columns needed, unchanged."""
    schema = make_schema([pa.field("features", pa.list_(pa.string()))])
    rows = [shard_row("a", EN[0], FR[0], features=["V", "PST"]), shard_row("b", EN[1], FR[1], features=[])]
    write_corpus(tmp_path / "words", {"train": iter(rows)}, schema)
    S.retokenize_split(tmp_path / "words" / "train", tmp_path / "pieces" / "train", model)
    assert [r["features"] for r in read_split(tmp_path / "pieces" / "train").to_pylist()] == [["V", "PST"], []]


def test_retokenize_corpus_in_parallel_equals_serial(model, tmp_path):
    splits = {s: iter([shard_row(f"{s}{i}", EN[i], FR[i]) for i in range(len(EN))]) for s in ("train", "test")}
    write_corpus(tmp_path / "words", splits, make_schema(), dedup_train=False)
    serial = S.retokenize_corpus(tmp_path / "words", tmp_path / "serial", model, chunk_rows=1)
    with ProcessMap(2) as pmap:
        parallel = S.retokenize_corpus(tmp_path / "words", tmp_path / "parallel", model, chunk_rows=1, map_chunks=pmap)
    assert list(serial) == ["test", "train"]
    assert {s: m["content_sha256"] for s, m in serial.items()} == {s: m["content_sha256"] for s, m in parallel.items()}


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        S.train_sentencepiece(EN, tmp_path / "m", vocab_size=300, model_type="wordpiece")
    with pytest.raises(FileNotFoundError, match="no SentencePiece model"):
        S.SentencePieceTokenizer(tmp_path / "missing.model")
    with pytest.raises(FileNotFoundError, match="no split directories"):
        S.retokenize_corpus(tmp_path, tmp_path / "out", tmp_path / "m.model")


@pytest.mark.shared_data
def test_shared_corpora_round_trip(tmp_path):
    europarl, lcsts = shared_path("europarl_en_fr"), shared_path("lcsts_clge_subset")
    fr = (europarl / "europarl-v7.fr-en.fr").read_text(encoding="utf-8").split("\n")
    en = (europarl / "europarl-v7.fr-en.en").read_text(encoding="utf-8").split("\n")
    zh = [f for line in (lcsts / "train.tsv").read_text(encoding="utf-8").splitlines()[:1000] for f in line.split("\t")]
    model = S.train_sentencepiece(fr[:1000] + en[:1000] + zh, tmp_path / "shared", vocab_size=4000)
    tok = S.SentencePieceTokenizer(model)
    held_out = fr[2000:] + en[2000:] + (lcsts / "val.tsv").read_text(encoding="utf-8").splitlines()
    assert len(held_out) == 2000 + 974
    assert all(tok.decode(tok.encode(t)) == t for t in held_out)
