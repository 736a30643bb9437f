"""``decode_words`` (pipeline/decoding/decode.py): a model on a pretrained backbone decodes the rows'
pieces, and each record is mapped back to words. Checked on tiny BART (a fast tokenizer) and Marian
(a slow sentencepiece one) backbones made here as tests/models/test_backbone.py makes them, against
values computed apart from ``decode_words``: the best output and n-best searched row by row with
``beam_search`` on the tokenizer's pieces, their text from the Hugging Face tokenizer's own
``convert_tokens_to_string``, and the copy shares from ``copy_shares``."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
import torch

from benchmarks.toy import TOY_SEEN, toy_copy_example
from models.registry import build_model, model_config
from pipeline.decoding.decode import copy_shares, decode_words
from pipeline.decoding.search import beam_search
from pipeline.decoding.settings import EvalConfig
from pipeline.vocab.batching import collate
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.tiny_backbone import make_tiny_backbone
from pipeline.vocab.tokenizer import BackboneTokenizer

# "U" never occurs in the tokenizer's text: its pieces are outside the vocabulary and only a copy
# can output them (tests/models/test_backbone.py's rows).
IDS = ["r0", "r1", "r2"]
SRCS = [["a", "s1", "U7", "s2", "U7", "b"], ["a", "s3", "s3", "b"], ["a", "U2", "b"]]
TGTS = [["b", "s1", "U7", "s2", "U7"], ["b", "s3", "s3"], ["b", "U2"]]
REFS = [[["b", "s1"]], [["b", "s3"], ["s3"]], [["U2"]]]
# batch_size 2: the rows are decoded sorted by length ([r1, r2], then [r0]), not in the table's order.
CFG = EvalConfig.from_dict({"beam_size": 2, "max_len": 8, "batch_size": 2})
KINDS = ("bart", "marian")


@pytest.fixture(scope="module", params=KINDS)
def decoded(request, tmp_path_factory):
    """(tokenizer, model, records of decode_words) for one backbone kind."""
    rng = random.Random(0)
    texts = [" ".join(side) for _ in range(300) for side in toy_copy_example(rng, TOY_SEEN)]
    path = make_tiny_backbone(
        request.param, texts, tmp_path_factory.mktemp(request.param), d_model=16, layers=2, heads=2, vocab_size=120
    )
    tok = BackboneTokenizer.from_backbone(str(path))
    size = len(tok.vocab)
    torch.manual_seed(0)
    cfg = model_config(
        {"backbone": str(path), "backbone_copynet": {}}, "backbone_copynet", src_vocab=size, tgt_vocab=size
    )
    model = build_model("backbone_copynet", cfg).double().eval()
    table = pa.table({"id": IDS, "src": SRCS, "tgt": TGTS, "refs": REFS})
    records = decode_words(model, table, tok, CFG, torch.device("cpu"))
    return tok, model, records


def hf_text(tok: BackboneTokenizer, pieces: list[str]) -> str:
    """The pieces' text by the Hugging Face tokenizer's own decoder."""
    return tok.tokenizer.convert_tokens_to_string(list(pieces)).strip()


@torch.no_grad()
def searched(model, tok: BackboneTokenizer, row: int) -> tuple[list[list[str]], list[float]]:
    """Row ``row`` searched alone: its n-best as pieces, and the best one's copy shares."""
    batch = collate(tok.words_to_pieces([SRCS[row]]), tok.words_to_pieces([TGTS[row]], "tgt"), tok.vocab, tok.vocab)
    hyps = beam_search(model, batch, CFG.beam_size, CFG.max_len)[0]
    outs = [ext_ids_to_tokens(h.ids, batch.oovs[0], tok.vocab) for h in hyps]
    return outs, copy_shares(model, batch, [hyps[0].ids])[0][: len(outs[0])]


def prefix_spans(tok: BackboneTokenizer, pieces: list[str]) -> list[str]:
    """The text each piece adds: the decoded prefix through it, less the decoded prefix before it."""
    texts = [hf_text(tok, pieces[:k]) for k in range(len(pieces) + 1)]
    for before, after in zip(texts, texts[1:]):
        assert after.startswith(before), (before, after)  # each prefix's text extends the previous one
    return [after[len(before) :] for before, after in zip(texts, texts[1:])]


def test_records_keep_the_rows_words_and_order(decoded):
    """``src``/``tgt`` are the row's words (not its pieces) and the kept columns ride along, each
    record at its row although the rows were decoded out of order."""
    tok, _, records = decoded
    assert [rec["id"] for rec in records] == IDS
    for row, rec in enumerate(records):
        assert (rec["src"], rec["tgt"], rec["refs"]) == (SRCS[row], TGTS[row], REFS[row])
        assert tok.words_to_pieces([SRCS[row]])[0] != SRCS[row]  # the check above could tell pieces from words


def test_pieces_are_the_best_output_and_pred_nbest_its_words(decoded):
    tok, model, records = decoded
    for row, rec in enumerate(records):
        outs, _ = searched(model, tok, row)
        assert len(outs) == CFG.beam_size
        assert rec["pieces"] == outs[0], row
        assert rec["nbest"] == [hf_text(tok, out).split() for out in outs], row
        assert rec["pred"] == rec["nbest"][0] == hf_text(tok, rec["pieces"]).split(), row
    # Somewhere a word is made of several pieces, and a piece outside the vocabulary (a copied source
    # piece) is put back as its own text.
    assert any(len(rec["pred"]) != len(rec["pieces"]) for rec in records)
    oov = [(rec, p) for rec in records for p in rec["pieces"] if p not in tok.vocab.stoi]
    assert oov, "no piece outside the vocabulary: the surface put back is not exercised"
    assert all(p in "".join(rec["pred"]) for rec, p in oov)


def test_spans_are_the_text_each_piece_adds(decoded):
    tok, _, records = decoded
    for row, rec in enumerate(records):
        assert len(rec["spans"]) == len(rec["pieces"]), row
        assert rec["spans"] == prefix_spans(tok, rec["pieces"]), row
        assert "".join(rec["spans"]) == hf_text(tok, rec["pieces"]), row


def test_copied_are_the_visible_spans_copied_more_than_half(decoded):
    """``copied``: the spans whose copy share (``copy_shares``) is over 1/2, blank spans left out."""
    tok, model, records = decoded
    seen = {"copied": 0, "generated": 0, "blank": 0}
    for row, rec in enumerate(records):
        _, shares = searched(model, tok, row)
        assert rec["copy_share"] == pytest.approx(shares, abs=1e-9), row
        spans = prefix_spans(tok, rec["pieces"])
        assert rec["copied"] == [s for s, share in zip(spans, shares) if share > 0.5 and s.strip()], row
        for span, share in zip(spans, shares):
            assert abs(share - 0.5) > 1e-6, "a share at 1/2: the threshold's side is a rounding matter"
            if share > 0.5:
                seen["copied" if span.strip() else "blank"] += 1
            elif span.strip():
                seen["generated"] += 1
    # Every case occurs: a span copied, one mostly generated, and a blank one copied (left out).
    assert all(seen.values()), seen
