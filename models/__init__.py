"""Mechanisms by name: every module of this package that declares ``MECHANISMS`` (a tuple of
``models.seq2seq.Mechanism``: name, display name, builder) is one plug-in; adding a mechanism is
adding such a module (docs/extending.md), nothing else to edit. ``MECHANISMS`` maps the params.yaml
names to builders, ``DISPLAY_NAMES`` to the names the comparison tables print (the papers')."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from models.config import ModelConfig
from models.seq2seq import Mechanism, Seq2Seq


def discover() -> list[Mechanism]:
    """Every ``Mechanism`` declared by a module of this package (modules in name order)."""
    found: list[Mechanism] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(getattr(module, "MECHANISMS", ()))
    names = [m.name for m in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RuntimeError(f"mechanisms declared twice: {duplicates}")
    return found


MECHANISMS: dict[str, Callable[[ModelConfig], Seq2Seq]] = {m.name: m.build for m in discover()}
DISPLAY_NAMES: dict[str, str] = {m.name: m.display for m in discover()}


def build_model(name: str, cfg: ModelConfig) -> Seq2Seq:
    try:
        builder = MECHANISMS[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; known: {sorted(MECHANISMS)}") from None
    return builder(cfg)
