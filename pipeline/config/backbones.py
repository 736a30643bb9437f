"""Which pretrained backbone a row runs on (``model.backbone``, docs/pretrained.md), and where the
vocab stage writes that backbone's tokenizer vocabulary: ``data/vocab/<task>/backbones/<name>/``.
Plain data only (no torch, no transformers): the vocab, train and evaluate stages and serving ask here."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path


def row_backbone(model_section: Mapping | None, base: str) -> str | None:
    """The backbone of a row: ``model.backbone``, or the same key in its base mechanism's own section
    (``model.<base>.backbone``, which overrides it, as every shared key there); None for a word-vocabulary row."""
    model_section = model_section or {}
    own = model_section.get(base)
    if isinstance(own, Mapping) and own.get("backbone") is not None:
        return str(own["backbone"])
    value = model_section.get("backbone")
    return None if value is None else str(value)


def backbone_slug(name: str) -> str:
    """A folder name for a backbone name or path: its last two path parts made safe, plus 8 hex
    digits of its sha256 (two paths that end alike stay apart)."""
    tail = "_".join(Path(name.rstrip("/")).parts[-2:]) or "backbone"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", tail).strip("._") or "backbone"
    return f"{safe}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"


def backbone_vocab_dir(vocab_dir: Path, name: str) -> Path:
    """``<task vocab dir>/backbones/<slug>``: the tokenizer, its record and the splits it encoded."""
    return Path(vocab_dir) / "backbones" / backbone_slug(name)


def row_vocab_dir(vocab_dir: Path, model_section: Mapping | None, base: str) -> Path:
    """The vocabulary directory a row trains and decodes with: its backbone's, or the task's own."""
    backbone = row_backbone(model_section, base)
    return Path(vocab_dir) if backbone is None else backbone_vocab_dir(vocab_dir, backbone)
