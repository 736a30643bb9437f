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
# the backbone ids of <pad>, <unk>, the decoder start and </s> each family's tiny tokenizer gives
EXPECTED_SPECIALS = {"bart": [1, 3, 2, 2], "t5": [0, 2, 0, 1], "marian": [2, 1, 2, 0]}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tok")
    return {
        kind: BackboneTokenizer.from_backbone(str(make_tiny_backbone(kind, TEXTS, root / kind, d_model=8, layers=1)))
        for kind in KINDS
    }


@pytest.mark.parametrize("kind", KINDS)
def test_the_vocabulary_is_the_tokenizers_pieces_in_the_projects_order(tokenizers, kind):
    tok = tokenizers[kind]
    assert tok.vocab.itos[:4] == list(SPECIALS)
    assert tok.backbone_ids[:4] == EXPECTED_SPECIALS[kind]
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
    assert tok.detokenise([*pieces[:2], "<unk>"]) == "a s1<unk>"  # a generated <unk> stays (glued: not word-initial)
    spans = tok.spans(pieces)
    assert "".join(spans) == text and len(spans) == len(pieces)


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
