"""A pretrained backbone's tokenizer as the project's vocabulary (pipeline/vocab/tokenizer.py) and the vocab
stage's record of it, on tiny tokenizers of the three families trained by the test."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pipeline.config.backbones import backbone_vocab_dir, row_backbone
from pipeline.config.paths import TaskPaths
from pipeline.io.files import sha256_tree
from pipeline.io.shards import ShardWriter, make_schema
from pipeline.stages.vocab import task_backbones, tokenize
from pipeline.vocab.encoded import EncodedSplit
from pipeline.vocab.tiny_backbone import KINDS, make_tiny_backbone
from pipeline.vocab.tokenizer import RECORD, BackboneTokenizer
from pipeline.vocab.vocabulary import SPECIALS, Vocab

TEXTS = ["a s1 s2 b", "b s1 s2", "a s3 s4 s5 b", "b s3 s4 s5", "x y z"] * 20
# Marian's target side: other words, so its target sentencepiece model is another one
TARGET_TEXTS = ["t1 t2 t3", "t2 t3 a", "t3 t1 b"] * 20
# the backbone ids of <pad>, <unk>, the decoder start and </s> each family's tiny tokenizer gives
# (Marian's <pad>, its decoder start, is its last id, as opus-mt's)
EXPECTED_SPECIALS = {"bart": [1, 3, 2, 2], "t5": [0, 2, 0, 1], "marian": ["last", 1, "last", 0]}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tok")
    return {
        kind: BackboneTokenizer.from_backbone(
            str(make_tiny_backbone(kind, TEXTS, root / kind, target_texts=TARGET_TEXTS, d_model=8, layers=1))
        )
        for kind in KINDS
    }


@pytest.mark.parametrize("kind", KINDS)
def test_the_vocabulary_is_the_tokenizers_pieces_in_the_projects_order(tokenizers, kind):
    tok = tokenizers[kind]
    assert tok.vocab.itos[:4] == list(SPECIALS)
    last = len(tok.tokenizer) - 1
    assert tok.backbone_ids[:4] == [last if i == "last" else i for i in EXPECTED_SPECIALS[kind]]
    own = set(tok.token_ids.values())
    assert len(tok.vocab) == 4 + len(tok.tokenizer) - len(own)
    assert sorted(tok.backbone_ids[4:]) == tok.backbone_ids[4:] and not own & set(tok.backbone_ids[4:])
    assert tok.vocab.itos[4:] == tok.tokenizer.convert_ids_to_tokens(tok.backbone_ids[4:])


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_characters_keep_their_text_and_come_back(tokenizers, kind):
    """A character the tokenizer never saw is <unk> to it: the piece keeps its surface (outside the
    vocabulary: an extended id), and detokenising gives the text back; the project's <unk> stays."""
    tok = tokenizers[kind]
    text = "a s1 Q2 s2 ÿ b"
    (pieces,) = tok.pieces([text])
    outside = [p for p in pieces if p not in tok.vocab]
    assert outside == ["Q", "ÿ"]
    assert tok.detokenise(pieces) == text
    before_q = pieces[: pieces.index("Q")]  # the pieces of "a s1 " (Marian's sentencepiece: "▁" apart)
    assert tok.detokenise([*before_q, "<unk>"]).replace(" ", "") == "as1<unk>"  # a generated <unk> stays
    spans = tok.spans(pieces)
    assert "".join(spans) == text and len(spans) == len(pieces)


def test_marian_is_its_own_slow_tokenizer_with_a_target_mode(tokenizers):
    """The tiny Marian backbone has the real MarianTokenizer (no fast one exists): sources go through its
    source sentencepiece model, targets through its target model (as ``text_target=`` does); the
    pieces are the same ids either way, one shared vocabulary."""
    from transformers import MarianTokenizer

    tok = tokenizers["marian"]
    assert isinstance(tok.tokenizer, MarianTokenizer) and not tok.fast
    text = "t1 t2 t3 a"
    src, tgt = tok.pieces([text])[0], tok.pieces([text], "tgt")[0]
    assert src != tgt  # two sentencepiece models: the target's knows the t-words
    assert tgt == tok.tokenizer.convert_ids_to_tokens(
        tok.tokenizer(text_target=text, add_special_tokens=False)["input_ids"]
    )
    assert len(tgt) < len(src) and all(p in tok.vocab for p in src + tgt)
    assert tok.detokenise(tgt) == text and tok.detokenise(src) == text
    assert tok.pieces(["a"]) == tok.pieces(["a"], "src")  # the tokenizer is back in its source mode


def test_separate_source_and_target_vocabularies_are_refused(tokenizers):
    marian = tokenizers["marian"].tokenizer
    marian.separate_vocabs = True
    try:
        with pytest.raises(ValueError, match="separate source and target vocabularies"):
            BackboneTokenizer(marian, tokenizers["marian"].token_ids, "opus-mt-xx")
    finally:
        marian.separate_vocabs = False


def test_a_rows_backbone_and_its_vocabulary_folder(tmp_path):
    assert row_backbone({"backbone": "x"}, "backbone_lm") == "x"
    assert row_backbone({"backbone": "x", "backbone_lm": {"backbone": "y"}}, "backbone_lm") == "y"
    assert row_backbone({"backbone": None}, "copynet") is None
    a, b = backbone_vocab_dir(tmp_path, "/one/models/bart"), backbone_vocab_dir(tmp_path, "/two/models/bart")
    assert a.parent == tmp_path / "backbones" and a != b and a.name.startswith("models_bart-")


def test_the_vocab_stage_records_the_tokenizer_and_encodes_in_pieces(tokenizers, tmp_path):
    """tokenize(): the tokenizer's files, backbone.json (name, special ids, sha256 of the files), the
    pieces as src/tgt.vocab, and the train/valid splits encoded in pieces (an unseen character: V + k)."""
    backbone = make_tiny_backbone("bart", TEXTS, tmp_path / "bb", d_model=8, layers=1)
    paths = TaskPaths("toy", tmp_path / "project")
    rows = [{"id": "0", "src": ["a", "s1", "Q2", "b"], "tgt": ["b", "s1", "Q2"], "refs": [["b", "s1", "Q2"]]}]
    for split in ("train", "valid"):
        with ShardWriter(paths.split(split), make_schema()) as writer:
            writer.write(rows)
    params = {
        "mechanisms": ["copynet", "pg_bart", "lm_bart"],
        "variants": {
            "pg_bart": {"mechanism": "backbone_pointer_generator", "model": {"backbone": str(backbone)}},
            "lm_bart": {"mechanism": "backbone_lm", "model": {"backbone": str(backbone)}},
        },
        "model": {"backbone": None},
    }
    assert task_backbones(params, "toy") == [str(backbone)]
    record = tokenize(paths, str(backbone))
    out = backbone_vocab_dir(paths.vocab, str(backbone))
    assert json.loads((out / RECORD).read_text()) == record
    assert record["tokenizer_sha256"] == sha256_tree(out / "tokenizer")
    vocab = Vocab.load(out / "tgt.vocab")
    assert vocab.itos == Vocab.load(out / "src.vocab").itos == BackboneTokenizer.load(out).vocab.itos
    batch = EncodedSplit(out / "ids" / "train", len(vocab)).batch([0])
    assert batch.n_ext == 1 and int(batch.tgt_out[0, 2 + 1]) == len(vocab)  # b ▁ s1 ▁ Q 2 -> Q is V + 0
    assert pa.__version__  # pyarrow is what the encoded split is read with
