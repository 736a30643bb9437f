"""The pointer-generator with coverage (See, Liu, Manning 2017) checked against hand computation.

Expected numbers are computed independently of the library, in float64 / plain Python floats, from
the paper's equations with the model's weights read out:

  e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn),  a^t = softmax(e^t)     (eq. 1/11, 2)
  h*_t = sum_i a_i^t h_i                                                            (eq. 3)
  P_vocab = softmax(V'(V[s_t; h*_t] + b) + b')                                      (eq. 4)
  p_gen = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)                      (eq. 8)
  P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t                      (eq. 9)
  c^t = sum_{t' < t} a^{t'},  covloss_t = sum_i min(a_i^t, c_i^t)                   (eq. 10, 12)
  loss_t = -log P(w*_t) + lambda covloss_t                                          (eq. 13)

s_t = GRU([x_t; h*_{t-1}], s_{t-1}) is recomputed by hand too (the GRU equations), so the tests
also pin down See's order: attention with the updated state s_t.
"""

from __future__ import annotations

import math

import pytest
import torch

from models.extended import NEG
from models.pointer_generator import PointerGeneratorOptions, build_pointer_generator
from pipeline.config.validation import dataclass_from_dict
from pipeline.training.loop import nll_loss
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from tests.helpers import (
    assert_step_distributions_normalised,
    toy_copy_scores,
    toy_model,
)

SRC_VOCAB = Vocab(list(SPECIALS) + ["a", "b", "c", "d", "e", "f"], [0] * 4 + [1] * 6)
TGT_VOCAB = Vocab(list(SPECIALS) + ["a", "b", "c"], [0] * 4 + [1] * 3)  # d, e, f, z* are decoder OOVs
V = len(TGT_VOCAB)
A, B_, C = 4, 5, 6
# Lengths 2 / 5 / 7; OOV counts 0 / 1 (repeated) / 3 (one repeated); targets mix copied OOVs, words in
# V and the source, words in V only, and an OOV found nowhere (-> <unk>).
SRCS = [["a", "b"], ["c", "e", "a", "e", "a"], ["f", "zz", "b", "d", "a", "zz", "c"]]
TGTS = [["b", "c", "a"], ["e", "e", "c", "q"], ["zz", "d", "f", "b", "zz", "a"]]


def _batch():
    return collate(SRCS, TGTS, SRC_VOCAB, TGT_VOCAB)


def _model(**kw):
    return toy_model(build_pointer_generator, SRC_VOCAB, TGT_VOCAB, **kw)


def test_fixture_is_what_the_tests_assume() -> None:
    b = _batch()
    assert b.n_ext == 3 and b.oovs == [[], ["e"], ["f", "zz", "d"]]
    assert b.src_ext[1].tolist() == [C, V, A, V, A, PAD, PAD]
    assert b.tgt_out[1].tolist()[:5] == [V, V, C, UNK, EOS]
    assert b.tgt_out[2].tolist()[:6] == [V + 1, V + 2, V, B_, V + 1, A]


def test_options_defaults_and_unknown_key() -> None:
    opts = dataclass_from_dict(PointerGeneratorOptions, {})
    assert opts.coverage is True and opts.coverage_loss_weight == 1.0  # See et al. section 4: lambda = 1
    with pytest.raises(ValueError, match="unknown"):
        _model(covrage=True)
    plain = _model(coverage=False)
    assert plain.decoder.attention.w_cov is None  # eq. 1 without the coverage term
    assert "coverage" not in plain.encode(_batch())


# ---------------------------------------------------------------------------------------------
# One step by hand, float64
# ---------------------------------------------------------------------------------------------
def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double()


def _hand_step(model, state: dict, prev: list[int], batch, b: int) -> dict:
    """Every quantity of one step for example b, from the previous state and the weights (float64)."""
    dec, out = model.decoder, model.output
    n = int(batch.src_len[b])
    memory = _f64(state["memory"][b, :n])  # (n, M) h_i
    y = prev[b] if prev[b] < V else UNK  # an extended id is embedded as <unk>
    x = _f64(model.tgt_emb.weight[y])  # x_t = e(y_{t-1})
    # GRU (PyTorch gate order r, z, n) on [x_t; h*_{t-1}]
    inp = torch.cat([x, _f64(state["context"][b])])
    h = _f64(state["s"][b])
    gi = _f64(dec.cell.weight_ih) @ inp + _f64(dec.cell.bias_ih)
    gh = _f64(dec.cell.weight_hh) @ h + _f64(dec.cell.bias_hh)
    H = h.numel()
    r = torch.sigmoid(gi[:H] + gh[:H])
    z = torch.sigmoid(gi[H : 2 * H] + gh[H : 2 * H])
    cand = torch.tanh(gi[2 * H :] + r * gh[2 * H :])
    s_t = (1 - z) * cand + z * h
    # eq. 11 (eq. 1 when coverage is off), with the updated state s_t
    att = dec.attention
    cov = _f64(state["coverage"][b, :n]) if dec.coverage else torch.zeros(n, dtype=torch.float64)
    e = []
    for i in range(n):
        feat = _f64(att.key.weight) @ memory[i] + _f64(att.key.bias) + _f64(att.query.weight) @ s_t
        if dec.coverage:
            feat = feat + _f64(att.w_cov.weight)[:, 0] * cov[i]
        e.append(float(_f64(att.v.weight)[0] @ torch.tanh(feat)))
    z_e = sum(math.exp(v) for v in e)
    a = [math.exp(v) / z_e for v in e]  # eq. 2
    ctx = sum(a[i] * memory[i] for i in range(n))  # eq. 3
    # eq. 4: two linear layers; <pad> and <s> are never emitted (out of the normaliser)
    scores = (
        _f64(out.vocab.weight) @ (_f64(out.proj.weight) @ torch.cat([s_t, ctx]) + _f64(out.proj.bias))
        + _f64(out.vocab.bias)
    ).tolist()
    emit = [w for w in range(V) if w not in (PAD, BOS)]
    z_v = sum(math.exp(scores[w]) for w in emit)
    p_vocab = [math.exp(scores[w]) / z_v if w in emit else 0.0 for w in range(V)]
    # eq. 8
    g = float(_f64(out.gate.weight)[0] @ torch.cat([ctx, s_t, x]) + _f64(out.gate.bias)[0])
    p_gen = 1.0 / (1.0 + math.exp(-g))
    # eq. 9 over the extended vocabulary
    src = batch.src_ext[b, :n].tolist()
    probs = [
        p_gen * (p_vocab[w] if w < V else 0.0) + (1 - p_gen) * sum(a[i] for i in range(n) if src[i] == w)
        for w in range(V + batch.n_ext)
    ]
    covloss = sum(min(a[i], float(cov[i])) for i in range(n))  # eq. 12
    return {"s": s_t, "attn": a, "context": ctx, "p_vocab": p_vocab, "p_gen": p_gen, "probs": probs, "covloss": covloss}


@pytest.mark.parametrize("coverage", [True, False])
def test_step_matches_eq_1_to_11_by_hand(coverage: bool) -> None:
    model = _model(seed=3, coverage=coverage)
    batch = _batch()
    with torch.no_grad():
        state = model.encode(batch)
        for t in range(batch.tgt_in.size(1)):
            prev = batch.tgt_in[:, t].tolist()
            hands = [_hand_step(model, state, prev, batch, b) for b in range(3)]
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            p = log_probs.double().exp()
            for b, hand in enumerate(hands):
                n = int(batch.src_len[b])
                assert torch.allclose(_f64(state["s"][b]), hand["s"], atol=1e-6), (t, b)
                assert state["attn"][b, :n].tolist() == pytest.approx(hand["attn"], abs=1e-6), (t, b)
                assert state["attn"][b, n:].abs().sum().item() == 0.0  # padding gets no attention
                assert torch.allclose(_f64(state["context"][b]), hand["context"], atol=1e-6), (t, b)
                assert p[b].tolist() == pytest.approx(hand["probs"], abs=1e-6), (t, b)
                if coverage:
                    assert state["covloss"][b].item() == pytest.approx(hand["covloss"], abs=1e-6), (t, b)
                if t == 1:  # the three kinds of word, spelled out (step 2: coverage is nonzero)
                    pg, pv, a = hand["p_gen"], hand["p_vocab"], hand["attn"]
                    if b == 0:  # "c": in V only -> p_gen P_vocab(c)
                        assert p[b, C].item() == pytest.approx(pg * pv[C], abs=1e-7)
                    if b == 1:  # "a": in V and at source positions 2 and 4 -> both terms, copy merged
                        assert p[b, A].item() == pytest.approx(pg * pv[A] + (1 - pg) * (a[2] + a[4]), abs=1e-7)
                        # "e" (slot V): source OOV at positions 1 and 3 -> copy only
                        assert p[b, V].item() == pytest.approx((1 - pg) * (a[1] + a[3]), abs=1e-7)
                    if b == 2:  # "zz" (slot V + 1): source OOV at positions 1 and 5
                        assert p[b, V + 1].item() == pytest.approx((1 - pg) * (a[1] + a[5]), abs=1e-7)


def test_extreme_weights_stay_finite_in_log_space() -> None:
    """Attention weights underflowing float32 to 0 at real positions and a saturated gate: still a
    finite, normalised log-distribution and finite gradients (no log 0 anywhere)."""
    model = _model(seed=2, scale=100.0)
    batch = _batch()
    steps = assert_step_distributions_normalised(model, batch, atol=1e-5)  # finite and normalised
    underflows = sum(int((state["attn"][state["src_mask"]] == 0).sum()) for _, state, _ in steps)
    assert underflows > 0  # the case is exercised
    model.train()
    loss, _ = nll_loss(model, batch)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# The gate at its limits
# ---------------------------------------------------------------------------------------------
def _steps_with_gate_bias(bias: float, coverage: bool = True):
    """(log P, hand P_vocab scores (B, V) float64, attention (B, S)) of the first three steps."""
    model = _model(seed=4, coverage=coverage)
    with torch.no_grad():
        model.output.gate.bias.fill_(bias)
    batch = _batch()
    out = []
    with torch.no_grad():
        state = model.encode(batch)
        for t in range(3):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            s_t, ctx = _f64(state["s"]), _f64(state["context"])
            o = model.output
            scores = (torch.cat([s_t, ctx], -1) @ _f64(o.proj.weight).T + _f64(o.proj.bias)) @ _f64(
                o.vocab.weight
            ).T + _f64(o.vocab.bias)  # (B, V), eq. 4
            out.append((log_probs, scores, state["attn"].double()))
    return batch, out


@pytest.mark.parametrize("coverage", [True, False])
def test_gate_forced_to_one_is_the_vocabulary_softmax(coverage: bool) -> None:
    batch, steps = _steps_with_gate_bias(-NEG, coverage)  # p_gen = sigmoid(+1e9) = 1
    for log_probs, scores, _ in steps:
        scores[:, [PAD, BOS]] = float("-inf")  # never emitted
        want = torch.log_softmax(scores, dim=-1)  # plain softmax over V, eq. 4
        emit = [w for w in range(V) if w not in (PAD, BOS)]
        assert torch.allclose(log_probs[:, emit].double(), want[:, emit], atol=1e-5)
        assert (log_probs[:, [PAD, BOS]] <= NEG / 2).all()
        assert (log_probs[:, V:] <= NEG / 2).all()  # source OOVs cannot be generated
        assert log_probs[:, V:].exp().max().item() == 0.0


@pytest.mark.parametrize("coverage", [True, False])
def test_gate_forced_to_zero_is_the_attention_merged_over_repeats(coverage: bool) -> None:
    batch, steps = _steps_with_gate_bias(NEG, coverage)  # p_gen = sigmoid(-1e9) = 0
    for log_probs, _, attn in steps:
        p = log_probs.double().exp()
        for b in range(3):
            n = int(batch.src_len[b])
            src = batch.src_ext[b, :n].tolist()
            for w in range(V + batch.n_ext):
                merged = sum(float(attn[b, i]) for i in range(n) if src[i] == w)
                assert p[b, w].item() == pytest.approx(merged, abs=1e-6), (b, w)
                if w not in src:  # not in the source: impossible, however likely P_vocab makes it
                    assert log_probs[b, w].item() <= NEG / 2, (b, w)
        assert torch.allclose(p.sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Coverage
# ---------------------------------------------------------------------------------------------
def test_coverage_vector_and_loss_by_hand() -> None:
    lam = 0.5
    model = _model(seed=5, coverage=True, coverage_loss_weight=lam)
    batch = _batch()
    target = model.training_target(batch)
    with torch.no_grad():
        gold = model(batch, objective=True)  # (B, T): log P(w*_t) - lambda covloss_t
        state = model.encode(batch)
        history = []  # a^1 .. a^t as plain float lists
        largest = 0.0
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            attn = state["attn"].double().tolist()
            for b in range(3):
                cov = [sum(h[b][i] for h in history) for i in range(len(attn[b]))]  # c^t, eq. 10
                covloss = sum(min(a, c) for a, c in zip(attn[b], cov))  # eq. 12
                if t == 0:
                    assert covloss == 0.0  # c^1 = 0
                assert state["covloss"][b].item() == pytest.approx(covloss, abs=1e-6), (t, b)
                largest = max(largest, covloss)
                after = [c + a for c, a in zip(cov, attn[b])]  # c^{t+1}
                assert state["coverage"][b].tolist() == pytest.approx(after, abs=1e-6), (t, b)
                y = int(target[b, t])
                if y != PAD:  # eq. 13, negated
                    want = float(log_probs[b, y]) - lam * covloss
                    assert gold[b, t].item() == pytest.approx(want, abs=1e-5), (t, b)
            history.append(attn)
    assert (gold[target == PAD] == 0).all()
    assert largest > 0.1  # the check is not vacuous


def test_coverage_weight_zero_gives_the_plain_nll() -> None:
    batch = _batch()
    zero = _model(seed=6, coverage=True, coverage_loss_weight=0.0)
    one = _model(seed=6, coverage=True, coverage_loss_weight=1.0)  # same weights
    target = zero.training_target(batch)
    with torch.no_grad():
        n = int((batch.tgt_out != PAD).sum())
        loss0 = -zero(batch, objective=True).sum() / n  # the training loss (eq. 13)
        loss1 = -one(batch, objective=True).sum() / n
        assert nll_loss(one, batch)[0] == pytest.approx(float(loss0), abs=1e-5)  # validation: plain NLL
        state = zero.encode(batch)
        nll, cov = 0.0, 0.0
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = zero.step(state, batch.tgt_in[:, t])
            for b in range(3):
                y = int(target[b, t])
                if y != PAD:
                    nll -= float(log_probs[b, y])
                    cov += float(state["covloss"][b])
    assert loss0.item() == pytest.approx(nll / n, abs=1e-5)
    assert loss1.item() == pytest.approx((nll + cov) / n, abs=1e-5)  # eq. 13 with lambda = 1
    assert cov / n > 1e-3


# ---------------------------------------------------------------------------------------------
# Gradients, search
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("coverage", [True, False])
def test_the_coverage_weights_exist_only_with_coverage(coverage: bool) -> None:
    """Eq. 11's w_c is a parameter only with coverage (the contract checks that every parameter
    gets a gradient, tests/models/test_contract.py)."""
    names = {name for name, _ in _model(coverage=coverage).named_parameters()}
    assert ("decoder.attention.w_cov.weight" in names) == coverage


# ---------------------------------------------------------------------------------------------
# Learning: copying fillers never seen in training
# ---------------------------------------------------------------------------------------------
def test_learns_to_copy_unseen_fillers() -> None:
    seen, unseen = toy_copy_scores("pointer-generator", "pointer_generator", build_pointer_generator)  # coverage on
    # Measured 1.00 / 0.85 (every miss is a 6-filler source whose copy stops one word early).
    # RNNSearch, which cannot copy, scores <= 0.05 on unseen fillers.
    assert seen >= 0.9
    assert unseen >= 0.7
