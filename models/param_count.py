"""Output-layer parameter counts, for WEAN's Table 5 (Ma et al. 2018, section 4.1) and every
mechanism of the project.

Two counts per model:

- ``output_layer_parameters``: every parameter ``model.output`` owns, i.e. of its parameters those
  not also used by the rest of the model. A word embedding the output layer shares with the decoder
  input (WEAN's keys e_i, section 2.4) is the decoder's and counts 0 new parameters here.
- ``word_generator_parameters``: Table 5's convention. The paper counts the output layer as the word
  generator proper (eq. 3's W for Seq2seq, eq. 5's W_a or W_q, W_e, v for WEAN) and leaves Luong's
  attentional layer q_t = tanh(W_c [s_t; c_t]) (eq. 4) among "the rest parameters", which "between
  Seq2seq and WEAN are the same". An output layer names such submodules in its
  ``attentional_layer`` attribute (models.wean); for every other output layer both counts agree.

Table 5's WEAN figure is the concat score's count ("two parameter matrices and one parameter vector
at most in Equation 5"); the paper's own choice, general, has E x E (65,536 at E = 256), dot 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from models.config import ModelConfig


def _outside_ids(model: nn.Module) -> set[int]:
    """ids of the parameters of every part of the model other than its output layer."""
    ids = {id(p) for p in model.parameters(recurse=False)}
    for child in model.children():
        if child is not model.output:
            ids |= {id(p) for p in child.parameters()}
    return ids


def _count(params, skip: set[int]) -> int:
    return sum(p.numel() for p in params if id(p) not in skip)  # parameters() yields each tensor once


def output_layer_parameters(model: nn.Module) -> int:
    """Parameters of ``model.output`` not shared with the rest of ``model`` (e.g. ``model.tgt_emb``)."""
    return _count(model.output.parameters(), _outside_ids(model))


def word_generator_parameters(model: nn.Module) -> int:
    """``output_layer_parameters`` minus the attentional layer the output layer declares (Table 5)."""
    skip = _outside_ids(model)
    for name in getattr(model.output, "attentional_layer", ()):
        skip |= {id(p) for p in getattr(model.output, name).parameters()}
    return _count(model.output.parameters(), skip)


def paper_table5() -> list[dict]:
    """WEAN Table 5 ("The number of the parameters in the output layer") with section 4.1's arithmetic.

    One row per (dataset, model): the figure as printed (``reported``), the exact count section 4.1
    gives for it (``params``) and its formula; sizes from 3.1.3 / 4.1 (PWKP, EW-SEW: vocabulary
    50,000, hidden = embedding = 256) and 3.2.3 / 4.1 (LCSTS: vocabulary 4,000, hidden = embedding
    = 512). ``mechanism`` and ``options`` name the builder of this project that reproduces the row
    (WEAN's figure is the concat score's, the "at most" case).
    """
    rows = []
    for dataset, vocab, dim, seq2seq, wean in (
        ("PWKP", 50_000, 256, ("12.80M", "50000 x 256", 12_800_000), ("0.13M", "256 x 256 x 2 + 256", 131_328)),
        ("EWSEW", 50_000, 256, ("12.80M", "50000 x 256", 12_800_000), ("0.13M", "256 x 256 x 2 + 256", 131_328)),
        ("LCSTS", 4_000, 512, ("2.05M", "4000 x 512", 2_048_000), ("0.52M", "512 x 512 x 2 + 512", 524_800)),
    ):
        common = {"dataset": dataset, "vocab": vocab, "hidden": dim, "emb": dim}
        for model, mechanism, options, (reported, formula, params) in (
            ("Seq2seq", "luong", {}, seq2seq),
            ("WEAN", "wean", {"score": "concat"}, wean),
        ):
            rows.append(
                {
                    **common,
                    "model": model,
                    "mechanism": mechanism,
                    "options": options,
                    "reported": reported,
                    "formula": formula,
                    "params": params,
                }
            )
    return rows


def output_layer_table(
    builders: dict[str, Callable[[ModelConfig], nn.Module]], sizes: dict, options: dict[str, dict] | None = None
) -> list[dict]:
    """Build every model at ``sizes`` (ModelConfig fields: src_vocab, tgt_vocab, emb, hidden, ...)
    and count its output layer. ``options`` maps a builder's name to its ``model.<name>`` options.

    Models are built on the meta device: no memory is allocated, so paper sizes (a 50k vocabulary)
    cost nothing. Returns one row per builder: the sizes, ``output_layer``,
    ``word_generator`` (Table 5's convention) and ``total`` (all of the model's parameters).
    """
    options = options or {}
    rows = []
    for name, build in builders.items():
        cfg = ModelConfig(**sizes, options=dict(options.get(name, {})))
        with torch.device("meta"):
            model = build(cfg)
        rows.append(
            {
                "mechanism": name,
                **sizes,
                "output_layer": output_layer_parameters(model),
                "word_generator": word_generator_parameters(model),
                "total": sum(p.numel() for p in model.parameters()),
            }
        )
    return rows
