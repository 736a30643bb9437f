"""A new mechanism added exactly as docs/extending.md says: one module in models/ that declares
``MECHANISMS``; nothing else is edited, no test is copied. The toy mechanism is discovered, its
``model.<name>`` section is checked against its declared options when params are read, and it meets
the contract every mechanism meets (tests/models/test_contract.py runs it over every discovered
mechanism and every declared variant; here the same checks run on the toy, registered for this test)."""

from __future__ import annotations

import textwrap

import pytest
import torch

import models
from models import registry
from models.registry import model_config
from tests import helpers as contract  # the contract every mechanism meets (tests/models/test_contract.py)

# Step 1 of docs/extending.md, "Adding a mechanism": the module a newcomer writes.
TOY_MODULE = textwrap.dedent('''
    """Toy pointer: half generate (softmax over V), half copy (the attention), fixed mixture."""
    import math
    from dataclasses import dataclass

    import torch
    from torch import nn

    from models.config import ModelConfig, parse_options
    from models.extended import NEG
    from models.seq2seq import Mechanism, OutputLayer, Scores, Seq2Seq, State


    @dataclass(frozen=True)
    class ToyOptions:
        copy_weight: float = 0.5  # params.yaml model.toy_pointer.copy_weight


    class ToyPointerOutput(OutputLayer):
        can_copy = True

        def __init__(self, cfg: ModelConfig, opts: ToyOptions):
            super().__init__()
            self.readout = nn.Linear(3 * cfg.hidden, cfg.tgt_vocab)
            self.log_copy, self.log_gen = math.log(opts.copy_weight), math.log(1 - opts.copy_weight)

        def score_all(self, s, context, view: State) -> Scores:
            logits = self.project(torch.cat([s, context], dim=-1), self.readout)  # (B, T, V)
            attn = view["attn"].clamp_min(1e-30).log().masked_fill(~view["src_mask"].unsqueeze(1), NEG)
            shift = logits.new_full(logits.shape[:-1] + (1,), 0.0)
            return Scores(torch.log_softmax(logits, -1), shift + self.log_gen, attn, shift + self.log_copy)


    def build_toy_pointer(cfg: ModelConfig) -> Seq2Seq:
        opts = parse_options(ToyOptions, cfg.options, "toy_pointer")
        return Seq2Seq(cfg, ToyPointerOutput(cfg, opts), attention=True)


    MECHANISMS = (
        Mechanism("toy_pointer", "Toy pointer", build_toy_pointer, options=ToyOptions, variants=({}, {"copy_weight": 0.3})),
    )
''')


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    (tmp_path / "toy_pointer.py").write_text(TOY_MODULE)
    monkeypatch.setattr(models, "__path__", [*models.__path__, str(tmp_path)])
    found = registry.discover()
    monkeypatch.setattr(registry, "DECLARED", {m.name: m for m in found})
    monkeypatch.setattr(registry, "MECHANISMS", {m.name: m.build for m in found})
    monkeypatch.setattr(registry, "DISPLAY_NAMES", {m.name: m.display for m in found})
    yield
    import sys

    sys.modules.pop("models.toy_pointer", None)


def test_a_new_mechanism_module_is_all_it_takes(toy_registered, tmp_path):
    assert registry.DISPLAY_NAMES["toy_pointer"] == "Toy pointer"
    assert {"copynet", "wean", "luong"} <= set(registry.MECHANISMS)  # the others are still there
    assert [(name, variant) for name, _, variant in contract.contract_cases() if name == "toy_pointer"] == [
        ("toy_pointer", {}),
        ("toy_pointer", {"copy_weight": 0.3}),
    ]
    cfg = model_config(
        {"emb": 6, "hidden": 5, "toy_pointer": {"copy_weight": 0.3}}, "toy_pointer", src_vocab=9, tgt_vocab=8
    )
    assert cfg.options == {"copy_weight": 0.3}
    with pytest.raises(ValueError, match=r"model\.toy_pointer: unknown settings \['copy_wieght'\]"):
        model_config({"toy_pointer": {"copy_wieght": 0.3}}, "copynet", src_vocab=9, tgt_vocab=8)
    model = contract.contract_model("toy_pointer", {"copy_weight": 0.3}, torch.device("cpu"))
    assert model.output.log_copy == pytest.approx(torch.tensor(0.3).log().item())


@pytest.mark.parametrize("variant", [{}, {"copy_weight": 0.3}])
def test_the_new_mechanism_meets_the_contract(toy_registered, tmp_path, variant):
    cpu = torch.device("cpu")
    contract.check_distributions(
        contract.contract_model("toy_pointer", variant, cpu), contract.contract_batch(False, cpu)
    )
    for objective in (False, True):
        contract.check_two_phase(
            contract.contract_model("toy_pointer", variant, cpu), contract.contract_batch(False, cpu), objective
        )
    contract.check_gradients(
        contract.contract_model("toy_pointer", variant, cpu, dtype=torch.float32, scale=2.0),
        contract.contract_batch(False, cpu),
    )
    model = contract.contract_model("toy_pointer", variant, cpu, dtype=torch.float32)
    contract.check_checkpoint_round_trip(
        model, "toy_pointer", contract.contract_batch(False, cpu), tmp_path / "model.pt"
    )
    contract.check_beam_equals_brute_force(contract.search_model("toy_pointer", cpu), cpu)
    contract.check_greedy_equals_beam_one(
        contract.contract_model("toy_pointer", variant, cpu, dtype=torch.float32, seed=2, scale=3.0),
        contract.contract_batch(False, cpu, targets=False),
    )
