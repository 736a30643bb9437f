"""Mechanisms by name: every module of the ``models`` package that declares ``MECHANISMS`` (a tuple of
``models.seq2seq.Mechanism``: name, display name, builder) is one plug-in; adding a mechanism is
adding such a module (docs/extending.md), nothing else to edit. ``MECHANISMS`` maps the params.yaml
names to builders, ``DISPLAY_NAMES`` to the names the comparison tables print (the papers')."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import fields

import models
from models.config import ModelConfig
from models.seq2seq import Mechanism, Seq2Seq


def discover() -> list[Mechanism]:
    """Every ``Mechanism`` declared by a module of this package (modules in name order)."""
    found: list[Mechanism] = []
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda m: m.name):
        if f"models.{info.name}" == __name__:
            continue  # this module: its MECHANISMS is the map built below
        module = importlib.import_module(f"models.{info.name}")
        found.extend(getattr(module, "MECHANISMS", ()))
    names = [m.name for m in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RuntimeError(f"mechanisms declared twice: {duplicates}")
    return found


DECLARED: dict[str, Mechanism] = {m.name: m for m in discover()}
MECHANISMS: dict[str, Callable[[ModelConfig], Seq2Seq]] = {m.name: m.build for m in DECLARED.values()}
DISPLAY_NAMES: dict[str, str] = {m.name: m.display for m in DECLARED.values()}


def mechanism(name: str) -> Mechanism:
    """The declaration of mechanism ``name``; ValueError naming the known ones."""
    try:
        return DECLARED[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; known: {sorted(DECLARED)}") from None


def build_model(name: str, cfg: ModelConfig) -> Seq2Seq:
    return mechanism(name).build(cfg)


def reads_source_words(name: str, cfg: ModelConfig) -> bool:
    """Whether mechanism ``name`` with ``cfg``'s options reads the source words of a batch (its options
    say so, e.g. Read-Again's sentence ends), so the batches must carry them."""
    return mechanism(name).reads_source_words(cfg.options)


def source_words(name: str, cfg: ModelConfig) -> tuple[str, ...]:
    """The words mechanism ``name`` with ``cfg``'s options looks for in a source (Read-Again's sentence
    ends): a training batch reads its words back from ids, so each must be in the source vocabulary."""
    return mechanism(name).source_words(cfg.options)


def runs_on_backbone(name: str) -> bool:
    """Whether mechanism ``name`` runs on a pretrained encoder-decoder (``model.backbone``): its options
    record the backbone's config (models/backbone.py), so its vocabulary is the backbone's tokenizer."""
    return "backbone_config" in mechanism(name).own_keys()


SHARED = frozenset(f.name for f in fields(ModelConfig)) - {"options"}  # sizes every mechanism shares


def model_config(section: dict, mechanism: str | None = None, **sizes) -> ModelConfig:
    """params.yaml's ``model`` section -> the ``ModelConfig`` of ``mechanism``: the shared keys of
    ``section`` plus ``section[mechanism]`` as options (a shared key there overrides the shared
    value for that mechanism only: e.g. WEAN's 512/512 beside CopyNet's 350/500 on LCSTS). A key that
    is neither shared nor a mechanism's section is an error, and so is a mechanism's section that its
    declared options class refuses (every section is checked, not only ``mechanism``'s)."""
    own = {k: v for k, v in section.items() if k in SHARED}
    rest = {k: v for k, v in section.items() if k not in SHARED}
    unknown = sorted(k for k in rest if k not in DECLARED)
    if unknown:
        raise ValueError(
            f"unknown model settings {unknown}; known: {sorted(SHARED)} "
            f"and one section per mechanism {sorted(DECLARED)}"
        )
    for name, sub in rest.items():
        DECLARED[name].parse_options(split_section(name, sub or {})[1])
    if not mechanism:
        return ModelConfig(**{**own, **sizes})
    lifted, options = split_section(mechanism, rest.get(mechanism) or {})
    cfg = ModelConfig(**{**own, **lifted, **sizes}, options=options)
    if cfg.backbone is not None and not runs_on_backbone(mechanism):
        raise ValueError(
            f"model.backbone is set ({cfg.backbone!r}) but {mechanism} does not run on a pretrained backbone "
            "(those that do: " + ", ".join(sorted(n for n in DECLARED if runs_on_backbone(n))) + "); "
            "set it in the backbone rows' variants only"
        )
    accepted = DECLARED[mechanism].decoders
    if cfg.decoder not in accepted:
        raise ValueError(
            f"model.decoder {cfg.decoder!r} is not available for {mechanism} (it accepts {', '.join(accepted)}); "
            f"drop {mechanism} from the mechanisms of this run or set model.decoder back"
        )
    return cfg


def split_section(name: str, section: dict) -> tuple[dict, dict]:
    """A ``model.<name>`` section (or a contract variant) -> (shared sizes it overrides, the mechanism's
    own options). A key the mechanism's options class declares is its own, even where a shared
    size has the same name (Read-Again's ``decoder``); the other shared keys are lifted out."""
    own_keys = mechanism(name).own_keys()
    shared = {k: v for k, v in section.items() if k in SHARED and k not in own_keys}
    return shared, {k: v for k, v in section.items() if k not in shared}
