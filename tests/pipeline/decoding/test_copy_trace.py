"""The heat map's weights (CopyNet Figure 3): ``greedy(trace_keys=...)`` records decoder state tensors
per step, and ``copy_trace`` (pipeline.decoding.decode) turns one example's into the rows the evaluate
stage draws: the copy mode's p(x_tau, c | s_t) where the mechanism has one (``copy_logp``), else its
attention weights.

Both are checked against the decoder stepped by hand through greedy's own outputs (``Seq2Seq.step``):
row t is the state the step that chose output token t computed, one row per output token, </s>
included. Tiny random models of every mechanism on the search's vocabularies (tests/helpers.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from models.registry import MECHANISMS
from pipeline.decoding.decode import copy_trace
from pipeline.decoding.search import greedy
from pipeline.io.shards import make_schema
from pipeline.vocab.batching import batch_from_rows
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.vocabulary import BOS, EOS, PAD
from tests.helpers import SEARCH_SRC_VOCAB, SEARCH_SRCS, SEARCH_TGT_VOCAB, search_batch, search_model

CPU = torch.device("cpu")
MECHS = sorted(MECHANISMS)
KEYS = ("copy_logp", "attn")
COPY_KIND, ATTENTION_KIND = "copy-mode probability p(x, c | s_t)", "attention weight"
TARGETS = [["a", "b"], ["b"], ["a", "a", "b"]]


@torch.no_grad()
def stepped(model, batch, outputs: list[list[int]]) -> dict[str, torch.Tensor]:
    """Every state tensor of ``KEYS`` the decoder computes when fed ``outputs`` (greedy's ids, <pad>
    once an example is done, as greedy feeds them): key -> (B, T, S), T the longest output."""
    state = model.encode(batch)
    prev = torch.full((batch.size,), BOS, dtype=torch.long)
    rows: dict[str, list[torch.Tensor]] = {key: [] for key in KEYS}
    for t in range(max(map(len, outputs))):
        _, state = model.step(state, prev)
        for key in KEYS:
            if key in state:
                rows[key].append(state[key].float())
        prev = torch.tensor([ids[t] if t < len(ids) else PAD for ids in outputs])
    return {key: torch.stack(steps, dim=1) for key, steps in rows.items() if steps}


class EosAt:
    """``model`` with </s> made certain at step ``n`` (0-based; one step per example, or the same for
    all) and impossible before: outputs of n tokens and </s>, whatever the random weights prefer (the
    decoder state unchanged)."""

    def __init__(self, model, n: int | list[int]):
        self.model, self.n, self.t = model, n, 0

    def encode(self, batch):
        self.t = 0
        return self.model.encode(batch)

    def step(self, state, prev_ids):
        log_probs, state = self.model.step(state, prev_ids)
        n = torch.as_tensor(self.n).expand(log_probs.size(0))
        eos_only = torch.full_like(log_probs, -1e4).index_fill_(1, torch.tensor([EOS]), 0.0)
        no_eos = log_probs.clone().index_fill_(1, torch.tensor([EOS]), -1e4)
        log_probs = torch.where((n == self.t).unsqueeze(1), eos_only, no_eos)
        self.t += 1
        return log_probs, state


@pytest.mark.parametrize("name", MECHS)
def test_greedy_traces_are_the_state_of_each_chosen_step(name):
    """Each example's trace holds, for every key the state has, one row per output token (</s>
    included; none for the steps after it, while the batch's longer outputs go on), equal to the state
    the stepped decoder computed at that step; a key the state lacks is absent; no keys, no trace.
    Outputs of 2, 4 and 3 tokens with </s>, and the model's own (cut at ``max_len`` or not)."""
    model = search_model(name, CPU, seed=2)
    batch = search_batch(CPU)
    forced = greedy(EosAt(model, [1, 3, 2]), batch, max_len=6, trace_keys=KEYS)
    assert [h.ids[-1] for h in forced] == [EOS] * 3 and [len(h.ids) for h in forced] == [2, 4, 3]
    own = greedy(model, batch, max_len=5, trace_keys=KEYS)
    for hyps in (forced, own):
        ref = stepped(model, batch, [h.ids for h in hyps])
        assert ref.keys() <= set(KEYS)
        for b, h in enumerate(hyps):
            assert set(h.trace or {}) == set(ref), (name, b)
            for key, rows in ref.items():
                assert h.trace[key].shape == (len(h.ids), batch.src.size(1)), (name, key, b)
                assert torch.allclose(h.trace[key], rows[b, : len(h.ids)], atol=1e-6), (name, key, b)
    assert all(h.trace is None for h in greedy(model, batch, max_len=5))


def _table(tgts: list[list[str]] = TARGETS) -> pa.Table:
    rows = [
        {"id": f"r{i}", "src": src, "tgt": tgt, "refs": [tgt]} for i, (src, tgt) in enumerate(zip(SEARCH_SRCS, tgts))
    ]
    return pa.Table.from_pylist(rows, make_schema())


@pytest.mark.parametrize("name", MECHS)
@pytest.mark.parametrize("row", [0, 1])
def test_copy_trace_is_one_row_per_output_token_of_the_copy_or_attention_weights(name, row):
    """One example greedy-decoded: ``out`` its tokens and </s> (an output cut at ``max_len`` has
    none), one row of weights per token, each over the example's source positions; the copy mode's
    probabilities p(x, c | s_t) = exp(copy_logp) where the state has them (a share of the step's one
    distribution: each row sums to at most 1), else the attention weights (each row sums to 1), none
    for a mechanism without attention."""
    table, max_len = _table(), 4
    model = search_model(name, CPU, seed=2)
    one = batch_from_rows(table, [row], SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB)
    src = SEARCH_SRCS[row]
    for wrapped, ended in ((EosAt(model, 2), True), (EosAt(model, max_len), False)):
        trace = copy_trace(wrapped, table, row, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB, max_len, CPU)
        ids = greedy(wrapped, one, max_len)[0].ids
        assert (ids[-1] == EOS) == ended and len(ids) == (3 if ended else max_len)
        words = ext_ids_to_tokens(ids, one.oovs[0], SEARCH_TGT_VOCAB)
        assert trace["out"] == words + ["</s>"] * ended and len(trace["out"]) == len(ids)
        assert (trace["src"], trace["gold"]) == (src, TARGETS[row])
        ref = stepped(model, one, [ids])
        if "copy_logp" in ref:
            assert trace["kind"] == COPY_KIND
            weights = torch.tensor(trace["weights"])
            assert torch.allclose(weights, ref["copy_logp"][0].exp(), atol=1e-6)
            assert (weights.sum(1) <= 1 + 1e-5).all() and (weights.sum(1) > 0).all()
        elif "attn" in ref:
            assert trace["kind"] == ATTENTION_KIND
            weights = torch.tensor(trace["weights"])
            assert torch.allclose(weights, ref["attn"][0], atol=1e-6)
            assert torch.allclose(weights.sum(1), torch.ones(len(ids)), atol=1e-5)
        else:
            assert trace["weights"] is None
            continue
        assert weights.shape == (len(trace["out"]), len(src))


def test_the_copy_modes_rows_leave_the_generate_modes_share():
    """CopyNet's copy and generate modes share one normalisation (eq. 4): the copy mode's row is a
    part of the step's distribution, strictly under 1 here, the rest being the generate mode's; what
    ``copy_trace`` shows is that part, not the attention."""
    model = search_model("copynet", CPU, seed=2)
    trace = copy_trace(EosAt(model, 3), _table(), 1, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB, 6, CPU)
    one = batch_from_rows(_table(), [1], SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB)
    ids = greedy(EosAt(model, 3), one, 6)[0].ids
    ref = stepped(model, one, [ids])
    totals = torch.tensor(trace["weights"]).sum(1)
    assert (totals < 1 - 1e-3).all() and (totals > 1e-3).all(), totals
    assert not torch.allclose(torch.tensor(trace["weights"]), ref["attn"][0], atol=1e-3)
