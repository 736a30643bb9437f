"""The names of the declared mechanisms, read without loading torch: the settings check refuses a
row of ``mechanisms`` (or a variant's base) that no mechanism declares, before any stage runs,
and this package must stay torch-free (``models.registry`` imports every mechanism, with torch).

A mechanism declares itself in its module of the ``models`` package as
``MECHANISMS = (Mechanism("<name>", ...), ...)`` (``models.registry.discover``); this reads those
names from the source with ``ast``, the modules in the same order. tests/pipeline/config checks
that the names equal ``models.registry.MECHANISMS``'s."""

from __future__ import annotations

import ast
import pkgutil
from functools import cache
from pathlib import Path

import models


@cache
def declared_mechanisms() -> tuple[str, ...]:
    """The names every module of ``models`` declares in its ``MECHANISMS`` tuple, sorted."""
    names: list[str] = []
    for info in pkgutil.iter_modules(models.__path__):
        finder_path = getattr(info.module_finder, "path", None)
        if finder_path is None:
            continue  # not a folder of source files (a zip): nothing to read
        base = Path(finder_path) / info.name
        source = base / "__init__.py" if info.ispkg else base.with_suffix(".py")
        if source.is_file():
            names += _declared_in(source)
    return tuple(sorted(names))


def _declared_in(source: Path) -> list[str]:
    """The first argument (a string) of each ``Mechanism(...)`` in a module-level ``MECHANISMS = (...)``."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    names = []
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if not (
            isinstance(target, ast.Name) and target.id == "MECHANISMS" and isinstance(node.value, ast.Tuple | ast.List)
        ):
            continue
        for item in node.value.elts:
            if isinstance(item, ast.Call) and item.args and isinstance(item.args[0], ast.Constant):
                names.append(str(item.args[0].value))
    return names
