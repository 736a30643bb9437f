"""CopyNet's probability model (Gu et al. 2016, eq. 4-9) checked against hand computation.

Every expected number here is computed independently of the library, in plain Python floats
(``math.exp``/``math.log``) or float64 torch, straight from the paper's formulas:

  p(y) = p(y, g) + p(y, c)                                                   (eq. 4)
  p(y, g) = exp(psi_g(y)) / Z for y in V, 0 for y only in the source,
            exp(psi_g(UNK)) / Z for y in neither                             (eq. 5)
  p(y, c) = sum_{j: x_j = y} exp(psi_c(x_j)) / Z, 0 if y not in the source    (eq. 6)
  Z = sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j))
  psi_g = W_o s_t (eq. 7);  psi_c(x_j) = tanh(h_j^T W_c) s_t (eq. 8)
  zeta(y_{t-1}) = sum_tau rho_tau h_tau,  rho_tau = p(x_tau, c) / K on x_tau = y_{t-1}  (eq. 9)
"""

from __future__ import annotations

import math

import pytest
import torch

from models.config import ModelConfig
from models.copynet import CopyNetOutput
from models.extended import NEG, extended_log_probs, gold_log_probs
from models.seq2seq import shared_softmax
from pipeline.training.loop import nll_loss
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from tests.helpers import (
    toy_model,
)

# ---------------------------------------------------------------------------------------------
# The output layer's eq. 4-6 on a hand-built example, through the functions the model uses:
# shared_softmax (one normaliser), the layer's distribution (extended_log_probs: search) and
# gold_log_probs (training)
# ---------------------------------------------------------------------------------------------
# Decoder vocabulary V = 6: the 4 specials, then word "a" (id 4) and word "b" (id 5).
V = 6
A, B_ = 4, 5
# Example 0: source "a OOV1 a OOV1 <pad>" -> extended ids [4, 6, 4, 6, 0]; one OOV of its own.
# Example 1: source "b OOV1 OOV2 <pad> <pad>" -> [5, 6, 7, 0, 0]; two OOVs. So the batch has
# n_ext = 2 and slot 7 is empty (impossible) for example 0.
SRC_EXT = torch.tensor([[A, 6, A, 6, PAD], [B_, 6, 7, PAD, PAD]])
MASK = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
N_EXT = 2
# psi_g over V; <pad> and <s> are never emitted (NEG), as the model's mask_unemittable does.
GEN = [
    [NEG, 0.30, NEG, -0.20, 0.70, -1.10],
    [NEG, -0.40, NEG, 0.90, 0.10, 0.50],
]
# psi_c per source position; padding positions at NEG, as the model does.
COPY = [
    [0.50, 1.20, -0.30, 0.80, NEG],
    [-0.60, 0.25, 1.50, NEG, NEG],
]


def _tensors(requires_grad: bool = False):
    gen = torch.tensor(GEN, dtype=torch.float32, requires_grad=requires_grad)
    copy = torch.tensor(COPY, dtype=torch.float32, requires_grad=requires_grad)
    return gen, copy


LAYER = CopyNetOutput(ModelConfig(src_vocab=8, tgt_vocab=V, emb=4, hidden=4))
VIEW = {"src_ext": SRC_EXT, "src_mask": MASK, "n_ext": N_EXT}


def _copynet(gen: torch.Tensor, copy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of CopyNet's output layer from psi_g (B, V) and psi_c (B, S), as the model computes it
    after eq. 7-8 (``CopyNetOutput.score_all``: ``shared_softmax``): log p over V + X (B, V + X), the
    layer's ``distribution``, which search ranks; and log p(x_j, c) per source position (B, S), its
    step's ``copy_logp``."""
    scores = shared_softmax(gen.unsqueeze(1), copy.unsqueeze(1))  # (B, 1, ...)
    return LAYER.distribution(scores, VIEW).squeeze(1), LAYER.step_updates(scores)["copy_logp"]


def _copynet_gold(gen: torch.Tensor, copy: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log p(target) (B,) as training reads it (``CopyNetOutput.sequence_gold``: gold_log_probs, the
    distribution at the gold ids only), for extended ids target (B,)."""
    scores = shared_softmax(gen.unsqueeze(1), copy.unsqueeze(1))
    return gold_log_probs(
        scores.gen, scores.gen_shift, scores.copy, scores.copy_shift, SRC_EXT, MASK, target.unsqueeze(1)
    ).squeeze(1)


def _hand_z(b: int) -> float:
    """Z = sum_v exp(psi_g(v)) + sum_{real j} exp(psi_c(x_j)) in plain Python."""
    z = sum(math.exp(g) for g in GEN[b] if g > NEG / 2)
    z += sum(math.exp(c) for c, m in zip(COPY[b], MASK[b].tolist()) if m)
    return z


def _hand_prob(b: int, y: int) -> float:
    """p(y) by eq. 4-6 for extended id y of example b (y = UNK stands for 'in neither')."""
    z = _hand_z(b)
    src = SRC_EXT[b].tolist()
    mask = MASK[b].tolist()
    p_gen = math.exp(GEN[b][y]) / z if y < V and GEN[b][y] > NEG / 2 else 0.0  # eq. 5 (0 if y >= V)
    p_copy = sum(math.exp(COPY[b][j]) for j in range(len(src)) if mask[j] and src[j] == y) / z  # eq. 6
    return p_gen + p_copy


def test_output_layer_matches_eq_4_to_6_by_hand() -> None:
    gen, copy = _tensors()
    log_probs, copy_logp = _copynet(gen, copy)
    p = log_probs.double().exp()
    z0 = _hand_z(0)

    # (a) "a": in V and in the source twice -> generate + copy of both positions.
    expected_a = (math.exp(0.70) + math.exp(0.50) + math.exp(-0.30)) / z0
    assert p[0, A].item() == pytest.approx(expected_a, abs=1e-6)
    # (b) "b": in V only -> generate only.
    assert p[0, B_].item() == pytest.approx(math.exp(-1.10) / z0, abs=1e-6)
    # (c) OOV1 (slot 6): only in the source -> copy only (generate-mode 0 per eq. 5).
    expected_oov = (math.exp(1.20) + math.exp(0.80)) / z0
    assert p[0, 6].item() == pytest.approx(expected_oov, abs=1e-6)
    # A target in neither V nor the source is <unk>: exp(psi_g(UNK)) / Z.
    assert p[0, UNK].item() == pytest.approx(math.exp(0.30) / z0, abs=1e-6)
    assert p[0, EOS].item() == pytest.approx(math.exp(-0.20) / z0, abs=1e-6)

    # Example 1: "b" is in V and in the source once; "a" in V only; two copy-only OOV slots.
    z1 = _hand_z(1)
    assert p[1, B_].item() == pytest.approx((math.exp(0.50) + math.exp(-0.60)) / z1, abs=1e-6)
    assert p[1, A].item() == pytest.approx(math.exp(0.10) / z1, abs=1e-6)
    assert p[1, 6].item() == pytest.approx(math.exp(0.25) / z1, abs=1e-6)
    assert p[1, 7].item() == pytest.approx(math.exp(1.50) / z1, abs=1e-6)

    # Every slot against the generic hand formula, in the whole distribution (search) and read at
    # the gold id alone (training).
    for y in range(V + N_EXT):
        gold = _copynet_gold(gen, copy, torch.full((2,), y)).double().exp()
        for b in range(2):
            assert p[b, y].item() == pytest.approx(_hand_prob(b, y), abs=1e-6), (b, y)
            assert gold[b].item() == pytest.approx(_hand_prob(b, y), abs=1e-6), (b, y)

    # The per-position copy log-probs: log(exp(psi_c(x_j)) / Z), and 0 probability at padding.
    for b in range(2):
        z = _hand_z(b)
        for j in range(SRC_EXT.size(1)):
            want = math.exp(COPY[b][j]) / z if MASK[b, j] else 0.0
            assert copy_logp[b, j].double().exp().item() == pytest.approx(want, abs=1e-7), (b, j)


def test_output_layer_normalised_merged_and_padding_gets_nothing() -> None:
    gen, copy = _tensors()
    log_probs, copy_logp = _copynet(gen, copy)
    p = log_probs.double().exp()
    # A distribution over the extended vocabulary V + X.
    assert torch.allclose(p.sum(-1), torch.ones(2, dtype=torch.float64), atol=1e-5)
    # Repeated source words share one slot holding the copy mass of both positions.
    copy_p = copy_logp.double().exp()
    assert p[0, 6].item() == pytest.approx((copy_p[0, 1] + copy_p[0, 3]).item(), abs=1e-7)
    gen_a = math.exp(0.70) / _hand_z(0)
    assert p[0, A].item() - gen_a == pytest.approx((copy_p[0, 0] + copy_p[0, 2]).item(), abs=1e-7)
    # Padding positions (extended id <pad>) and never-emitted <s> get nothing.
    assert p[:, PAD].max().item() < 1e-30
    assert p[:, BOS].max().item() < 1e-30
    # The slot of an OOV that example 0 does not have (slot 7) is impossible for it.
    assert p[0, 7].item() < 1e-30
    assert log_probs[0, 7].item() < NEG / 2


@pytest.mark.parametrize("grad", [False, True], ids=["search", "autograd"])
def test_copy_merge_over_repeated_words_by_hand_and_stable(grad: bool) -> None:
    """CopyNet eq. 6's sum over the positions of one word, log sum_{j: x_j = v} exp(psi_c(x_j)) per
    word v, as extended_log_probs (the whole distribution) and gold_log_probs (at one id) compute it:
    here with no generate term (psi_g at NEG) and no shift, so each word's entry is that sum alone."""
    # Large scores: a naive exp would overflow float32 (exp(500) = inf).
    scores = torch.tensor([[500.0, 499.0, 10.0, NEG], [-3.0, -3.0, -3.0, -3.0]], requires_grad=grad)
    index = torch.tensor([[2, 2, 4, 0], [1, 1, 3, 1]])  # the word (id) at each source position
    mask = index != PAD  # row 0's last position is padding (score NEG, id <pad>)
    gen, zero = torch.full((2, 6), NEG), torch.zeros(2, 1)
    out = extended_log_probs(gen, None, scores, zero, index, 0)  # (2, 6)
    gold = torch.stack([gold_log_probs(gen, None, scores, zero, index, mask, torch.full((2,), v)) for v in range(6)], 1)
    lse = lambda xs: max(xs) + math.log(sum(math.exp(x - max(xs)) for x in xs))
    expected = [
        [NEG, NEG, lse([500.0, 499.0]), NEG, 10.0, NEG],
        [NEG, lse([-3.0] * 3), NEG, -3.0, NEG, NEG],
    ]
    for got_all in (out, gold):
        assert torch.isfinite(got_all).all()
        for b in range(2):
            for v in range(6):
                got, want = got_all[b, v].item(), expected[b][v]
                if want <= NEG / 2:
                    assert got <= NEG / 2, (b, v, got)  # empty slot (or only padding): exp(.) == 0
                else:
                    assert got == pytest.approx(want, abs=1e-4), (b, v)
        assert got_all[1, 1].item() == pytest.approx(-3.0 + math.log(3.0), abs=1e-5)


def test_output_layer_gradients_finite_with_empty_slots() -> None:
    gen, copy = _tensors(requires_grad=True)
    log_probs, copy_logp = _copynet(gen, copy)
    # Every slot in the objective, the empty ones included (example 0's slot 7, <pad>, <s>, padding
    # positions): no log 0 anywhere, so no NaN/inf gradient.
    (log_probs.sum() + copy_logp.sum()).backward()
    for g in (gen.grad, copy.grad):
        assert g is not None and torch.isfinite(g).all()
    # An empty slot (no generate term: outside V; no copy term: no source position holds it) is
    # log 0 written as the finite NEG: a constant, so nothing flows back from it (and nothing NaN).
    gen1, copy1 = _tensors(requires_grad=True)
    lp1, _ = _copynet(gen1, copy1)
    assert lp1[0, 7].item() == NEG
    lp1[0, 7].backward()
    assert gen1.grad.abs().max().item() == 0.0 and copy1.grad.abs().max().item() == 0.0
    # Analytic gradient of -log p(OOV1) w.r.t. each copy score: q_j - [x_j = OOV1] q_j / p(OOV1),
    # with q_j = p(x_j, c) = exp(psi_c(x_j)) / Z.
    gen2, copy2 = _tensors(requires_grad=True)
    lp, _ = _copynet(gen2, copy2)
    (-lp[0, 6]).backward()
    p6 = _hand_prob(0, 6)
    z = _hand_z(0)
    for j, want_in_slot in [(1, True), (3, True), (0, False), (2, False)]:
        q = math.exp(COPY[0][j]) / z  # p(x_j, c)
        want = q - (q / p6 if want_in_slot else 0.0)  # d(-log p6)/d psi_c_j = q - [j in slot] q/p6
        assert copy2.grad[0, j].item() == pytest.approx(want, abs=1e-6), j
    assert copy2.grad[0, 4].item() == 0.0  # padding gets no gradient
    assert torch.isfinite(gen2.grad).all()


# ---------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------
SRC_WORDS = ["a", "b", "c", "d", "e", "f", "g"]  # encoder vocabulary
TGT_WORDS = ["a", "b", "c", "d"]  # decoder vocabulary: e, f, g and z* are OOV for the decoder
SRC_VOCAB = Vocab(list(SPECIALS) + SRC_WORDS, [0] * 4 + [1] * len(SRC_WORDS))
TGT_VOCAB = Vocab(list(SPECIALS) + TGT_WORDS, [0] * 4 + [1] * len(TGT_WORDS))
# Three examples of different lengths and OOV counts (0, 1 repeated, 3); targets mix copied OOVs,
# in-vocab words found in the source or not, and an OOV found nowhere (-> <unk>).
SRCS = [
    ["a", "b"],
    ["c", "e", "a", "e", "d"],
    ["f", "zz", "b", "g", "a", "zz", "c"],
]
TGTS = [
    ["b", "a", "c"],
    ["e", "e", "c", "q"],
    ["zz", "g", "f", "d", "zz", "b"],
]


def _batch():
    return collate(SRCS, TGTS, SRC_VOCAB, TGT_VOCAB)


def _model(name: str, seed: int = 0):
    # Random init is small: scale parameters (x2) so that distributions are far from uniform and the
    # checks below discriminate.
    return toy_model(name, SRC_VOCAB, TGT_VOCAB, seed=seed, scale=2.0, emb=12, hidden=16)


def test_batch_fixture_is_what_the_tests_assume() -> None:
    b = _batch()
    v = len(TGT_VOCAB)
    assert b.n_ext == 3
    assert b.oovs == [[], ["e"], ["f", "zz", "g"]]
    assert b.src_ext[1].tolist() == [6, v, 4, v, 7, 0, 0]
    assert b.tgt_out[1].tolist()[:5] == [v, v, 6, UNK, EOS]
    assert b.tgt_out[2].tolist() == [v + 1, v + 2, v, 7, v + 1, 5, EOS]


def test_copynet_step_matches_eq_4_to_8_in_float64() -> None:
    """Rebuild p(y_t) from s_t, M, W_o, W_c by the paper's formulas, for every slot, every step."""
    model = _model("copynet", seed=3)
    batch = _batch()
    v = len(TGT_VOCAB)
    out = model.output
    with torch.no_grad():
        state = model.encode(batch)
        memory = state["memory"].double()  # (B, S, 2H)
        w_o = out.w_o.weight.double()  # (V, H)
        w_c = out.w_c.weight.double()  # (H, 2H)
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            s_t = state["s"].double()
            for b in range(3):
                n = int(batch.src_len[b])
                psi_g = (w_o @ s_t[b]).tolist()  # eq. 7
                psi_c = [float(torch.tanh(w_c @ memory[b, j]) @ s_t[b]) for j in range(n)]  # eq. 8
                emit = [i for i in range(v) if i not in (PAD, BOS)]
                z = sum(math.exp(psi_g[i]) for i in emit) + sum(math.exp(c) for c in psi_c)
                src = batch.src_ext[b, :n].tolist()
                for y in range(v + batch.n_ext):
                    p_gen = math.exp(psi_g[y]) / z if y in emit else 0.0  # eq. 5
                    p_copy = sum(math.exp(psi_c[j]) for j in range(n) if src[j] == y) / z  # eq. 6
                    got = math.exp(float(log_probs[b, y]))
                    assert got == pytest.approx(p_gen + p_copy, abs=1e-6), (t, b, y)
                # Generate-mode is 0 for an OOV: its slot holds exactly its copy probability.
                copy_p = state["copy_logp"][b].double().exp()
                for k in range(len(batch.oovs[b])):
                    pos = [j for j in range(n) if src[j] == v + k]
                    assert pos, "every OOV slot comes from a source position"
                    assert math.exp(float(log_probs[b, v + k])) == pytest.approx(float(copy_p[pos].sum()), abs=1e-7)
                # copy_logp at padding positions carries no mass.
                assert copy_p[n:].sum().item() < 1e-30


# ---------------------------------------------------------------------------------------------
# Selective read (eq. 9)
# ---------------------------------------------------------------------------------------------
def test_selective_read_eq_9_by_hand() -> None:
    cfg = ModelConfig(src_vocab=10, tgt_vocab=6, emb=4, hidden=2)
    layer = CopyNetOutput(cfg)
    torch.manual_seed(1)
    memory = torch.randn(3, 5, 4)  # (B, S, 2H)
    # Row 0: word 7 (an OOV slot) at positions 1 and 3; row 1: word 4 once; row 2: word 5 nowhere.
    src_ext = torch.tensor([[4, 7, 5, 7, PAD], [4, 6, 5, PAD, PAD], [4, 6, 4, 7, 6]])
    mask = src_ext != PAD
    probs = [[0.10, 0.30, 0.05, 0.15, 0.0], [0.2, 0.1, 0.3, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1, 0.1]]
    copy_logp = torch.tensor([[math.log(q) if q > 0 else NEG for q in row] for row in probs])
    state = {"memory": memory, "src_ext": src_ext, "src_mask": mask, "select_scores": copy_logp}

    zeta = layer.extra_input(state, torch.tensor([7, 4, 5]))
    assert zeta.shape == (3, 4)
    # Row 0: rho = p/K over positions 1 and 3, K = 0.30 + 0.15.
    k = 0.30 + 0.15
    want0 = (0.30 / k) * memory[0, 1] + (0.15 / k) * memory[0, 3]
    assert torch.allclose(zeta[0], want0, atol=1e-6)
    # Row 1: a single matching position: zeta = h_0 exactly.
    assert torch.allclose(zeta[1], memory[1, 0], atol=1e-6)
    # Row 2: y_{t-1} = 5 is not in the source: zeta = 0 exactly.
    assert torch.equal(zeta[2], torch.zeros(4))

    # <s> (step 1) and <pad> (rows already finished in greedy search) are never in the source:
    # padding positions have extended id <pad> but are masked out.
    zeta = layer.extra_input(state, torch.tensor([BOS, PAD, PAD]))
    assert torch.equal(zeta, torch.zeros(3, 4))

    # Tiny copy probabilities (exp(-200) underflows to 0 in float32): rho = p / K must still be
    # computed in log space, giving 1 / (1 + e^-1) and e^-1 / (1 + e^-1), not 0/0.
    tiny = torch.full((3, 5), NEG)
    tiny[0, 1], tiny[0, 3] = -200.0, -201.0
    zeta = layer.extra_input({**state, "select_scores": tiny}, torch.tensor([7, 5, 5]))
    assert torch.isfinite(zeta).all()
    w1 = 1.0 / (1.0 + math.exp(-1.0))
    assert torch.allclose(zeta[0], w1 * memory[0, 1] + (1.0 - w1) * memory[0, 3], atol=1e-6)


def test_selective_read_feeds_the_state_update() -> None:
    """In the model, zeta enters the GRU: the same prev id gives a different s_t when it is copied
    from a different source position (its selective read differs), and feeding an OOV's extended
    id differs from feeding <unk> (same embedding, but zeta != 0)."""
    model = _model("copynet", seed=5)
    batch = _batch()
    v = len(TGT_VOCAB)
    with torch.no_grad():
        state = model.encode(batch)
        _, state = model.step(state, batch.tgt_in[:, 0])
        _, s_oov = model.step(state, torch.tensor([UNK, v, v + 1]))
        _, s_unk = model.step(state, torch.tensor([UNK, UNK, UNK]))
    assert torch.allclose(s_oov["s"][0], s_unk["s"][0])  # <unk> in both: identical
    assert (s_oov["s"][1] - s_unk["s"][1]).abs().max() > 1e-3
    assert (s_oov["s"][2] - s_unk["s"][2]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["encdec", "rnnsearch"])
def test_baseline_scores_unk_for_a_target_word_only_copying_gives(name: str) -> None:
    """A baseline cannot copy: an OOV target found in the source is scored as <unk>, finitely."""
    model = _model(name)
    copied = collate([["a", "zz", "b"]], [["b", "zz"]], TGT_VOCAB, TGT_VOCAB)
    as_unk = collate([["a", "zz", "b"]], [["b", "<unk>"]], TGT_VOCAB, TGT_VOCAB)
    assert copied.tgt_out[0, 1].item() == len(TGT_VOCAB)  # the gold is the extended id V + 0
    with torch.no_grad():
        loss_copied, _ = nll_loss(model, copied)
        loss_unk, _ = nll_loss(model, as_unk)
    assert loss_copied.item() == pytest.approx(loss_unk.item(), abs=1e-6)
    assert loss_copied.item() < 30


def test_selective_read_ignores_non_matching_positions_even_at_neg() -> None:
    """With every copy log-prob at NEG (the initial state), rho still covers only the matches."""
    out = CopyNetOutput(ModelConfig(src_vocab=8, tgt_vocab=8, emb=2, hidden=1))
    memory = torch.tensor([[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]])  # (1, 4, 2)
    state = {
        "memory": memory,
        "src_ext": torch.tensor([[5, 6, 5, 7]]),
        "src_mask": torch.ones(1, 4, dtype=torch.bool),
        "select_scores": torch.full((1, 4), NEG),
    }
    zeta = out.extra_input(state, torch.tensor([5]))
    assert zeta.tolist() == [[2.0, 3.0]]  # mean of positions 0 and 2, not of all four
