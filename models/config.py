"""Typed model configuration shared by every mechanism.

params.yaml's ``model:`` slice holds the sizes every mechanism shares plus one sub-section per
mechanism (``model.pointer_softmax``, ``model.wean`` ...). ``ModelConfig.from_dict`` keeps the
shared sizes and the sub-section of the mechanism being built, as ``options``; each mechanism
turns its options into its own typed dataclass (an unknown key is an error there).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

T = TypeVar("T")


def dataclass_from_dict(cls: type[T], d: dict, **extra) -> T:
    """Build a config dataclass from a params slice; an unknown key is an error, not ignored."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} settings {unknown}; known: {sorted(known)}")
    return cls(**{**d, **extra})


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

    @classmethod
    def from_dict(cls, d: dict, mechanism: str | None = None, **sizes) -> ModelConfig:
        """Shared keys of ``d`` plus ``d[mechanism]`` as options (its shared keys override ``d``'s);
        other mechanisms' sections are skipped."""
        from models import MECHANISMS  # the known sub-section names

        shared = {f.name for f in fields(cls)} - {"options"}
        own = {k: v for k, v in d.items() if k in shared}
        rest = {k: v for k, v in d.items() if k not in shared}
        unknown = sorted(k for k in rest if k not in MECHANISMS)
        if unknown:
            raise ValueError(
                f"unknown model settings {unknown}; known: {sorted(shared)} "
                f"and one section per mechanism {sorted(MECHANISMS)}"
            )
        options = dict(rest.get(mechanism) or {}) if mechanism else {}
        # A shared key inside the mechanism's section (emb, hidden, dropout, ...) overrides the
        # shared value for that mechanism only: e.g. WEAN's 512/512 beside CopyNet's 350/500 on LCSTS.
        lifted = {k: options.pop(k) for k in list(options) if k in shared}
        return dataclass_from_dict(cls, {**own, **lifted}, options=options, **sizes)
