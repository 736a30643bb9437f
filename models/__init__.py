"""Mechanisms by name: the one map from a params.yaml name to a model builder."""
from __future__ import annotations

from typing import Callable

from models.baselines import build_encdec, build_rnnsearch
from models.config import ModelConfig
from models.copynet import build_copynet
from models.pointer_generator import build_pointer_generator
from models.pointer_softmax import build_pointer_softmax
from models.read_again import build_read_again
from models.seq2seq import Seq2Seq
from models.wean import build_luong, build_wean

MECHANISMS: dict[str, Callable[[ModelConfig], Seq2Seq]] = {
    "encdec": build_encdec,
    "rnnsearch": build_rnnsearch,
    "copynet": build_copynet,
    "pointer_softmax": build_pointer_softmax,
    "read_again": build_read_again,
    "luong": build_luong,
    "wean": build_wean,
    "pointer_generator": build_pointer_generator,
}

# How the comparison tables name each mechanism (the papers' names).
DISPLAY_NAMES = {
    "encdec": "Enc-Dec",
    "rnnsearch": "RNNSearch",
    "copynet": "CopyNet",
    "pointer_softmax": "Pointer Softmax",
    "read_again": "Read-Again + copy",
    "luong": "Seq2seq (Luong)",
    "wean": "WEAN",
    "pointer_generator": "Pointer-generator + coverage",
}


def build_model(name: str, cfg: ModelConfig) -> Seq2Seq:
    try:
        builder = MECHANISMS[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; known: {sorted(MECHANISMS)}") from None
    return builder(cfg)
