"""Greedy and batched beam search (pipeline.decoding.search) against brute force and against each other.

Tiny random models of every mechanism, a decoder vocabulary of the 4 specials + 2 words, and
sources holding a decoder OOV, so the extended vocabulary (V + X = 7 ids) is part of the search.
Marked ``device``: the models and batches live on ``--device`` (``pytest --device cuda -m device``).
"""

from __future__ import annotations

import math

import pytest
import torch

from models.extended import NEG
from models.registry import MECHANISMS
from pipeline.decoding.search import beam_search, greedy
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import EOS, SPECIALS, Vocab
from tests.conftest import toy_model

SRC_VOCAB = Vocab(list(SPECIALS) + ["a", "b", "c"], [0] * 4 + [1] * 3)
TGT_VOCAB = Vocab(list(SPECIALS) + ["a", "b"], [0] * 4 + [1] * 2)  # V = 6; "c" and "z" are OOV
V = len(TGT_VOCAB)
SRCS = [["a", "z", "b"], ["c", "a", "c", "b", "a"], ["b", "a"]]  # OOVs: z / c / none
MECHS = sorted(MECHANISMS)
LIVE = NEG / 2  # hypotheses scoring below this used an impossible token
DEVICE = torch.device("cpu")  # set from --device for every test (the autouse fixture below)
pytestmark = pytest.mark.device


@pytest.fixture(autouse=True)
def _on_device(device: torch.device):
    global DEVICE
    DEVICE = device
    yield
    DEVICE = torch.device("cpu")


def _model(name: str, seed: int = 0, scale: float = 3.0):
    return toy_model(name, SRC_VOCAB, TGT_VOCAB, seed=seed, scale=scale, emb=8, hidden=16).to(DEVICE)


def _batch(srcs=SRCS):
    return collate(srcs, None, SRC_VOCAB, TGT_VOCAB).to(DEVICE)


@torch.no_grad()
def _brute_force(model, src: list[str], max_len: int) -> list[tuple[list[int], float]]:
    """Every sequence over the example's extended ids, ending at </s> or cut at max_len."""
    batch = _batch([src])
    out: list[tuple[list[int], float]] = []

    def expand(state, prev: int, prefix: list[int], score: float) -> None:
        log_probs, state = model.step(state, torch.tensor([prev], device=DEVICE))
        lp = log_probs[0].double().tolist()
        for y, lp_y in enumerate(lp):
            seq, s = prefix + [y], score + lp_y
            if y == EOS or len(seq) == max_len:
                out.append((seq, s))
            else:
                expand(state, y, seq, s)

    from pipeline.vocab.vocabulary import BOS

    expand(model.encode(batch), BOS, [], 0.0)
    out.sort(key=lambda h: -h[1])
    return out


def test_fixture_has_an_extended_vocabulary() -> None:
    b = collate(SRCS, None, SRC_VOCAB, TGT_VOCAB)
    assert b.n_ext == 1 and b.oovs == [["z"], ["c"], []]
    assert b.src_ext[1].tolist() == [V, 4, V, 5, 4]


@pytest.mark.parametrize("name", MECHS)
def test_beam_equals_brute_force(name: str) -> None:
    model = _model(name)
    max_len = 3
    n_ids = V + 1
    beam = beam_search(model, _batch(), beam_size=n_ids**max_len, max_len=max_len)
    for i, src in enumerate(SRCS):
        brute = _brute_force(model, src, max_len)
        n_own = V + len(_batch([src]).oovs[0])
        # All sequences: those ending in </s> at step 1, 2, 3 and the ones cut at 3.
        assert len(brute) == 1 + (n_own - 1) + (n_own - 1) ** 2 * n_own
        top_brute = brute[:5]
        top_beam = beam[i][:5]
        assert [h.ids for h in top_beam] == [ids for ids, _ in top_brute], (name, i)
        for h, (_, score) in zip(top_beam, top_brute):
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.rank_score == h.score  # no length penalty
            assert score > -50  # genuine hypotheses, not impossible ones
        # Copy-capable mechanisms put the OOV id among the candidates; the others never emit it.
        uses_oov = any(V in ids for ids, s in brute if s > LIVE)
        assert uses_oov == (model.output.can_copy and len(_batch([src]).oovs[0]) > 0)
        # The hypotheses form a distribution over complete sequences: sum of their probabilities = 1.
        assert sum(math.exp(s) for _, s in brute) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("name", MECHS)
def test_batched_beam_equals_one_at_a_time(name: str) -> None:
    model = _model(name, seed=1)
    batched = beam_search(model, _batch(), beam_size=4, max_len=6)
    for i, src in enumerate(SRCS):
        alone = beam_search(model, _batch([src]), beam_size=4, max_len=6)[0]
        assert [h.ids for h in batched[i]] == [h.ids for h in alone], (name, i)
        for hb, ha in zip(batched[i], alone):
            assert hb.score == pytest.approx(ha.score, abs=1e-4)
        assert batched[i][0].score > -50


@pytest.mark.parametrize("name", MECHS)
def test_greedy_equals_beam_one(name: str) -> None:
    model = _model(name, seed=2)
    g = greedy(model, _batch(), max_len=8)
    b = beam_search(model, _batch(), beam_size=1, max_len=8)
    for i in range(len(SRCS)):
        assert g[i].ids == b[i][0].ids, (name, i)
        assert g[i].score == pytest.approx(b[i][0].score, abs=1e-4)
    # Greedy's score is the sum of the chosen tokens' log-probs: check one by re-stepping.
    with torch.no_grad():
        batch = _batch([SRCS[0]])
        state = model.encode(batch)
        prev, total = torch.tensor([2], device=DEVICE), 0.0
        for y in g[0].ids:
            lp, state = model.step(state, prev)
            assert int(lp[0].argmax()) == y
            total += float(lp[0, y])
            prev = torch.tensor([y], device=DEVICE)
    assert g[0].score == pytest.approx(total, abs=1e-4)


class _EosBias:
    """Wraps a model so that </s> gets ``bias`` more log-odds (then renormalised)."""

    def __init__(self, model, bias: float):
        self.model, self.bias = model, bias

    def encode(self, batch):
        return self.model.encode(batch)

    def step(self, state, prev_ids):
        log_probs, state = self.model.step(state, prev_ids)
        log_probs = log_probs.clone()
        log_probs[:, EOS] += self.bias
        return torch.log_softmax(log_probs, dim=-1), state


@pytest.mark.parametrize("name", MECHS)
def test_min_len_blocks_eos(name: str) -> None:
    model = _EosBias(_model(name, seed=3), bias=30.0)
    free = beam_search(model, _batch(), beam_size=3, max_len=8)
    assert all(hyps[0].ids == [EOS] for hyps in free)  # without min_len </s> wins at once
    min_len = 3
    blocked = beam_search(model, _batch(), beam_size=3, max_len=8, min_len=min_len)
    for hyps in blocked:
        live = [h for h in hyps if h.score > LIVE]
        assert len(live) == 3
        for h in live:
            assert EOS not in h.ids[:min_len]
        # </s> is allowed (and, being favoured, taken) right after min_len tokens.
        assert hyps[0].ids[min_len] == EOS and len(hyps[0].ids) == min_len + 1
    g = greedy(model, _batch(), max_len=8)
    assert all(h.ids == [EOS] for h in g)


def _repeats_bigram(ids: list[int]) -> bool:
    grams = list(zip(ids, ids[1:]))
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("name", MECHS)
def test_block_ngram_never_repeats_a_bigram(name: str) -> None:
    model = _model(name, seed=4)
    kw = dict(beam_size=4, max_len=6, min_len=6)  # no </s>: 6 tokens, 5 bigrams each
    free = beam_search(model, _batch(), **kw)
    assert any(_repeats_bigram(h.ids) for hyps in free for h in hyps)  # the check can fail
    blocked = beam_search(model, _batch(), block_ngram=2, **kw)
    for hyps in blocked:
        assert hyps[0].score > LIVE and len(hyps[0].ids) == 6
        for h in hyps:
            if h.score > LIVE:
                assert not _repeats_bigram(h.ids), h.ids
    # Blocking costs probability: the best blocked hypothesis never beats the best free one.
    for f, b in zip(free, blocked):
        assert b[0].score <= f[0].score + 1e-5


@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_length_penalty_is_gnmt(alpha: float) -> None:
    model = _EosBias(_model("copynet", seed=5), bias=2.0)  # a mix of short and long hypotheses
    kw = dict(beam_size=8, max_len=6)
    plain = beam_search(model, _batch(), **kw)
    pen = beam_search(model, _batch(), length_penalty=alpha, **kw)
    reordered = False
    for p_hyps, l_hyps in zip(plain, pen):
        # The search is the same; only the final ranking changes.
        assert sorted((tuple(h.ids), round(h.score, 4)) for h in p_hyps) == sorted(
            (tuple(h.ids), round(h.score, 4)) for h in l_hyps
        )
        for h in l_hyps:
            lp = ((5.0 + len(h.ids)) / 6.0) ** alpha  # |y| counts </s> when present
            assert h.rank_score == pytest.approx(h.score / lp, rel=1e-5, abs=1e-5)
        assert [h.rank_score for h in l_hyps] == sorted((h.rank_score for h in l_hyps), reverse=True)
        expected = sorted(p_hyps, key=lambda h: -h.score / ((5.0 + len(h.ids)) / 6.0) ** alpha)
        assert [h.ids for h in l_hyps] == [h.ids for h in expected]
        reordered |= [h.ids for h in l_hyps] != [h.ids for h in p_hyps]
        lens = {len(h.ids) for h in p_hyps if h.score > LIVE}
        assert len(lens) > 1  # hypotheses of different lengths compete
    assert reordered  # the penalty changed some ranking, as the formula predicts
