"""Typed model configuration shared by every mechanism."""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.params import dataclass_from_dict


@dataclass(frozen=True)
class ModelConfig:
    src_vocab: int  # encoder vocabulary size
    tgt_vocab: int  # decoder vocabulary size V (specials included)
    emb: int = 150  # word embedding size (CopyNet 5.1: 150)
    hidden: int = 300  # GRU size per encoder direction and of the decoder (CopyNet 5.1: 300)
    dropout: float = 0.0

    @classmethod
    def from_dict(cls, d: dict, **sizes) -> "ModelConfig":
        return dataclass_from_dict(cls, d, **sizes)
