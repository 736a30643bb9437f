"""Pointer supervision for the Pointer Softmax (Gulcehre et al. 2016, "Pointing the Unknown Words").

The model (section 4) emits, at every target step t, a switch z_t and either a shortlist word w_t
or a source location l_t. During training both are observed ("d_t is observed", section 4.1), so
the data must say, for every target token, whether it is produced by pointing and where to. This
module computes that annotation for the two Gigaword datasets of section 5.2. It is pure: no I/O,
no tokenisation; callers pass token lists that are already normalised.

Conventions of the returned :class:`PointerAnnotation` (one entry per target token):

* ``tgt_pointer[t]``: the source position (0-based index into ``src``) the target token points
  to, or ``-1`` when it does not point;
* ``tgt_switch[t]``: ``True`` where the token is produced by pointing (the location softmax),
  ``False`` where it comes from the shortlist. NB the paper's z_t is the opposite (z_t = 1 means
  shortlist, section 4); ``tgt_switch == (tgt_pointer >= 0)`` always holds here.

UNK pointers (section 5.2, "UNK-pointers data")
    A word is replaced by UNK when it occurs fewer than 5 times in the training *source* data
    (for source tokens) or the training *target* data (for target tokens): "whenever a word occurs
    less than 5 times in either source or target data separately" -- two vocabularies, passed in
    as ``src_vocab`` / ``tgt_vocab``. Pointers are created "from each UNK token in the target data
    to the position in the corresponding source document where the same word occurs in the
    source, as seen in the data before UNK's were created": only target UNKs point, and they
    match on the *original* words. "It is possible that the source can have an UNK in the
    matching position, but we still created a pointer": the source side's own UNK replacement is
    irrelevant to the match. A target word in the shortlist never points, even when it also
    occurs in the source (the paper's pointers are "from each UNK token"); a target UNK whose
    word is not in the source gets no pointer and is generated as UNK by the shortlist ("if the
    word ... is neither in the shortlist nor in the context sequence, the switching network
    selects the shortlist softmax, and then the shortlist softmax predicts UNK", section 4).
    A token that already *is* an unknown-word marker in the input (``<unk>`` / ``UNK`` in the
    Rush-format files, whose original word is lost) never points: matching it against a source
    UNK would point at an arbitrary, different word.

Entity pointers (section 5.2, "entity-pointers data")
    Entities are anonymised "by replacing them with an integer-id that always starts from 1 for
    each document and increments from left to right. Entities that occur more than once in a
    single document share the same id." A document is one (source, target) pair, numbered source
    first, then target. "We create the anonymization at token-level, so as to allow partial
    entity matches between the source and target for multi-token entities": every *token* of an
    entity mention gets its own id, keyed by the token string, so the headline's ``obama`` matches
    the ``obama`` of the source's ``barack obama``. Pointers are created "only for exact matches
    of the anonymized entities": a target entity token points iff the same id occurs in the
    source. Only tokens the tagger marked as entities are anonymised; an untagged occurrence of
    the same string stays a word.
    Token format: ``@entity<id>`` (``@entity1``, ``@entity2``, ...), one shared placeholder per id
    across documents (section 5.2: "we model each entity-id in the source by a distinct
    placeholder, each of which is shared across all documents"). A PTB tokeniser splits ``@`` off
    (it is in its punctuation class), so real text cannot produce these tokens; an input that
    does anyway raises :class:`PlaceholderCollision` (the reader quarantines the record).

Conflicts: "If there are multiple matches in the source ... we resolve the conflict in favor of
the first occurrence of the matching word in the source document" -- first position wins.

Rates: the paper reports 2.7 (train) / 9.1 (valid) UNK pointers and 161 (train) / 139 (valid)
entity pointers per 100 examples; :class:`PointerCounter` measures the same figure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

UNK = "<unk>"
# Unknown-word markers that may already be in the input (Rush-format train uses ``<unk>``,
# the Rush test set ``UNK``): their original words are lost, so they never point.
UNK_MARKERS: frozenset[str] = frozenset({"<unk>", "UNK"})

ENTITY_PREFIX = "@entity"
_PLACEHOLDER_RE = re.compile(re.escape(ENTITY_PREFIX) + r"[0-9]+")

# Paper's figures (section 5.2), pointers per 100 examples, by dataset and split.
PAPER_POINTERS_PER_100: dict[str, dict[str, float]] = {
    "unk": {"train": 2.7, "valid": 9.1},
    "entity": {"train": 161.0, "valid": 139.0},
}


class PlaceholderCollision(ValueError):
    """An input token already looks like an entity placeholder (``@entity<n>``)."""


@dataclass(frozen=True)
class PointerAnnotation:
    """Annotated pair: model-side tokens plus one pointer and one switch per target token."""

    src: list[str]
    tgt: list[str]
    tgt_pointer: list[int]
    tgt_switch: list[bool]

    @property
    def n_pointers(self) -> int:
        return sum(self.tgt_switch)


def first_positions(tokens: Sequence[str]) -> dict[str, int]:
    """token -> index of its first occurrence (the paper's conflict rule: first match wins)."""
    first: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        first.setdefault(tok, i)
    return first


def unk_pointers(
    src: Sequence[str],
    tgt: Sequence[str],
    src_vocab: Collection[str],
    tgt_vocab: Collection[str],
    unk: str = UNK,
    unk_markers: Collection[str] = UNK_MARKERS,
) -> PointerAnnotation:
    """UNK-replace ``src``/``tgt`` (original tokens) and point each target UNK at its word's first
    source occurrence (section 5.2, UNK-pointers data; rules in the module docstring).

    ``src_vocab`` / ``tgt_vocab``: the kept (shortlist) words of each side, e.g. the words with at
    least 5 training occurrences on that side. ``unk_markers``: input tokens that are already
    unknown-word markers (never point; written as ``unk``).
    """
    first = first_positions(src)
    out_src = [tok if tok in src_vocab and tok not in unk_markers else unk for tok in src]
    out_tgt: list[str] = []
    pointer: list[int] = []
    for tok in tgt:
        if tok in tgt_vocab and tok not in unk_markers:
            out_tgt.append(tok)
            pointer.append(-1)
            continue
        out_tgt.append(unk)
        pointer.append(-1 if tok in unk_markers else first.get(tok, -1))
    return PointerAnnotation(out_src, out_tgt, pointer, [p >= 0 for p in pointer])


def entity_placeholder(entity_id: int) -> str:
    """The anonymised token for per-document entity id ``entity_id`` (1-based)."""
    if entity_id < 1:
        raise ValueError(f"entity ids start at 1, got {entity_id}")
    return f"{ENTITY_PREFIX}{entity_id}"


def is_placeholder(token: str) -> bool:
    return _PLACEHOLDER_RE.fullmatch(token) is not None


def entity_pointers(
    src: Sequence[str],
    src_entity: Sequence[bool],
    tgt: Sequence[str],
    tgt_entity: Sequence[bool],
) -> PointerAnnotation:
    """Anonymise entity tokens (ids per pair, source then target, left to right, shared by equal
    token strings) and point target entity tokens at the first source token with the same id
    (section 5.2, entity-pointers data; rules in the module docstring).

    ``src_entity[i]`` / ``tgt_entity[t]``: whether that token is part of a named-entity mention.
    """
    _check_mask(src, src_entity, "source")
    _check_mask(tgt, tgt_entity, "target")
    ids: dict[str, int] = {}

    def anonymise(tokens: Sequence[str], mask: Sequence[bool]) -> list[str]:
        out = []
        for tok, is_entity in zip(tokens, mask):
            if is_placeholder(tok):
                raise PlaceholderCollision(f"input token {tok!r} collides with the entity placeholders")
            if is_entity:
                tok = entity_placeholder(ids.setdefault(tok, len(ids) + 1))
            out.append(tok)
        return out

    out_src = anonymise(src, src_entity)
    out_tgt = anonymise(tgt, tgt_entity)
    # Only placeholders point; a plain word equal to a placeholder cannot exist (checked above).
    first = {tok: i for tok, i in first_positions(out_src).items() if is_placeholder(tok)}
    pointer = [first.get(tok, -1) for tok in out_tgt]
    return PointerAnnotation(out_src, out_tgt, pointer, [p >= 0 for p in pointer])


def _check_mask(tokens: Sequence[str], mask: Sequence[bool], side: str) -> None:
    if len(tokens) != len(mask):
        raise ValueError(f"{side}: {len(tokens)} tokens but {len(mask)} entity flags")


@dataclass
class PointerCounter:
    """Running pointer statistics of one split: examples, target tokens, pointers."""

    examples: int = 0
    tgt_tokens: int = 0
    pointers: int = 0
    examples_with_pointer: int = 0
    tgt_unk: int = 0

    def add(self, ann: PointerAnnotation, unk: str = UNK) -> None:
        n = ann.n_pointers
        self.examples += 1
        self.tgt_tokens += len(ann.tgt)
        self.pointers += n
        self.examples_with_pointer += n > 0
        self.tgt_unk += sum(tok == unk for tok in ann.tgt)

    @property
    def per_100(self) -> float:
        """Pointers per 100 examples (the paper's figure in section 5.2)."""
        return pointers_per_100(self.pointers, self.examples)

    def as_stats(self) -> dict[str, int | float]:
        """Manifest ``stats`` entries (counts plus the rate rounded to 2 decimals)."""
        return {
            "examples": self.examples,
            "tgt_tokens": self.tgt_tokens,
            "pointers": self.pointers,
            "examples_with_pointer": self.examples_with_pointer,
            "tgt_unk": self.tgt_unk,
            "pointers_per_100_examples": round(self.per_100, 2),
        }


def pointers_per_100(pointers: int, examples: int) -> float:
    """``100 * pointers / examples`` (0.0 for no examples)."""
    return 100.0 * pointers / examples if examples else 0.0
