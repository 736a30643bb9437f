"""Variants: one mechanism under other settings, run as a row of its own.

``params.yaml``'s ``variants`` section names them; a variant's name goes in the ``mechanisms`` list
like a mechanism's and from there everywhere a mechanism name goes (DVC stage names, checkpoint
and evaluation folders, MLflow runs and tags, the registry's ``mechanism`` tag, the comparison's
rows, ``predict --checkpoint``)::

    variants:
      copynet_transformer:
        mechanism: copynet                 # the base: a name models.registry builds
        display: CopyNet (Transformer decoder)   # the comparison's row label (default: base's + name)
        model: {decoder: transformer}      # the sections it overrides: model, train, evaluate

:func:`resolve` is the one place a row name becomes ``(base mechanism, overrides)``: the train job
builds the base under the merged settings (:func:`pipeline.config.tasks.effective_params` merges the
overrides), ``model.pt`` records both names (``mechanism``: the base, ``variant``: the row), so
loading a checkpoint needs no params. A name that is not a variant is its own base.

This package imports nothing of ``models``: the checks against the declared mechanisms take their
names as an argument (``known``; callers pass ``models.registry.MECHANISMS``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

VARIANT_SECTIONS = ("model", "train", "evaluate")  # what a variant may override (as a task's per-mechanism entry)
VARIANT_KEYS = frozenset({"mechanism", "display", *VARIANT_SECTIONS})


@dataclass(frozen=True)
class Variant:
    """A row of the comparison: ``name`` (params.yaml ``mechanisms`` entry) runs ``mechanism`` (the
    base that models.registry builds) with ``overrides`` (sections ``model``/``train``/``evaluate``)."""

    name: str
    mechanism: str
    display: str | None = None
    overrides: dict = field(default_factory=dict)

    @property
    def is_variant(self) -> bool:
        return self.name != self.mechanism


def variants_section(params: Mapping) -> dict:
    """``params['variants']`` (``{}`` when absent), checked for shape: a mapping of name -> mapping."""
    section = params.get("variants") or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"params.yaml: variants must be a mapping of name -> settings, got {section!r}")
    return dict(section)


def resolve(params: Mapping, name: str, known: Collection[str] | None = None) -> Variant:
    """The row ``name`` as ``Variant(name, base mechanism, display, overrides)``; a name that is not in
    ``params['variants']`` is its own base with no overrides. With ``known`` (the declared mechanism
    names), a name that is neither known nor a variant, a variant named like a mechanism and a
    variant whose base is not a mechanism are ``ValueError``s naming what is allowed."""
    section = variants_section(params)
    if known is not None:
        check_variants(params, known)
    if name not in section:
        if known is not None and name not in known:
            raise ValueError(
                f"unknown mechanism {name!r}: neither a mechanism ({', '.join(sorted(known))}) "
                f"nor a variant of params.yaml's variants ({', '.join(sorted(section)) or 'none'})"
            )
        return Variant(name, name)
    spec = _checked_spec(name, section[name])
    return Variant(name, spec["mechanism"], spec.get("display"), {k: spec[k] for k in VARIANT_SECTIONS if k in spec})


def _checked_spec(name: str, spec) -> dict:
    """One variant's settings, checked for shape (keys, a string base, mappings for the sections)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"params.yaml: variants.{name} must be a mapping with 'mechanism', got {spec!r}")
    unknown = sorted(set(spec) - VARIANT_KEYS)
    if unknown:
        raise ValueError(f"params.yaml: variants.{name} has unknown keys {unknown}; allowed: {sorted(VARIANT_KEYS)}")
    base = spec.get("mechanism")
    if not isinstance(base, str) or not base:
        raise ValueError(f"params.yaml: variants.{name} needs 'mechanism: <the base mechanism>', got {base!r}")
    for key in VARIANT_SECTIONS:
        if key in spec and not isinstance(spec[key], Mapping):
            raise ValueError(f"params.yaml: variants.{name}.{key} must be a mapping, got {spec[key]!r}")
    if "display" in spec and not isinstance(spec["display"], str):
        raise ValueError(f"params.yaml: variants.{name}.display must be a string, got {spec['display']!r}")
    return dict(spec)


def check_variants(params: Mapping, known: Collection[str]) -> None:
    """Every variant well formed, named unlike every mechanism, and based on a mechanism (not on
    another variant): ``ValueError`` naming the variant and the choices."""
    section = variants_section(params)
    for name, spec in section.items():
        base = _checked_spec(name, spec)["mechanism"]
        if name in known:
            raise ValueError(
                f"params.yaml: variant {name!r} has the name of a mechanism; give it its own name "
                f"(e.g. {name}_<what differs>) so its checkpoints, runs and rows stay apart from {name}'s"
            )
        if base not in known:
            what = "another variant (a variant's base must be a mechanism)" if base in section else "not a mechanism"
            raise ValueError(
                f"params.yaml: variants.{name}.mechanism {base!r} is {what}; mechanisms: {', '.join(sorted(known))}"
            )


def display_names(params: Mapping, base_display: Mapping[str, str]) -> dict[str, str]:
    """``{variant: its row label}``: its ``display``, else the base's display name and the variant's name."""
    out = {}
    for name in variants_section(params):
        v = resolve(params, name)
        out[name] = v.display or f"{base_display.get(v.mechanism, v.mechanism)} ({name})"
    return out
