"""Pointer Softmax (Gulcehre et al. 2016, section 4) checked against hand computation.

Expected numbers are computed independently of the library, in plain Python floats or float64,
from the paper's formulas (z_t = 1: shortlist, z_t = 0: location, section 4):

  d_t = p(z_t = 1) = sigmoid(T f([h_t; c_t]))                           (eq. 8-9)
  p(y_t, z_t = 1) = d_t w_t(y_t),  p(l_t, z_t = 0) = (1 - d_t) l_t       (eq. 6-7)
  training: maximise sum_t log p(y_t, z_t) with z_t observed             (eq. 4, 5, 10)
  extended view: p(w) = d_t w_t(w) + (1 - d_t) sum_{j: x_j = w} l_tj
  test time: argmax over [d_t w_t; (1 - d_t) l_t]                       (4.1)
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from models.config import ModelConfig
from models.pointer_softmax import (
    NoisyTanh,
    PointerSoftmaxOptions,
    PointerSoftmaxOutput,
    build_pointer_softmax,
    paper_decision,
)
from pipeline.decoding.search import greedy
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from tests.helpers import (
    assert_step_distributions_normalised,
    toy_copy_scores,
    toy_model,
)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------------------------------------
# The output layer on a hand-built step
# ---------------------------------------------------------------------------------------------
# V = 8: the specials, a (4), b (5), c (6), d (7). Shortlist 6: a and b are generated, c and d can
# only be pointed at. One source "a c OOV a" (extended ids 4 6 8 4), fixed attention l_t.
V, SHORT = 8, 6
A, B_, C, D, OOV = 4, 5, 6, 7, 8
SRC = [A, C, OOV, A]
L_T = [0.4, 0.3, 0.2, 0.1]
# Readout W (rows 0..5 = the shortlist ids) and bias on x = [s; c1; c2]; switch v tanh(w.x + b) + b_o.
W = [[0.1, 0.2, -0.3], [0.5, -0.1, 0.2], [0.3, 0.3, 0.3], [-0.4, 0.6, 0.1], [0.7, -0.2, 0.4], [-0.3, 0.1, 0.9]]
BIAS = [0.0, 0.1, 0.0, -0.2, 0.3, 0.05]
SW_W, SW_B, SW_V, SW_BO = [0.8, -0.5, 0.3], 0.1, 1.5, -1.0
# Five steps (rows): their [s; c] inputs, the gold target and the annotation (switch, pointer).
XS = [[0.5, -1.0, 2.0], [-1.5, 0.2, 0.3], [1.0, 1.0, -1.0], [0.0, 0.5, 0.5], [2.0, -0.3, 0.1]]
ROWS = [  # (target, pointed, pointer)
    (A, False, -1),  # shortlist word
    (C, True, 1),  # a word only the location softmax gives, at position 1
    (OOV, True, 2),  # a source OOV
    (D, False, -1),  # annotated "shortlist" but outside it: scored as <unk> (section 4)
    (A, True, -1),  # pointed, position unknown: argmax of l_t (5.3), i.e. position 0
]


def _hand_parts(x: list[float], temperature: float) -> tuple[float, dict[int, float]]:
    """d_t and the shortlist softmax w_t over the emittable ids (not <pad>, <s>) for input x."""
    logits = {i: sum(w * xi for w, xi in zip(W[i], x)) + BIAS[i] for i in range(SHORT) if i not in (PAD, BOS)}
    z = sum(math.exp(v) for v in logits.values())
    hidden = math.tanh(sum(w * xi for w, xi in zip(SW_W, x)) + SW_B)
    d = sigmoid(temperature * (SW_V * hidden + SW_BO))
    return d, {i: math.exp(v) / z for i, v in logits.items()}


def _hand_layer(temperature: float = 1.0, **opts) -> PointerSoftmaxOutput:
    cfg = ModelConfig(src_vocab=V, tgt_vocab=V, emb=2, hidden=1)  # [s; c] has 1 + 2 inputs
    layer = PointerSoftmaxOutput(
        cfg, PointerSoftmaxOptions(shortlist=SHORT, switch_hidden=1, temperature=temperature, **opts)
    )
    with torch.no_grad():
        layer.readout.weight.copy_(torch.tensor(W))
        layer.readout.bias.copy_(torch.tensor(BIAS))
        layer.switch.layer1.weight.copy_(torch.tensor([SW_W]))
        layer.switch.layer1.bias.fill_(SW_B)
        layer.switch.out.weight.fill_(SW_V)
        layer.switch.out.bias.fill_(SW_BO)
    return layer.eval()


def _hand_step(layer: PointerSoftmaxOutput, annotated: bool = True):
    n = len(XS)
    x = torch.tensor(XS)
    state = {
        "src_ext": torch.tensor([SRC] * n),
        "src_mask": torch.ones(n, len(SRC), dtype=torch.bool),
        "n_ext": 1,
        "attn": torch.tensor([L_T] * n),
    }
    state.update(layer.init_state(state))
    log_probs, updates = layer(x[:, :1], x[:, 1:], state)
    state = {**state, **updates}
    target = torch.tensor([r[0] for r in ROWS])
    batch = SimpleNamespace(tgt_pointer=None, tgt_switch=None)
    if annotated:
        batch = SimpleNamespace(
            tgt_switch=torch.tensor([[r[1]] for r in ROWS]), tgt_pointer=torch.tensor([[r[2]] for r in ROWS])
        )
    return log_probs, state, layer.gold_score(log_probs, state, target, 0, batch)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_hand_computed_likelihood_both_switch_values(temperature: float) -> None:
    layer = _hand_layer(temperature)
    with torch.no_grad():
        _, _, gold = _hand_step(layer)
    for row, (x, (target, pointed, pointer)) in enumerate(zip(XS, ROWS)):
        d, w = _hand_parts(x, temperature)
        if not pointed:  # z_t = 1: log d_t + log w_t(y_t); a word outside the shortlist is <unk>
            want = math.log(d) + math.log(w[target if target < SHORT else UNK])
        else:  # z_t = 0: log(1 - d_t) + log l_t[pointer]; unknown pointer -> argmax of l_t
            want = math.log(1.0 - d) + math.log(L_T[pointer] if pointer >= 0 else max(L_T))
        assert gold[row].item() == pytest.approx(want, abs=1e-5), row


def test_unknown_pointer_switch_scores_the_switch_only() -> None:
    layer = _hand_layer(unknown_pointer="switch")
    with torch.no_grad():
        _, _, gold = _hand_step(layer)
    d, _ = _hand_parts(XS[4], 1.0)
    assert gold[4].item() == pytest.approx(math.log(1.0 - d), abs=1e-6)
    d, _ = _hand_parts(XS[1], 1.0)  # a known pointer is unaffected
    assert gold[1].item() == pytest.approx(math.log(1.0 - d) + math.log(L_T[1]), abs=1e-6)


def test_rule_without_annotations_not_in_shortlist_but_in_source() -> None:
    """No annotations: point iff the target is outside the shortlist and in the source."""
    layer = _hand_layer()
    with torch.no_grad():
        _, state, gold = _hand_step(layer, annotated=False)
    for row, (x, (target, _, _)) in enumerate(zip(XS, ROWS)):
        d, w = _hand_parts(x, 1.0)
        if target >= SHORT and target in SRC:  # c, OOV: first occurrence
            want = math.log(1.0 - d) + math.log(L_T[SRC.index(target)])
        else:  # a is in the shortlist (although also in the source); d is in neither: <unk>
            want = math.log(d) + math.log(w[target if target < SHORT else UNK])
        assert gold[row].item() == pytest.approx(want, abs=1e-5), row
    pointed, pointer = layer.observed_switch(
        state, torch.tensor([r[0] for r in ROWS]), 0, SimpleNamespace(tgt_pointer=None, tgt_switch=None)
    )
    assert pointed.tolist() == [False, True, True, False, False]
    assert pointer.tolist() == [-1, 1, 2, -1, -1]


def test_extended_view_and_joint_sum_to_one_by_hand() -> None:
    layer = _hand_layer()
    with torch.no_grad():
        log_probs, state, _ = _hand_step(layer)
    p = log_probs.double().exp()
    for row, x in enumerate(XS):
        d, w = _hand_parts(x, 1.0)
        want = {i: 0.0 for i in range(V + 1)}
        for i, wi in w.items():
            want[i] += d * wi
        for x_j, l_j in zip(SRC, L_T):
            want[x_j] += (1.0 - d) * l_j  # repeated "a" (positions 0, 3) merges
        for y in range(V + 1):
            assert p[row, y].item() == pytest.approx(want[y], abs=1e-6), (row, y)
        assert p[row].sum().item() == pytest.approx(1.0, abs=1e-6)
        # The joint over (word, z = 1) and (location, z = 0) is a distribution too.
        joint = (
            state["ps_log_d"][row].double().exp() * state["ps_log_w"][row].double().exp().sum()
            + state["ps_log_1md"][row].double().exp() * state["ps_log_l"][row].double().exp().sum()
        )
        assert joint.item() == pytest.approx(1.0, abs=1e-6)
    assert p[:, D].max().item() < 1e-30  # outside the shortlist and not in the source


def test_max_view_is_the_papers_decision_rule_by_hand() -> None:
    layer = _hand_layer(decode="max")
    with torch.no_grad():
        log_probs, state, _ = _hand_step(layer)
    ids, pointed, pos = paper_decision(state)
    for row, x in enumerate(XS):
        d, w = _hand_parts(x, 1.0)
        cands = [(d * wi, i, -1) for i, wi in w.items()] + [((1 - d) * l_j, SRC[j], j) for j, l_j in enumerate(L_T)]
        best, best_id, best_pos = max(cands)
        assert ids[row].item() == best_id and pos[row].item() == best_pos and pointed[row].item() == (best_pos >= 0)
        assert log_probs[row].argmax().item() == best_id
        assert math.exp(log_probs[row].max().item()) == pytest.approx(best, abs=1e-6)
        # "a" scores the better of its derivations, not their sum.
        want_a = max(d * w[A], (1 - d) * L_T[0])
        assert math.exp(log_probs[row, A].item()) == pytest.approx(want_a, abs=1e-6)
    layer.train()  # training always uses the marginal view
    with torch.no_grad():
        log_probs, _, _ = _hand_step(layer)
    assert log_probs.double().exp().sum(-1).sub(1).abs().max().item() < 1e-6


# ---------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------
SRC_WORDS = ["a", "b", "c", "d", "e", "f", "g"]
TGT_WORDS = ["a", "b", "c", "d"]  # shortlist 6: a, b generated; c, d only pointed; e f g zz q OOV
SRC_VOCAB = Vocab(list(SPECIALS) + SRC_WORDS, [0] * 4 + [1] * len(SRC_WORDS))
TGT_VOCAB = Vocab(list(SPECIALS) + TGT_WORDS, [0] * 4 + [1] * len(TGT_WORDS))
SRCS = [["a", "c", "b"], ["c", "e", "a", "e", "d"], ["f", "zz", "b", "g", "a", "zz", "c"]]
TGTS = [["b", "c", "a"], ["e", "e", "c", "q", "d"], ["zz", "g", "d", "b", "c"]]


def _batch(tgts=TGTS):
    return collate(SRCS, tgts, SRC_VOCAB, TGT_VOCAB)


def _model(seed: int = 0, scale: float = 2.0, **options):
    options = {"shortlist": 6, **options}
    return toy_model(build_pointer_softmax, SRC_VOCAB, TGT_VOCAB, seed=seed, scale=scale, emb=12, hidden=16, **options)


def test_options_are_checked() -> None:
    cfg = ModelConfig(src_vocab=10, tgt_vocab=10, options={"shortlist": 6, "nope": 1})
    with pytest.raises(ValueError, match="nope"):
        build_pointer_softmax(cfg)
    # Each bad option with the one check it fails, the last words of the message (the options' repr
    # comes before them; anchored at the end: a ValueError for another reason fails).
    errors = [
        ({"switch": "relu"}, "switch in ('mlp', 'noisy_residual')"),
        ({"temperature": 0.0}, "temperature > 0"),
        ({"shortlist": 4}, "shortlist > 4"),
        ({"decode": "beam"}, "decode in ('marginal', 'max')"),
        ({"unknown_pointer": "zero"}, "unknown_pointer in ('argmax', 'switch')"),
        ({"batch_vocab_scope": "corpus"}, "batch_vocab_scope in ('batch', 'example')"),
        ({"batch_vocab": 4}, "batch_vocab > 4"),
        ({"switch_hidden": 0}, "switch_hidden >= 1"),
    ]
    for bad, need in errors:
        message = r"^invalid pointer_softmax options PointerSoftmaxOptions\(.*\): need " + re.escape(need) + "$"
        with pytest.raises(ValueError, match=message):
            build_pointer_softmax(ModelConfig(src_vocab=10, tgt_vocab=10, options=bad))
    both = re.escape("need switch in ('mlp', 'noisy_residual'), temperature > 0") + "$"  # every failed check
    with pytest.raises(ValueError, match=both):
        build_pointer_softmax(ModelConfig(src_vocab=10, tgt_vocab=10, options={"switch": "relu", "temperature": -1}))


@pytest.mark.parametrize("shortlist", [len(TGT_VOCAB), len(TGT_VOCAB) + 1, 250])
def test_a_shortlist_of_the_vocabulary_or_more_is_the_whole_vocabulary(shortlist: int) -> None:
    """A vocabulary of fewer words than the shortlist is all shortlist (as WEAN's candidates): the
    shared default of 250 fits a small corpus. The model is the one with ``shortlist: null``, the same
    parameters and the same scores, and every word of the vocabulary can be generated."""
    batch = _batch()
    full, capped = _model(seed=3, shortlist=None), _model(seed=3, shortlist=shortlist)
    assert capped.output.shortlist == capped.output.limit == len(TGT_VOCAB) == full.output.limit
    assert [(n, p.shape) for n, p in full.named_parameters()] == [(n, p.shape) for n, p in capped.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), capped.parameters()))
    assert torch.equal(full.training_target(batch), capped.training_target(batch))
    with torch.no_grad():
        assert torch.equal(full(batch, objective=True), capped(batch, objective=True))
        log_probs, _ = capped.step(capped.encode(batch), batch.tgt_in[:, 0])  # (B, V + X)
    assert bool((log_probs[:, len(SPECIALS) : len(TGT_VOCAB)] > -1e4).all())  # every word generable


def test_training_targets_with_a_shortlist() -> None:
    """Seq2Seq.training_target with the shortlist: words outside it stay when they are in the
    source (they are pointed at), else become <unk>."""
    model = _model()
    batch = _batch()
    v = len(TGT_VOCAB)
    target = model.training_target(batch)
    assert target[0].tolist() == [5, 6, 4, EOS, PAD, PAD]  # b, c (in the source), a
    assert target[1].tolist() == [v, v, 6, UNK, 7, EOS]  # e e c q->unk d (in the source)
    assert target[2].tolist() == [v + 1, v + 2, UNK, 5, 6, EOS]  # d: not in this source -> unk


@pytest.mark.parametrize("switch", ["mlp", "noisy_residual"])
def test_model_step_matches_section_4_in_float64(switch: str) -> None:
    """Rebuild d_t, w_t, l_t from s_t, the attention, the memory and the weights; every slot, step."""
    model = _model(seed=3, switch=switch, temperature=2.0)
    out = model.output
    batch = _batch()
    v = len(TGT_VOCAB)
    w_r, b_r = out.readout.weight.double(), out.readout.bias.double()
    sw = out.switch
    with torch.no_grad():
        state = model.encode(batch)
        memory = state["memory"].double()  # (B, S, 2H)
        gold = model(batch, objective=True)  # the training objective (eval mode: no noise)
        target = model.training_target(batch)
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            s_t, attn = state["s"].double(), state["attn"].double()
            for b in range(3):
                n = int(batch.src_len[b])
                x = torch.cat([s_t[b], attn[b] @ memory[b]])  # [h_t; c_t], c_t = sum_j l_tj h_j
                logits = (w_r @ x + b_r).tolist()
                emit = [i for i in range(6) if i not in (PAD, BOS)]
                z = sum(math.exp(logits[i]) for i in emit)
                w = {i: math.exp(logits[i]) / z for i in emit}
                if switch == "mlp":
                    hidden = torch.tanh(sw.layer1.weight.double() @ x + sw.layer1.bias.double())
                else:  # phi at eval: alpha h + (1 - alpha) u + d sigma sqrt(2/pi)

                    def phi(u, p):
                        h = u.clamp(-1, 1)
                        sig = 0.5 * (torch.sigmoid(p.double() * (h - u)) - 0.5) ** 2
                        return 1.1 * h - 0.1 * u + torch.sign(u) * sig * math.sqrt(2 / math.pi)

                    lower = phi(sw.layer1.weight.double() @ x + sw.layer1.bias.double(), sw.act1.p)
                    hidden = phi(sw.layer2.weight.double() @ lower + sw.layer2.bias.double(), sw.act2.p) + lower
                d = sigmoid(2.0 * float(sw.out.weight.double()[0] @ hidden + sw.out.bias.double()[0]))
                src = batch.src_ext[b, :n].tolist()
                l_t = attn[b, :n].tolist()
                for y in range(v + batch.n_ext):
                    want = d * w.get(y, 0.0) + (1 - d) * sum(l_j for l_j, x_j in zip(l_t, src) if x_j == y)
                    assert math.exp(float(log_probs[b, y])) == pytest.approx(want, abs=1e-6), (t, b, y)
                # The training objective: log p(y_t, z_t), z_t by the rule (no annotations here).
                y = int(target[b, t])
                if y == PAD:
                    assert gold[b, t].item() == 0.0
                elif y >= 6 and y in src:
                    want = math.log(1 - d) + math.log(l_t[src.index(y)])
                    assert gold[b, t].item() == pytest.approx(want, abs=1e-5), (t, b)
                else:
                    assert gold[b, t].item() == pytest.approx(math.log(d) + math.log(w[y]), abs=1e-5), (t, b)


def test_annotations_override_the_rule() -> None:
    """Annotated pointers are used as given: here "b" of example 2 (in the shortlist and in the
    source at position 2) is annotated as pointed, and "c" of example 0 as a shortlist word."""
    model = _model(seed=4)
    plain = _batch()
    pointers = [[-1, 1, -1], [1, 1, 0, -1, 4], [1, 3, -1, 2, 6]]
    switches = [[False, False, False], [True, True, True, False, True], [True, True, False, True, True]]
    annotated = collate(SRCS, TGTS, SRC_VOCAB, TGT_VOCAB, pointers=pointers, switches=switches)
    with torch.no_grad():
        g_plain, g_ann = model(plain, objective=True), model(annotated, objective=True)
        state = model.encode(plain)
        for t in range(4):  # the log-parts of steps 0..3 (same inputs in both batches)
            _, state = model.step(state, plain.tgt_in[:, t])
            if t == 1:  # example 0, "c": shortlist side (annotation) vs pointer (rule); c is <unk> there
                step1 = {k: state[k][0] for k in ("ps_log_d", "ps_log_1md", "ps_log_w", "ps_log_l")}
            if t == 3:  # example 2, "b": pointer at 2 (annotation) vs shortlist (rule)
                step3 = {k: state[k][2] for k in ("ps_log_d", "ps_log_1md", "ps_log_w", "ps_log_l")}
    assert g_plain[0, 1].item() == pytest.approx((step1["ps_log_1md"] + step1["ps_log_l"][1]).item(), abs=1e-5)
    assert g_ann[0, 1].item() == pytest.approx((step1["ps_log_d"] + step1["ps_log_w"][UNK]).item(), abs=1e-5)
    assert g_plain[2, 3].item() == pytest.approx((step3["ps_log_d"] + step3["ps_log_w"][5]).item(), abs=1e-5)
    assert g_ann[2, 3].item() == pytest.approx((step3["ps_log_1md"] + step3["ps_log_l"][2]).item(), abs=1e-5)
    # Everywhere else the annotation says what the rule says.
    same = torch.ones_like(g_plain, dtype=torch.bool)
    same[0, 1] = same[2, 3] = False
    assert torch.allclose(g_plain[same], g_ann[same], atol=1e-6)


def test_switch_forced_to_shortlist_equals_plain_shortlist_softmax() -> None:
    """Switch bias -inf equals a plain shortlist softmax, read in the paper's convention:
    d_t = p(z_t = 1) is the *shortlist* probability, so forcing the shortlist is a last bias of
    +inf (d_t = 1); -inf (d_t = 0) leaves the location softmax alone, a pointer network."""
    batch = _batch()
    v = len(TGT_VOCAB)
    for bias in (float("inf"), float("-inf")):
        model = _model(seed=5)
        with torch.no_grad():
            model.output.switch.out.bias.fill_(bias)
            state = model.encode(batch)
            for t in range(batch.tgt_in.size(1)):
                log_probs, state = model.step(state, batch.tgt_in[:, t])
                if bias > 0:  # a plain softmax over the shortlist (minus <pad>, <s>), 0 elsewhere
                    x = torch.cat([state["s"], torch.bmm(state["attn"].unsqueeze(1), state["memory"]).squeeze(1)], -1)
                    logits = model.output.readout(x).double()
                    logits[:, [PAD, BOS]] = -math.inf
                    want = torch.zeros(3, v + batch.n_ext, dtype=torch.float64)
                    want[:, :6] = torch.softmax(logits, dim=-1)
                else:  # p(w) = sum_{j: x_j = w} l_tj
                    want = torch.zeros(3, v + batch.n_ext, dtype=torch.float64)
                    want.scatter_add_(1, batch.src_ext, state["attn"].double() * (batch.src != PAD))
                assert torch.allclose(log_probs.double().exp(), want, atol=1e-6), (bias, t)
                assert torch.isfinite(log_probs).all()


def test_gradients_finite_when_attention_underflows() -> None:
    """A gold pointer at a position whose attention weight is 0 in float32 stays finite."""
    layer = _hand_layer().train()
    x = torch.tensor(XS, requires_grad=True)
    n = len(XS)
    attn = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * n, requires_grad=True)
    state = {
        "src_ext": torch.tensor([SRC] * n),
        "src_mask": torch.ones(n, 4, dtype=torch.bool),
        "n_ext": 1,
        "attn": attn,
    }
    state.update(layer.init_state(state))
    log_probs, updates = layer(x[:, :1], x[:, 1:], state)
    state = {**state, **updates}
    batch = SimpleNamespace(tgt_switch=torch.ones(n, 1, dtype=torch.bool), tgt_pointer=torch.full((n, 1), 1))
    gold = layer.gold_score(log_probs, state, torch.full((n,), C), 0, batch)
    assert torch.isfinite(gold).all() and (gold > -100).all()
    (gold.sum() + log_probs.sum()).backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(attn.grad).all()


def test_noisy_tanh_algorithm_1() -> None:
    act = NoisyTanh(3, alpha=1.1, c=0.5)
    x = torch.tensor([[0.3, -0.9, 2.0], [-3.0, 1.0, 0.0]])
    with torch.no_grad():
        act.p.copy_(torch.tensor([1.0, 2.0, 0.5]))
        act.eval()
        y = act(x)
    for (i, j), p in zip([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)], [1.0, 2.0, 0.5, 1.0, 2.0, 0.5]):
        u = float(x[i, j])
        h = max(min(u, 1.0), -1.0)
        d = -math.copysign(1.0, u) * -1.0 if u != 0 else 0.0  # -sgn(x) sgn(1 - 1.1)
        sig = 0.5 * (sigmoid(p * (h - u)) - 0.5) ** 2
        want = 1.1 * h - 0.1 * u + d * sig * math.sqrt(2 / math.pi)  # |xi| -> its mean at test time
        assert y[i, j].item() == pytest.approx(want, abs=1e-6), (i, j)
    assert torch.allclose(y[0, :2], x[0, :2], atol=1e-7)  # identity inside [-1, 1]
    # Training: half-normal noise whose mean is the test-time value.
    act.train()
    torch.manual_seed(0)
    with torch.no_grad():
        samples = torch.stack([act(x) for _ in range(4000)])
    assert samples.std(0)[0, 2].item() > 0.001 and samples.std(0)[0, 0].item() == 0.0
    assert torch.allclose(samples.mean(0), y, atol=2e-3)


def test_batch_vocabulary_trick() -> None:
    """batch_vocab K: the shortlist softmax covers ids < K and the sources' words, nothing else."""
    batch = _batch()
    v = len(TGT_VOCAB)
    for scope in ("batch", "example"):
        model = _model(seed=6, batch_vocab=5, batch_vocab_scope=scope, shortlist=None)
        with torch.no_grad():
            state = model.encode(batch)
            allowed = state["ps_allowed"]
            union = {4, 5, 6, 7}  # a b c d all occur in some source
            own = [{4, 5, 6}, {4, 6, 7}, {4, 5, 6}]
            for b in range(3):
                want = {i for i in range(5)} | (union if scope == "batch" else own[b])
                assert {i for i in range(v) if allowed[b, i]} == want, (scope, b)
            gold = model(batch, objective=True)  # the training objective (eval mode: no noise)
            for t, (_, state, _) in enumerate(assert_step_distributions_normalised(model, batch, atol=1e-5)):
                w = state["ps_log_w"].double().exp()
                assert (w[~allowed] < 1e-30).all()
                if t == 2:
                    # Example 2's gold "d" (in V) is in no source of its own, not among the K frequent
                    # ids: scored as <unk> with scope example, as itself with scope batch (example 1's
                    # source has it).
                    assert int(batch.tgt_out[2, t]) == 7
                    y = UNK if scope == "example" else 7
                    want = (state["ps_log_d"][2] + state["ps_log_w"][2, y]).item()
                    assert gold[2, t].item() == pytest.approx(want, abs=1e-5)
                    assert (w[2, 7].item() < 1e-30) == (scope == "example")


def test_example_scope_decodes_independently_of_the_batch() -> None:
    model = _model(seed=7, batch_vocab=5, batch_vocab_scope="example", shortlist=None)
    together = greedy(model, collate(SRCS, None, SRC_VOCAB, TGT_VOCAB), max_len=6)
    alone = [greedy(model, collate([s], None, SRC_VOCAB, TGT_VOCAB), max_len=6)[0] for s in SRCS]
    assert [h.ids for h in together] == [h.ids for h in alone]


def test_greedy_with_decode_max_follows_the_papers_rule() -> None:
    """Step by step: the paper's argmax over [d w; (1 - d) l] is what greedy emits with decode: max."""
    batch = collate(SRCS, None, SRC_VOCAB, TGT_VOCAB)
    for seed in range(4):
        model = _model(seed=seed, scale=3.0, decode="max")
        hyps = greedy(model, batch, max_len=8)
        with torch.no_grad():
            state = model.encode(batch)
            prev = torch.full((3,), BOS)
            done = torch.zeros(3, dtype=torch.bool)
            seqs = [[], [], []]
            for _ in range(8):
                _, state = model.step(state, prev)
                ids, pointed, pos = paper_decision(state)
                ids = ids.masked_fill(done, PAD)
                for b in range(3):
                    if not done[b]:
                        seqs[b].append(int(ids[b]))
                done = done | (ids == EOS)
                prev = ids
                if done.all():
                    break
        assert [h.ids for h in hyps] == seqs, seed


# ---------------------------------------------------------------------------------------------
# Learning: the toy copy task with unseen fillers (tests/models/test_learning.py)
# ---------------------------------------------------------------------------------------------
def test_learns_to_copy_unseen_fillers() -> None:
    """Shortlist 5 (the specials and s0): every filler and "b" must be pointed at, as rare words
    are in the paper; at test time the fillers are OOV for encoder and decoder."""
    seen, unseen = toy_copy_scores(
        "pointer softmax", "pointer_softmax", build_pointer_softmax, shortlist=5, temperature=2.0
    )
    assert seen >= 0.9
    assert unseen >= 0.9
