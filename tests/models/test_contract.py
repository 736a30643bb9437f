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


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_two_phase_equals_stepwise_in_training_mode(name, i, variant, device):
    """Training mode (the objective, train-time code paths) with dropout 0: still identical in
    float64, and within float32's rounding at the training precision. A variant whose training mode
    draws noise (Pointer Softmax's noisy switch) is checked in eval mode only: two runs differ."""
    model = contract_model(name, variant, device).train()
    batch = contract_batch(reads_pointers(model), device)
    first, _ = gold_and_grads(model, batch, None, stepwise=False)
    again, _ = gold_and_grads(model, batch, None, stepwise=False)
    if not torch.equal(first, again):
        pytest.skip(f"{name} {variant}: training mode draws noise")
    check_two_phase(model, batch, None)
    check_two_phase_float32(contract_model(name, variant, device, dtype=torch.float32).train(), batch)


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
