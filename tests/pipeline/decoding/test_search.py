"""The search's options (pipeline.decoding.search): min_len blocks </s>, n-gram blocking, the GNMT
length penalty, with every mechanism. That beam search equals brute force, that a batch decodes as its
examples alone and that greedy equals beam 1 is part of every mechanism's contract
(tests/models/test_contract.py).

Tiny random models of every mechanism, a decoder vocabulary of the 4 specials + 2 words, and
sources holding a decoder OOV, so the extended vocabulary (V + X = 7 ids) is part of the search
(tests/helpers.py: ``search_model``, ``search_batch``). Marked ``device``: the models and batches live
on ``--device`` (``pytest --device cuda -m device``).
"""

from __future__ import annotations

import pytest
import torch

from models.registry import MECHANISMS
from pipeline.decoding.search import beam_search, greedy
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import BOS, EOS, UNK
from tests.helpers import (
    LIVE,
    SEARCH_SRC_VOCAB,
    SEARCH_SRCS,
    SEARCH_TGT_VOCAB,
    brute_force,
    search_batch,
    search_model,
)

V = len(SEARCH_TGT_VOCAB)  # 6; "c" and "z" are OOV
MECHS = sorted(MECHANISMS)
DEVICE = torch.device("cpu")  # set from --device for every test (the autouse fixture below)
pytestmark = pytest.mark.device


@pytest.fixture(autouse=True)
def _on_device(device: torch.device):
    global DEVICE
    DEVICE = device
    yield
    DEVICE = torch.device("cpu")


def _model(name: str, seed: int = 0, scale: float = 3.0):
    return search_model(name, DEVICE, seed=seed, scale=scale)


def _batch(srcs=SEARCH_SRCS):
    return search_batch(DEVICE, srcs)


def test_fixture_has_an_extended_vocabulary() -> None:
    b = collate(SEARCH_SRCS, None, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB)
    assert b.n_ext == 1 and b.oovs == [["z"], ["c"], []]
    assert b.src_ext[1].tolist() == [V, 4, V, 5, 4]


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
    g = greedy(model, _batch(), max_len=8, min_len=min_len)  # greedy's min_len, as beam search's
    assert all(EOS not in h.ids[:min_len] and h.ids[min_len] == EOS and len(h.ids) == min_len + 1 for h in g)


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
    # No claim on the scores: a beam of 4 is not exhaustive, so blocking may keep a path the free search
    # pruned and end higher. The exhaustive comparison is the trigram test's, against brute force.


def _repeats_ngram(ids: list[int], n: int) -> bool:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("name", MECHS)
def test_block_ngram_never_repeats_a_trigram(name: str) -> None:
    """n = 3: no hypothesis repeats a trigram, though bigrams may repeat (only the last two tokens and
    the next one are matched against the history), and the free search repeats some."""
    model = _model(name, seed=4)
    kw = dict(beam_size=4, max_len=8, min_len=8)  # no </s>: 8 tokens, 6 trigrams each
    free = beam_search(model, _batch(), **kw)
    assert any(_repeats_ngram(h.ids, 3) for hyps in free for h in hyps)  # the check can fail
    blocked = beam_search(model, _batch(), block_ngram=3, **kw)
    repeated_bigrams = 0
    for hyps in blocked:
        assert hyps[0].score > LIVE and len(hyps[0].ids) == 8
        for h in hyps:
            if h.score > LIVE:
                assert not _repeats_ngram(h.ids, 3), h.ids
                repeated_bigrams += _repeats_ngram(h.ids, 2)
    assert repeated_bigrams > 0  # a trigram block, not a bigram one


@pytest.mark.parametrize("name", ["copynet", "pointer_generator", "rnnsearch"])
def test_block_trigram_beam_equals_brute_force_without_repeated_trigrams(name: str) -> None:
    """With a beam as wide as the search space (7 ids, 5 steps: 7**5 rows), the blocked search returns
    exactly the sequences brute-force enumeration gives that repeat no trigram (``a b a b a``, ``x x x
    x``, ...), with their scores, best first: blocking removes those and nothing else. (Blocking reads
    the ids only: two copying mechanisms, whose OOV slot is live, and one that cannot copy.)"""
    model = _model(name, seed=4)
    max_len = 5
    src = SEARCH_SRCS[0]  # "a z b": 6 vocabulary ids + z
    one = _batch([src])
    brute = [(ids, s) for ids, s in brute_force(model, one, max_len) if s > LIVE]
    allowed = {tuple(ids): s for ids, s in brute if not _repeats_ngram(ids, 3)}
    assert len(allowed) < len(brute)  # some live sequence repeats a trigram
    (beam,) = beam_search(model, one, beam_size=7**max_len, max_len=max_len, block_ngram=3)
    got = {tuple(h.ids): h.score for h in beam}
    assert len(got) == len(beam) and got.keys() == allowed.keys()
    for ids, score in got.items():
        assert score == pytest.approx(allowed[ids], abs=1e-4), ids
    assert [h.score for h in beam] == sorted((h.score for h in beam), reverse=True)


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


class _UnkBias(_EosBias):
    """Wraps a model so that <unk> gets ``bias`` more log-odds (then renormalised)."""

    def step(self, state, prev_ids):
        log_probs, state = self.model.step(state, prev_ids)
        log_probs = log_probs.clone()
        log_probs[:, UNK] += self.bias
        return torch.log_softmax(log_probs, dim=-1), state


@pytest.mark.parametrize("name", MECHS)
def test_ban_unk_never_emits_unk(name: str) -> None:
    model = _UnkBias(_model(name, seed=4), bias=30.0)
    free = beam_search(model, _batch(), beam_size=3, max_len=6)
    assert all(UNK in hyps[0].ids for hyps in free)  # the bias makes <unk> the best word everywhere
    banned = beam_search(model, _batch(), beam_size=3, max_len=6, ban_unk=True)
    assert all(UNK not in h.ids and h.score > LIVE for hyps in banned for h in hyps)
    assert all(UNK not in h.ids for h in greedy(model, _batch(), max_len=6, ban_unk=True))
    # Greedy: where the free argmax never picks <unk>, banning it changes nothing (every step's
    # argmax is the same). (Beam search may differ: a pruned <unk> prefix changes what survives.)
    plain = _model(name, seed=4)
    free = greedy(plain, _batch(), max_len=6)
    banned = greedy(plain, _batch(), max_len=6, ban_unk=True)
    compared = 0
    for a, b in zip(free, banned):
        assert UNK not in b.ids
        if UNK not in a.ids:
            assert (a.ids, a.score) == (b.ids, b.score)
            compared += 1
    assert compared > 0


@torch.no_grad()
def _forced_attention(model, src: list[str], ids: list[int]) -> torch.Tensor:
    """The attention a_t of the model fed ``ids`` one by one on ``src`` alone: (T, S)."""
    state = model.encode(_batch([src]))
    prev, rows = torch.tensor([BOS], device=DEVICE), []
    for token in ids:
        _, state = model.step(state, prev)
        rows.append(state["attn"][0].float())
        prev = torch.tensor([token], device=DEVICE)
    return torch.stack(rows)


@pytest.mark.parametrize("name", [m for m in MECHS if m != "encdec"])  # Enc-Dec has no attention
def test_each_hypothesis_carries_its_own_attention_path(name: str) -> None:
    """keep_attention follows every hypothesis back through the beam's reorders: its weights at
    step t are those the model computes when fed that hypothesis's own prefix."""
    model = _model(name, seed=5)
    nbest = beam_search(model, _batch(), beam_size=4, max_len=6, keep_attention=True)
    checked = 0
    for src, hyps in zip(SEARCH_SRCS, nbest):
        for h in hyps:
            attn = h.trace["attn"]  # (T, the batch's longest source): 0 past this source's end
            assert attn.shape == (len(h.ids), max(map(len, SEARCH_SRCS)))
            assert torch.allclose(attn[:, : len(src)], _forced_attention(model, src, h.ids).cpu(), atol=1e-5)
            if len(src) < attn.size(1):
                assert attn[:, len(src) :].abs().max().item() == 0.0
            checked += 1
    assert checked == 12  # 3 sources x 4 hypotheses


def test_replace_unk_takes_the_most_attended_source_word() -> None:
    from pipeline.decoding.decode import replace_unk
    from pipeline.decoding.search import Hypothesis

    src = ["the", "zorblax", "said", "hello"]
    attn = torch.tensor(
        [
            [0.1, 0.7, 0.1, 0.1],  # step 0: <unk> -> zorblax
            [0.2, 0.2, 0.5, 0.1],  # step 1: a vocabulary word stays
            [0.0, 0.1, 0.2, 0.7],  # step 2: <unk> -> hello
        ]
    )
    hyp = Hypothesis([1, 9, 1], 0.0, 0.0, {"attn": attn})
    assert replace_unk(["<unk>", "said", "<unk>"], hyp, src) == ["zorblax", "said", "hello"]
    assert replace_unk(["<unk>"], Hypothesis([1], 0.0, 0.0), src) == ["<unk>"]  # no attention: unchanged
