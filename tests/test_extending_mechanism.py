"""A new mechanism added exactly as docs/extending.md says: one module in models/ that declares
``MECHANISMS``; nothing else is edited. The toy mechanism is discovered, configured from a params-style
``model`` section, trains (two-phase teacher forcing equal to stepwise) and decodes with the shared
search over the extended vocabulary."""

from __future__ import annotations

import textwrap

import pytest
import torch

import models
from models import registry
from models.registry import model_config
from pipeline.decoding.search import beam_search
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import SPECIALS, Vocab

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


def test_a_new_mechanism_module_is_all_it_takes(toy_registered):
    assert registry.DISPLAY_NAMES["toy_pointer"] == "Toy pointer"
    assert {"copynet", "wean", "luong"} <= set(registry.MECHANISMS)  # the others are still there
    words = ["a", "b", "c"]
    vocab = Vocab(list(SPECIALS) + words, [0] * 4 + [1] * 3)
    cfg = model_config(
        {"emb": 6, "hidden": 5, "toy_pointer": {"copy_weight": 0.3}},
        "toy_pointer",
        src_vocab=len(vocab),
        tgt_vocab=len(vocab),
    )
    torch.manual_seed(0)
    model = registry.build_model("toy_pointer", cfg).double().eval()
    assert model.output.log_copy == pytest.approx(torch.tensor(0.3).log().item())
    batch = collate([["a", "zz", "b"], ["c", "a"]], [["zz", "b"], ["a"]], vocab, vocab)  # zz: an OOV to copy
    gold = model(batch)
    assert torch.allclose(gold, model(batch, stepwise=True), atol=1e-12)
    assert gold[0, 0] > -30  # the OOV target is reachable by copying
    state = model.encode(batch)
    log_probs, _ = model.step(state, batch.tgt_in[:, 0])
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, dtype=torch.float64))
    hyps = beam_search(model, batch, beam_size=3, max_len=4)
    assert len(hyps) == 2 and all(h for h in hyps)
