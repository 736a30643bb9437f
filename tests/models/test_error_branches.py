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


def test_a_shortlist_larger_than_the_backbone_vocabulary_is_refused(bart):
    path, size = bart
    with pytest.raises(ValueError, match=rf"^shortlist {size + 1} is larger than the vocabulary {size}$"):
        pointer_softmax(path, size, shortlist=size + 1)
    with pytest.raises(ValueError, match=rf"^shortlist {10 * size} is larger than the vocabulary {size}$"):
        pointer_softmax(path, size, shortlist=10 * size)


def test_a_shortlist_up_to_the_vocabulary_builds(bart):
    """The bound is inclusive: the whole vocabulary as the shortlist is the default (None) spelled out."""
    path, size = bart
    for shortlist, limit in ((size, size), (size - 1, size - 1), (None, size)):
        output = pointer_softmax(path, size, shortlist=shortlist).output
        assert isinstance(output, BackbonePointerSoftmaxOutput)
        assert (output.shortlist, output.limit, output.vocab) == (shortlist, limit, size)


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
