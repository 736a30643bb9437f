"""Corpus readers and generators, one module per ``reader`` name of ``params.yaml``'s ``prepare``.

A reader is a module of this package with a ``Config`` (its settings) and ``write_splits`` (shards,
manifests, quarantine); a reader that accepts raw text also has ``source_tokenizer``
(:mod:`pipeline.data.corpora.raw_input`). Readers are found by module name, so adding a corpus is adding
a module (``docs/extending.md``). Private modules (``_name``) and the helpers in ``NOT_READERS``,
which readers share, are not readers.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

# Modules of this package that readers use, not readers: shared writing, opening and checking raw
# input, LDC SGML parsing, the raw-text dispatcher, and records of TSV/CSV/JSONL/Parquet/Arrow files.
NOT_READERS = frozenset({"common", "inputs", "keyset", "ldc_sgml", "raw_input", "tables"})


def reader_names() -> list[str]:
    """The reader module names of this package (every directory on its ``__path__``), sorted."""
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in NOT_READERS
    )


def reader_module(name: str) -> ModuleType:
    """The reader (or generator) module ``pipeline.data.corpora.<name>``: a ``Config`` and ``write_splits``."""
    known = reader_names()
    if name not in known:
        raise ValueError(f"unknown reader {name!r}; known: {known}")
    module = importlib.import_module(f"{__name__}.{name}")
    if not hasattr(module, "Config") or not hasattr(module, "write_splits"):
        raise ValueError(f"pipeline.data.corpora.{name} is not a reader (needs Config and write_splits)")
    return module


def resample_column(settings: dict) -> str | None:
    """The shard column whose values are a test set's natural groups, for the comparison's bootstrap:
    ``group_col`` of the corpus's settings (your own data), else the reader's declared ``RESAMPLE_BY``
    (CopyNet's rules), else None (examples are resampled)."""
    if settings.get("group_col") is not None:  # the reader writes that column's values as the shard column
        return reader_module(settings.get("reader", "parallel")).GROUP
    reader = settings.get("reader")
    return getattr(reader_module(reader), "RESAMPLE_BY", None) if reader in reader_names() else None
