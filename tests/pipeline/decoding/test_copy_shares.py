"""``copy_shares``: per output token, the share of its probability the copy side gave, p_copy(y) / p(y),
checked against the decoder stepped one token at a time (``Seq2Seq.step``): p(y) from the step's
distribution over the extended vocabulary, p_copy(y) from the copy mode's per-position probabilities
(``copy_logp``) summed over the source positions holding y."""

from __future__ import annotations

import pytest
import torch

from pipeline.decoding.decode import copy_shares
from pipeline.decoding.search import greedy
from pipeline.vocab.vocabulary import BOS, PAD
from tests.helpers import search_batch, search_model

COPYING = ["copynet", "pointer_generator", "pointer_softmax"]


@torch.no_grad()
def stepped_shares(model, batch, outputs: list[list[int]]) -> list[list[float]]:
    """p_copy(y_t) / p(y_t) of each output token, the decoder fed the output one step at a time."""
    shares = [[] for _ in outputs]
    state = model.encode(batch)
    prev = torch.full((batch.size,), BOS, dtype=torch.long)
    for t in range(max(map(len, outputs))):
        log_probs, state = model.step(state, prev)  # (B, V + X)
        for b, ids in enumerate(outputs):
            if t < len(ids):
                y = ids[t]
                p = log_probs[b, y].double().exp().item()
                p_copy = state["copy_logp"][b].double().exp()[batch.src_ext[b] == y].sum().item()
                shares[b].append(p_copy / p)
        prev = torch.tensor([ids[t] if t < len(ids) else PAD for ids in outputs])
    return shares


@pytest.mark.parametrize("name", COPYING)
def test_the_copy_share_is_the_copy_probability_over_the_tokens_probability(name):
    """Every copying layer, its gate or switch free (not pinned to one side); the pointer-generator's
    generate side is logits that its own reader normalises, which a share read off the raw scores
    would get wrong."""
    model = search_model(name, torch.device("cpu"), seed=1, scale=1.0)
    batch = search_batch(torch.device("cpu"))
    outputs = [h.ids for h in greedy(model, batch, max_len=4)]
    got, want = copy_shares(model, batch, outputs), stepped_shares(model, batch, outputs)
    assert [len(row) for row in got] == [len(ids) for ids in outputs]
    for b, (row, ref) in enumerate(zip(got, want)):
        assert row == pytest.approx(ref, abs=1e-4), (name, b)
    strictly_between = [s for row in want for s in row if 0.01 < s < 0.99]
    assert strictly_between, "every share 0 or 1: the check would not see the mixture's weights"


def test_a_layer_that_cannot_copy_gives_zero_shares():
    model = search_model("rnnsearch", torch.device("cpu"), seed=1, scale=1.0)
    batch = search_batch(torch.device("cpu"))
    outputs = [h.ids for h in greedy(model, batch, max_len=4)]
    assert copy_shares(model, batch, outputs) == [[0.0] * len(ids) for ids in outputs]
