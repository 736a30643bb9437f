"""Model settings that cannot work are refused when the model is built, with a message naming the
setting and the sizes: a Pointer Softmax shortlist larger than a backbone's vocabulary
(models/backbone_heads.py) and transformer-decoder heads that do not divide its size
(models/transformer_decoder.py). The backbone is a tiny BART made here, as tests/models/test_backbone.py
makes them (a tokenizer trained on the toy text, fresh weights; no network)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from benchmarks.toy import TOY_SEEN, toy_copy_example
from models.backbone_heads import BackbonePointerSoftmaxOutput
from models.registry import build_model, model_config
from models.transformer_decoder import TransformerDecoder
from pipeline.vocab.tiny_backbone import make_tiny_backbone
from pipeline.vocab.tokenizer import BackboneTokenizer

NAME = "backbone_pointer_softmax"


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    """(directory, project vocabulary size) of a tiny BART."""
    rng = random.Random(0)
    texts = [" ".join(side) for _ in range(100) for side in toy_copy_example(rng, TOY_SEEN)]
    path = make_tiny_backbone("bart", texts, tmp_path_factory.mktemp("bart"), d_model=16, layers=2, heads=2)
    return path, len(BackboneTokenizer.from_backbone(str(path)).vocab)


def pointer_softmax(path, size: int, **options):
    torch.manual_seed(0)
    cfg = model_config({"backbone": str(path), NAME: options}, NAME, src_vocab=size, tgt_vocab=size)
    return build_model(NAME, cfg)


def test_a_shortlist_of_the_vocabulary_size_or_more_is_the_whole_vocabulary(bart):
    """As the recurrent head: the shortlist is clamped to the vocabulary (a shared default larger than a
    small vocabulary trains instead of failing), and the whole vocabulary is the default (None) spelled out."""
    path, size = bart
    for shortlist, kept, limit in (
        (size + 1, size, size),
        (10 * size, size, size),
        (size, size, size),
        (size - 1, size - 1, size - 1),
        (None, None, size),
    ):
        output = pointer_softmax(path, size, shortlist=shortlist).output
        assert isinstance(output, BackbonePointerSoftmaxOutput)
        assert (output.shortlist, output.limit, output.vocab) == (kept, limit, size)


def test_a_clamped_shortlist_scores_as_the_whole_vocabulary(bart):
    """The same weights with shortlist None and 10 x V give the same scores: no id is masked."""
    path, size = bart
    whole, clamped = pointer_softmax(path, size), pointer_softmax(path, size, shortlist=10 * size)
    clamped.load_state_dict(whole.state_dict())
    s, context = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    view = {
        "lm_logits": torch.randn(2, 3, size),  # (B, T, V)
        "ps_allowed": torch.ones(2, size, dtype=torch.bool),  # (B, V)
        "attn": torch.softmax(torch.randn(2, 3, 5), dim=-1),  # (B, T, S)
        "src_mask": torch.ones(2, 5, dtype=torch.bool),  # (B, S)
    }
    got, want = clamped.output.score_all(s, context, view), whole.output.score_all(s, context, view)
    for name in ("gen", "gen_shift", "copy", "copy_shift"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name))
    torch.testing.assert_close(got.gen.exp().sum(-1), torch.ones(2, 3))  # log w_t over the whole vocabulary


def test_transformer_decoder_heads_must_divide_its_size():
    """ModelConfig checks model.decoder_heads against hidden first (tests/models/test_transformer_decoder.py);
    the decoder checks again whatever built it (a config object that skipped that check, or a direct call)."""
    with pytest.raises(ValueError, match=r"^model.decoder_heads 4 must divide the transformer decoder's size 6$"):
        TransformerDecoder(in_dim=5, d_model=6, memory_dim=8, layers=1, heads=4, feed_forward=12, dropout=0.0)
    cfg = SimpleNamespace(hidden=10, decoder_layers=1, decoder_heads=3, feed_forward=20, dropout=0.0)
    with pytest.raises(ValueError, match=r"^model.decoder_heads 3 must divide the transformer decoder's size 10$"):
        TransformerDecoder.from_config(cfg, in_dim=5, memory_dim=8)


@pytest.mark.parametrize("heads", [1, 2, 3, 6])
def test_transformer_decoder_heads_that_divide_its_size_build(heads):
    decoder = TransformerDecoder(in_dim=5, d_model=6, memory_dim=8, layers=1, heads=heads, feed_forward=12, dropout=0.0)
    assert (decoder.out_dim, decoder.heads) == (6, heads)
    attn = decoder.layers[0].self_attn
    assert (attn.heads, attn.d_head * attn.heads) == (heads, 6)  # the heads tile d_model exactly
