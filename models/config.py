"""Typed model configuration shared by every mechanism.

params.yaml's ``model:`` slice holds the sizes every mechanism shares plus one sub-section per
mechanism (``model.pointer_softmax``, ``model.wean`` ...). ``models.registry.model_config`` keeps the
shared sizes and the sub-section of the mechanism being built, as ``options``, after checking every
sub-section against its mechanism's declared options class (an unknown key is an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class NoOptions:
    """The options of a mechanism that has none of its own (``model.<name>`` absent or empty)."""


def parse_options(cls: type[T], options: dict, mechanism: str) -> T:
    """A mechanism's typed options from its ``model.<mechanism>`` section: an unknown key is an error
    naming the section, a bad value the options class's own error."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"model.{mechanism}: unknown settings {unknown}; known: {sorted(known)}")
    return cls(**options)


@dataclass(frozen=True)
class ModelConfig:
    src_vocab: int  # encoder vocabulary size
    tgt_vocab: int  # decoder vocabulary size V (specials included)
    emb: int = 150  # word embedding size (CopyNet 5.1: 150)
    hidden: int = 300  # GRU size per encoder direction and of the decoder (CopyNet 5.1: 300)
    dropout: float = 0.0
    encoder: str = "bigru"  # bigru | transformer (any output layer; memory size stays 2 * hidden)
    transformer_layers: int = 2
    transformer_heads: int = 4
    options: dict = field(default_factory=dict)  # the mechanism's own settings (model.<mechanism>)
