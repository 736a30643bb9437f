"""The copy heads on a pretrained encoder-decoder as Hugging Face models (docs/pretrained.md, "From your
own transformers code"): :class:`CopyHeadConfig` (``configuration``), :class:`CopyHeadForConditionalGeneration`
(``modeling``: ``from_pretrained``, ``generate()``, the ``Seq2SeqTrainer``; importing it registers
``copyseq_copy_head`` with ``AutoConfig`` and ``AutoModelForSeq2SeqLM``) and :class:`CopyHeadProcessor`
(``processing``: text -> ids with the source's pieces outside the vocabulary as extended ids, and back).
Like the rest of ``models``, it imports nothing of ``pipeline``.

The names load on first use (``from models.hf import CopyHeadForConditionalGeneration``): the mechanism
registry imports every module of ``models``, this package included, and ``transformers``' model
classes would add seconds to every process that builds a model without them."""

from __future__ import annotations

import importlib

_HOMES = {
    "HEADS": "configuration",
    "MODEL_TYPE": "configuration",
    "CopyHeadConfig": "configuration",
    "CopyHeadCache": "modeling",
    "CopyHeadForConditionalGeneration": "modeling",
    "CopyHeadProcessor": "processing",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
