"""The contract every mechanism must meet, over every mechanism :mod:`models.registry` discovers and
every option set it declares (``Mechanism.variants``): adding a mechanism adds its cases here, with
no test to copy (docs/extending.md). A mechanism's own test file keeps its paper's hand-computed
maths. The checks (tests/helpers.py, "The mechanism contract"):

1. each decoding step is a distribution over the extended vocabulary (``check_distributions``);
2. two-phase teacher forcing equals the stepwise computation: log-likelihoods, training objectives
   and every gradient, in float64 (eval and training mode) and in float32 to its rounding
   (``check_two_phase``, ``check_two_phase_float32``);
3. one backward pass of the training objective reaches every parameter (``check_gradients``);
4. a checkpoint round trip gives the same model (``check_checkpoint_round_trip``);
5. batched beam search equals brute-force enumeration on a tiny case, a batch decodes as its examples
   do alone, and greedy equals beam 1 (``check_beam_equals_brute_force`` ...).

Marked ``device``: the models and batches live on ``--device`` (``pytest --device cuda -m device``
runs them on a GPU).
"""

from __future__ import annotations

import pytest
import torch

from models.registry import DECLARED
from tests.helpers import (
    SEARCH_SRCS,
    check_batched_beam_equals_one_at_a_time,
    check_beam_equals_brute_force,
    check_checkpoint_round_trip,
    check_distributions,
    check_gradients,
    check_greedy_equals_beam_one,
    check_two_phase,
    check_two_phase_float32,
    contract_batch,
    contract_cases,
    contract_model,
    gold_and_grads,
    search_batch,
    search_model,
)

pytestmark = pytest.mark.device

CASES = contract_cases()
IDS = [f"{name}-{i}" for name, i, _ in CASES]
MECHANISMS = sorted(DECLARED)


def reads_pointers(model) -> bool:
    return model.output.reads_pointers


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_steps_are_distributions_over_the_extended_vocabulary(name, i, variant, device):
    model = contract_model(name, variant, device)
    check_distributions(model, contract_batch(reads_pointers(model), device))


@pytest.mark.parametrize("objective", [False, True], ids=["log_likelihood", "objective"])
@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_two_phase_equals_stepwise(name, i, variant, objective, device):
    model = contract_model(name, variant, device)  # eval mode: deterministic (no dropout, no switch noise)
    check_two_phase(model, contract_batch(False, device), objective)
    if reads_pointers(model):  # with the pointer annotations too
        check_two_phase(model, contract_batch(True, device), objective)


def fixed_noise(x: torch.Tensor) -> torch.Tensor:
    """A stand-in for ``torch.randn_like``, the noise source of Pointer Softmax's noisy tanh (its
    xi ~ N(0, 1) in training mode, models/pointer_softmax.py): a fixed function of the input's value,
    without gradient, so a position gets the same xi in the two-phase pass (all B x T positions at once)
    and in the stepwise one, and positions with other values other xi. (B, ...) -> (B, ...)."""
    return torch.cos(7.0 * x.detach())


# The variants whose training mode draws noise (Pointer Softmax's noisy switch). Inside [-1, 1] the
# noisy tanh is the identity and xi has no effect: at the contract's sizes the switch's pre-activations
# leave it on the transformer decoder only (measured: a third of the first layer's), so the noisy
# tests below scale the switch's first layer until they leave it on every decoder.
NOISY = [c for c in CASES if c[2].get("switch") == "noisy_residual"]


def noisy_model(name: str, variant: dict, device, dtype=torch.float64):
    """The contract model in training mode with its switch's first layer scaled by 8: pre-activations
    outside [-1, 1], where the noisy tanh differs from tanh's identity part and xi takes effect."""
    model = contract_model(name, variant, device, dtype=dtype).train()
    with torch.no_grad():
        model.output.switch.layer1.weight.mul_(8.0)
    return model


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_two_phase_equals_stepwise_in_training_mode(name, i, variant, device, monkeypatch):
    """Training mode (the objective, train-time code paths) with dropout 0: still identical in
    float64, and within float32's rounding at the training precision. The noise a variant draws in
    training mode (Pointer Softmax's noisy switch) is fixed (:func:`fixed_noise`), so every variant is
    checked: two runs are then equal, and the two-phase pass must apply the noise as the steps do."""
    monkeypatch.setattr(torch, "randn_like", fixed_noise)
    model = contract_model(name, variant, device).train()
    batch = contract_batch(reads_pointers(model), device)
    first, _ = gold_and_grads(model, batch, None, stepwise=False)
    again, _ = gold_and_grads(model, batch, None, stepwise=False)
    assert torch.equal(first, again)
    check_two_phase(model, batch, None)
    check_two_phase_float32(contract_model(name, variant, device, dtype=torch.float32).train(), batch)


@pytest.mark.parametrize("name,i,variant", NOISY, ids=[f"{n}-{i}" for n, i, _ in NOISY])
def test_the_training_noise_is_drawn_and_reaches_the_output(name, i, variant, device, monkeypatch):
    """What makes the training-mode check meaningful for a noisy variant: its training mode really
    draws noise through ``torch.randn_like`` (two runs differ; with the noise fixed they are equal),
    another fixed noise gives another output (xi enters the objective), and with noise that reaches
    the output the two-phase pass still applies it as the steps do (float64, and float32's rounding)."""
    model = noisy_model(name, variant, device)
    batch = contract_batch(reads_pointers(model), device)
    drawn = [gold_and_grads(model, batch, None, stepwise=False)[0] for _ in range(2)]  # (B, T) each
    assert (drawn[0] - drawn[1]).abs().max().item() > 1e-6
    monkeypatch.setattr(torch, "randn_like", fixed_noise)
    fixed = gold_and_grads(model, batch, None, stepwise=False)[0]
    assert torch.equal(fixed, gold_and_grads(model, batch, None, stepwise=False)[0])
    check_two_phase(model, batch, None)
    check_two_phase_float32(noisy_model(name, variant, device, dtype=torch.float32), batch)
    monkeypatch.setattr(torch, "randn_like", lambda x: torch.zeros_like(x))
    zero = gold_and_grads(model, batch, None, stepwise=False)[0]
    assert (fixed - zero).abs().max().item() > 1e-3


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_gradients_reach_every_parameter(name, i, variant, device):
    model = contract_model(name, variant, device, dtype=torch.float32, scale=2.0)
    check_gradients(model, contract_batch(reads_pointers(model), device))


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_checkpoint_round_trip(name, i, variant, device, tmp_path):
    model = contract_model(name, variant, device, dtype=torch.float32)
    check_checkpoint_round_trip(model, name, contract_batch(reads_pointers(model), device), tmp_path / "model.pt")


@pytest.mark.parametrize("name", MECHANISMS)
def test_beam_search_equals_brute_force(name, device):
    check_beam_equals_brute_force(search_model(name, device), device)


@pytest.mark.parametrize("name", MECHANISMS)
def test_batched_beam_equals_one_at_a_time(name, device):
    check_batched_beam_equals_one_at_a_time(
        search_model(name, device, seed=1), search_batch(device), SEARCH_SRCS, lambda src: search_batch(device, [src])
    )


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_greedy_equals_beam_one(name, i, variant, device):
    model = contract_model(name, variant, device, dtype=torch.float32, seed=2, scale=3.0)
    check_greedy_equals_beam_one(model, contract_batch(False, device, targets=False))
