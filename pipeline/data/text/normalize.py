"""Rush et al. (2015) token normalisation: lowercase, every digit ``#``, ``&`` as ``&amp;``.

Rush, Chopra & Weston (2015, section 7): the Gigaword pairs are lowercased and every digit is
replaced by ``#`` (``process_agiga.py``: ``re.sub(r'\\d', '#', ...)`` on ASCII text; ``pull.py``
lowercases). Their tokens come from the Annotated Gigaword *XML* read line by line without
unescaping, so an ampersand is ``&amp;`` in the released files (``cable &amp; wireless``,
``pg&amp;e``); :func:`rush_normalize` writes it the same way so text we tokenise ourselves matches
them. The escape is idempotent (an existing ``&amp;`` stays as it is). ``<`` and ``>`` are left
alone: they never occur in the news text, and ``<unk>`` must survive a second pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_DIGITS = str.maketrans("0123456789", "##########")
_BARE_AMP = re.compile(r"&(?!amp;)")


def rush_normalize(tokens: Iterable[str]) -> list[str]:
    """Lowercase each token, map ASCII digits to ``#`` and ``&`` to ``&amp;``."""
    out = []
    for token in tokens:
        token = token.lower().translate(_DIGITS)
        if "&" in token:
            token = _BARE_AMP.sub("&amp;", token)
        out.append(token)
    return out


def mask_digits(text: str) -> str:
    """Every ASCII digit of ``text`` replaced by ``#`` (``1,250.5 -> #,###.#``)."""
    return text.translate(_DIGITS)


def normalize_unk(
    tokens: list[str], aliases: frozenset[str] = frozenset({"UNK", "<unk>"}), unk: str = "<unk>"
) -> list[str]:
    """Map the unknown-word spellings of the Rush releases (``UNK`` in the test set, ``<unk>`` in
    train) to one token ``unk``; returns ``tokens`` itself when it holds none."""
    if not any(t in aliases for t in tokens):
        return tokens
    return [unk if t in aliases else t for t in tokens]
