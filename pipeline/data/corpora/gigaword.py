"""Gigaword headline generation (Rush, Chopra & Weston 2015), from their files or from raw SGML.

The task (Rush et al. 2015, section 7; used by Read-Again, Zeng et al. 2016 section 4, and Pointer
Softmax, Gulcehre et al. 2016 section 5.2): generate a news article's headline from its first
sentence. Two input modes, chosen by ``format``:

``format: rush`` -- the preprocessed, line-aligned release (``sumdata``): ``train.article.txt`` /
``train.title.txt``, ``valid.article.filter.txt`` / ``valid.title.filter.txt``, and the test set
``input.txt`` / ``task1_ref0.txt``. Text is already PTB-tokenised, lowercased, digits ``#``, rare
words unknown: train writes ``<unk>``, the test set ``UNK``; both become ``<unk>``. Each split is a
``<split>_src_file`` / ``<split>_tgt_file`` pair (leave a split out by leaving both unset).

``format: sgml`` -- raw LDC Gigaword (``<DOC id=... type="story">``, ``<HEADLINE>``, ``<TEXT><P>``;
gzipped ``.gz`` too) or TREC/DUC newswire (``<DOC><DOCNO>``, ``<HEAD>``/``<HL>``/``<HEADLINE>``,
``<TEXT>`` with or without ``<P>``, SJMN's ``<LEADPARA>``), parsed by :mod:`pipeline.data.corpora.ldc_sgml`,
turned into (first sentence, headline) pairs by the Rush pipeline (``facebookarchive/NAMAS``:
``process_agiga.py``, ``filter.py``, ``make_dict.py``, ``pull.py``), re-implemented here:

1. the lead: the first paragraph's text up to its first sentence-final period
   (:func:`first_sentence`; ``process_agiga.py`` keeps the first ``<P>``'s tokens up to the first
   ``.`` token); a TREC dateline opening it (``WASHINGTON (AP) --``) is removed
   (:func:`strip_dateline`, after ``make_DUC.py``; counted as ``dateline_stripped``);
2. headline and lead: PTB tokens (:func:`pipeline.data.text.ptb.tokenize`), lowercased, digits ``#``
   (:func:`pipeline.data.text.normalize.rush_normalize`);
3. ``filter.py``'s rules, on the splits in ``filter_splits`` (Rush filtered train and valid, not
   test), each a quarantine reason and a ``filtered_<reason>`` stat, first failing rule wins:
   ``no_period`` (the lead has no ``.`` token), ``bad_headline_word`` (the lowercased headline
   string *contains* one of ``BAD_TITLE_WORDS``: a substring test as in ``filter.py``, so ``ap`` also
   rejects ``japan`` -- the released data agrees: none of the 1,000 train titles nor of the test
   references contains ``ap``), ``src_length`` (lead not within ``src_min_tokens..src_max_tokens``,
   i.e. ``10 < n < 100``), ``tgt_length`` (headline not within ``tgt_min_tokens..tgt_max_tokens``,
   ``3 < n < 50``), ``no_overlap`` (no word longer than 3 characters shared by headline and lead);
4. the headline's punctuation tokens are dropped (``pull.py``'s ``trg_lc`` list ``TITLE_PUNCT``;
   its ``-llb-`` typo is read as ``-lrb-``);
5. rare words -> ``<unk>``: a word seen fewer than ``unk_min_count`` times (Rush: 5) in the kept
   *train* leads (source side) or headlines (target side) is ``<unk>`` in every split
   (``unk_min_count <= 1`` keeps every word). Counted before ``write_corpus`` drops duplicate
   pairs, as Rush (who dropped none) counted.

Documents are read once: pass 1 parses, tokenises and filters them (through ``map_chunks``),
counts the train words and spills the pairs of each split to a private temporary file; pass 2
reads the spill back, replaces rare words and writes the shards. Memory holds one chunk and the
word counts.

Structural record rules (every split, before the filters): ``nul_byte`` / ``line_too_long`` /
``token_too_long`` (a line of the document holds a NUL character, more than ``max_line_chars``
characters, or a token over ``max_token_chars``: quarantined at that line, see
:class:`pipeline.data.corpora.inputs.TextLimits`), ``non_story`` (a Gigaword ``type`` not
in ``story_types``; TREC documents have no type and count as stories), ``no_doc_id``,
``no_headline`` (none, or nothing left after tokenising), ``no_text``, ``src_too_long`` (more than
``max_tokens`` lead tokens: absurd input), ``empty_headline`` (nothing left once ``TITLE_PUNCT`` is
dropped), ``invalid_utf8`` (a document whose bytes do not decode: set ``encoding`` for Latin-1
files). Malformed files raise ``CorpusFormatError`` at ``file:line`` (:mod:`pipeline.data.corpora.ldc_sgml`): an unclosed or stray
``<DOC> <DOCNO> <HEADLINE> <HEAD> <HL> <TEXT> <P>``, text outside ``<DOC>``, a document over 16 MiB,
a file without any ``<DOC>``.

Splits (sgml): a document goes to test / valid / train by a hash of its id (BLAKE2b-64 of the
UTF-8 id read as a fraction of 2**64: below ``test_fraction`` test, below ``test_fraction +
valid_fraction`` valid, else train), so the split of a document never depends on the other inputs
or on their order. Rush et al. split by month files instead (their ``*.splits`` lists); to do the
same, give the test files in ``test_sgml_files`` (and set ``test_fraction: 0``).

Rush files, bad input: different line counts of a pair -> ``CorpusFormatError`` naming both files
(checked before anything is written); bytes that are not UTF-8 -> ``invalid_utf8``; a NUL
character -> ``nul_byte``; a line over ``max_line_chars`` characters -> ``line_too_long``; a token
over ``max_token_chars`` characters -> ``token_too_long``; an empty line -> ``empty_src`` /
``empty_tgt``; over ``max_tokens`` tokens -> ``src_too_long`` / ``tgt_too_long`` (first failing
rule wins, in this order). Files may be gzipped (``.gz`` or gzip data, decompressed on the fly; a
truncated or corrupt stream is a ``CorpusFormatError`` naming the file); row ids name the file
without ``.gz``.
They are read in this process, not through ``map_chunks`` (see ``_write_rush``: a worker would
cost more in pickling than the split it saves).

In both modes ``write_corpus`` then removes duplicate train pairs (``duplicate_pair``) and train
pairs whose source is an evaluation source (``src_in_valid`` / ``src_in_test``). A split left
without rows (an empty file, every record quarantined) is an ``EmptySplitError`` naming its
input files, and nothing is written -- except, in ``format: sgml``, the hash-drawn valid / test
splits, which may come out empty on a small input (the test split of ``test_sgml_files`` may not).

Rows: ``id`` = ``<file name>:<line>`` (rush) or the document id (sgml); ``refs = [tgt]``. Stats per
split, over the rows handed to ``write_corpus`` (before its removals): ``src_tokens``,
``tgt_tokens``, ``src_unk``, ``tgt_unk``; sgml also ``docs`` (documents read), ``dateline_stripped``,
``filtered_<rule>`` (on ``filter_splits``) and, on train, ``src_vocab`` / ``tgt_vocab`` (words kept).
"""

from __future__ import annotations

import codecs
import functools
import gc
import glob
import hashlib
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import count
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import (
    CorpusFormatError,
    Quarantined,
    SplitStats,
    read_spill,
    spill_by_split,
    write_corpus,
)
from pipeline.data.corpora.inputs import (
    MAX_LINE_CHARS,
    MAX_TOKEN_CHARS,
    TextLimits,
    count_lines,
    open_input,
    row_name,
)
from pipeline.data.corpora.ldc_sgml import Doc, DocBlock, check_block, iter_doc_blocks, parse_doc
from pipeline.data.text.normalize import normalize_unk, rush_normalize
from pipeline.data.text.ptb import first_sentence_end, tokenize
from pipeline.data.text.unk import keep_vocab, unk_replace
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema, scratch_parent

SPLIT_NAMES = ("train", "valid", "test")
FORMATS = ("rush", "sgml")
UNK = "<unk>"
SCHEMA: pa.Schema = make_schema()

# filter.py: headlines containing any of these strings are dropped (substring test on the
# lowercased, space-joined tokens, digits as '#').
BAD_TITLE_WORDS: tuple[str, ...] = (
    "update#",
    "update",
    "recasts",
    "undated",
    "grafs",
    "corrects",
    "retransmitting",
    "updates",
    "dateline",
    "writethru",
    "recaps",
    "inserts",
    "incorporates",
    "adv##",
    "ld-writethru",
    "djlfx",
    "edits",
    "byline",
    "repetition",
    "background",
    "thruout",
    "quotes",
    "attention",
    "ny###",
    "overline",
    "embargoed",
    "ap",
    "gmt",
    "adds",
    "embargo",
    "urgent",
    "?",
    " i ",
    " : ",
    " - ",
    " by ",
    "-lrb-",
    "-rrb-",
)
FILTER_RULES = ("no_period", "bad_headline_word", "src_length", "tgt_length", "no_overlap")  # rush_filter's order
# pull.py (trg_lc): tokens removed from every headline.
TITLE_PUNCT = frozenset(['"', "'", "''", "!", "=", "-", "--", ",", "?", ".", "``", "`", "-rrb-", "-lrb-", "\\/"])


# --------------------------------------------------------------------------- #
# Config
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Config:
    """Input mode and files; the Rush et al. rules (defaults are theirs) for ``format: sgml``."""

    format: str = "rush"  # rush: the preprocessed line-aligned release; sgml: raw SGML documents
    # format: rush -- a src/tgt file pair per split (both unset: no such split)
    train_src_file: str | None = None  # train.article.txt
    train_tgt_file: str | None = None  # train.title.txt
    valid_src_file: str | None = None  # valid.article.filter.txt
    valid_tgt_file: str | None = None  # valid.title.filter.txt
    test_src_file: str | None = None  # input.txt
    test_tgt_file: str | None = None  # task1_ref0.txt
    # format: sgml -- files, directories (every file below) or glob patterns (** recursive)
    sgml_files: tuple[str, ...] = ()
    test_sgml_files: tuple[str, ...] = ()  # given: these are the test split (test_fraction 0)
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    story_types: tuple[str, ...] = ("story",)
    filter_splits: tuple[str, ...] = ("train", "valid")
    src_min_tokens: int = 11  # filter.py: 10 < len(article) < 100
    src_max_tokens: int = 99
    tgt_min_tokens: int = 4  # filter.py: 3 < len(title) < 50
    tgt_max_tokens: int = 49
    min_overlap_chars: int = 4  # filter.py: a shared word with len(w) > 3
    unk_min_count: int = 5  # construct_data.sh: UNK=5
    encoding: str = "utf-8"
    # both
    max_tokens: int = 400  # longer lines / leads are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer line (rush) / document line (sgml): line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    chunk_size: int = 5000  # lines (rush) or documents (sgml, per map_chunks task) per chunk

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        for name in ("sgml_files", "test_sgml_files", "story_types", "filter_splits"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.format not in FORMATS:
            raise ValueError(f"gigaword format must be one of {FORMATS}, got {self.format!r}")
        rush_given = [f"{s}_{r}_file" for s in SPLIT_NAMES for r in ("src", "tgt") if getattr(self, f"{s}_{r}_file")]
        if self.format == "rush":
            if self.sgml_files or self.test_sgml_files:
                raise ValueError("gigaword format rush reads *_src_file/*_tgt_file, not sgml_files")
            for split in SPLIT_NAMES:
                pair = (getattr(self, f"{split}_src_file"), getattr(self, f"{split}_tgt_file"))
                if (pair[0] is None) != (pair[1] is None):
                    raise ValueError(f"gigaword: set both {split}_src_file and {split}_tgt_file, or neither")
            if not rush_given:
                raise ValueError("gigaword format rush needs at least one split's src/tgt files")
        else:
            if rush_given:
                raise ValueError(f"gigaword format sgml reads sgml_files, not {rush_given}")
            if not self.sgml_files:
                raise ValueError("gigaword format sgml needs sgml_files")
            if self.test_sgml_files and self.test_fraction:
                raise ValueError("gigaword: with test_sgml_files the test split is those files; set test_fraction: 0")
        if not (0 <= self.valid_fraction and 0 <= self.test_fraction and self.valid_fraction + self.test_fraction < 1):
            raise ValueError("gigaword: need 0 <= valid_fraction, test_fraction and their sum < 1")
        bad = [s for s in self.filter_splits if s not in SPLIT_NAMES]
        if bad:
            raise ValueError(f"gigaword filter_splits must be among {SPLIT_NAMES}, got {bad}")
        if not (1 <= self.src_min_tokens <= self.src_max_tokens and 1 <= self.tgt_min_tokens <= self.tgt_max_tokens):
            raise ValueError("gigaword: need 1 <= *_min_tokens <= *_max_tokens")
        if min(self.max_tokens, self.chunk_size) < 1:
            raise ValueError("gigaword: max_tokens and chunk_size must be >= 1")
        TextLimits.of(self)  # max_line_chars, max_token_chars >= 1


# --------------------------------------------------------------------------- #
# Lead sentence, headline, filters (Rush et al.)
# --------------------------------------------------------------------------- #


def split_lead(paragraphs: Sequence[str]) -> tuple[str, list[str]]:
    """The first sentence of the first non-empty paragraph, and the text after it (the rest of
    that paragraph, then the following paragraphs). A paragraph without a sentence-final period
    is one sentence (Rush keeps it, and ``filter.py`` then drops it for lacking a ``.``)."""
    for i, para in enumerate(paragraphs):
        if not para.strip():
            continue
        end = first_sentence_end(para)
        if end is None:
            return para.strip(), list(paragraphs[i + 1 :])
        rest = para[end:].strip()
        return para[:end].strip(), ([rest] if rest else []) + list(paragraphs[i + 1 :])
    return "", []


def first_sentence(paragraphs: Sequence[str]) -> str:
    """The lead sentence: the first paragraph's text up to its first sentence-final period.

    Method (``pipeline.data.text.ptb.first_sentence_end``): a period followed by space ends a
    sentence unless it belongs to an abbreviation (``Mr.``, ``Sept.``, initials), or to an
    ambiguous one (``Corp.``, ``U.S.``) not followed by a sentence opener (``The``, ``He`` ...), or
    the next word starts lowercase. ``?`` and ``!`` do not end the lead, as in ``process_agiga.py``,
    which cuts the first paragraph at its first ``.`` token.
    """
    return split_lead(paragraphs)[0]


_DATELINE = re.compile(
    r"""^\s*
    [A-Z][A-Z.'&-]+(?:\s+[A-Z][A-Z.'&-]*)*                 # CITY, in capitals
    (?:\s*,\s*[A-Z][\w.'-]*(?:\s+[A-Z0-9][\w.'-]*){0,3})?  # , Region or date
    (?: \s*\([A-Z][A-Za-z]{1,11}\)\s*(?:(?:--|_|-|:)\s+)?  # (AP) and a separator, or
      | \s+(?:--|_)\s+ )                                   # just a separator: WASHINGTON _
    """,
    re.VERBOSE,
)


def strip_dateline(sentence: str) -> tuple[str, bool]:
    """Remove a wire dateline opening the lead (``WASHINGTON (AP) --``, ``ZURICH, Switzerland (AP)
    _``, ``NEW YORK _``); return the sentence and whether one was removed.

    Rush's ``make_DUC.py`` cuts the DUC leads at the first `` -- ``/`` - ``/`` _ `` when they hold
    ``)`` or ``_``; this stricter pattern needs a city in capitals at the very start, so a sentence
    that merely contains a dash keeps its words. Gigaword keeps datelines in ``<DATELINE>``.
    """
    m = _DATELINE.match(sentence)
    if not m or not sentence[m.end() :].strip():
        return sentence, False
    return sentence[m.end() :].strip(), True


def headline_tokens(headline: str) -> list[str]:
    """Headline -> normalised PTB tokens, before ``TITLE_PUNCT`` removal (what ``filter.py`` sees)."""
    return rush_normalize(tokenize(headline))


def title_tokens(tokens: Sequence[str]) -> list[str]:
    """``pull.py``'s target side: normalised headline tokens without ``TITLE_PUNCT``."""
    return [t for t in tokens if t not in TITLE_PUNCT]


def lead_tokens(paragraphs: Sequence[str], short_lead_chars: int = 0) -> tuple[list[str], bool]:
    """Normalised tokens of the lead sentence, and whether a dateline was stripped.

    ``short_lead_chars`` > 0 joins a lead shorter than that many characters with the next sentence,
    its final period turned into a comma (Rush's ``make_DUC.py`` does so below 130 for DUC).
    """
    lead, rest = split_lead(paragraphs)
    lead, stripped = strip_dateline(lead)
    if short_lead_chars and lead and len(lead) < short_lead_chars and rest:
        second = first_sentence(rest)
        if second:
            lead = (lead[:-1] if lead.endswith(".") else lead) + " , " + second
    return rush_normalize(tokenize(lead)), stripped


def rush_filter(src: Sequence[str], title: Sequence[str], cfg: Config) -> str | None:
    """The first ``filter.py`` rule the pair fails (a reason), or None if it passes."""
    if "." not in src:
        return "no_period"
    joined = " ".join(title)
    if any(bad in joined for bad in BAD_TITLE_WORDS):
        return "bad_headline_word"
    if not cfg.src_min_tokens <= len(src) <= cfg.src_max_tokens:
        return "src_length"
    if not cfg.tgt_min_tokens <= len(title) <= cfg.tgt_max_tokens:
        return "tgt_length"
    n = cfg.min_overlap_chars
    if not {w for w in title if len(w) >= n} & {w for w in src if len(w) >= n}:
        return "no_overlap"
    return None


def hash_split(doc_id: str, valid_fraction: float, test_fraction: float) -> str:
    """test / valid / train from a BLAKE2b-64 hash of the id read as a fraction of 2**64."""
    h = int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "big") / 2.0**64
    if h < test_fraction:
        return "test"
    return "valid" if h < test_fraction + valid_fraction else "train"


# --------------------------------------------------------------------------- #
# format: sgml
# --------------------------------------------------------------------------- #


@dataclass
class _ChunkResult:
    """Pass-1 output of one chunk: (split, pair or Quarantined) in input order, the train counts."""

    items: list[tuple[str, tuple | Quarantined]] = field(default_factory=list)
    src_counts: Counter = field(default_factory=Counter)
    tgt_counts: Counter = field(default_factory=Counter)
    stats: dict[str, Counter] = field(default_factory=dict)


def _brief_doc(doc: Doc) -> dict:
    return {
        "doc_id": doc.doc_id,
        "type": doc.doc_type,
        "headline": (doc.headline or "")[:200],
        "lead": " ".join(doc.paragraphs[:1])[:300],
    }


def process_doc(doc: Doc, split: str, cfg: Config) -> tuple[tuple[str, list[str], list[str]] | Quarantined, list[str]]:
    """One document -> ``(doc_id, src, tgt)`` or ``Quarantined``, and the stat keys it adds."""
    where = f"{doc.path}:{doc.line}"
    if doc.doc_id is None:
        return Quarantined("no_doc_id", where, _brief_doc(doc)), []
    if doc.doc_type is not None and doc.doc_type not in cfg.story_types:
        return Quarantined("non_story", where, {"doc_id": doc.doc_id, "type": doc.doc_type}), []
    if not doc.headline:
        return Quarantined("no_headline", where, _brief_doc(doc)), []
    src, stripped = lead_tokens(doc.paragraphs)
    keys = ["dateline_stripped"] if stripped else []
    if not src:
        return Quarantined("no_text", where, _brief_doc(doc)), keys
    title = headline_tokens(doc.headline)
    if not title:
        return Quarantined("no_headline", where, _brief_doc(doc)), keys
    pair = {"doc_id": doc.doc_id, "src": " ".join(src)[:1000], "headline": " ".join(title)}
    if len(src) > cfg.max_tokens:
        return Quarantined("src_too_long", where, {**pair, "tokens": len(src)}), keys
    if split in cfg.filter_splits and (rule := rush_filter(src, title, cfg)):
        return Quarantined(rule, where, pair), keys + [f"filtered_{rule}"]
    tgt = title_tokens(title)
    if not tgt:
        return Quarantined("empty_headline", where, pair), keys
    return (doc.doc_id, src, tgt), keys


def _sgml_chunk(cfg: Config, chunk: list[tuple[DocBlock, str | None]]) -> _ChunkResult:
    """Pass 1 over a chunk of raw documents (runs in a worker): parse, split, tokenise, filter."""
    out = _ChunkResult()
    limits = TextLimits.of(cfg)
    for block, forced in chunk:
        hostile = check_block(block, limits, cfg.encoding)
        if hostile is not None:
            split = forced or hash_split(f"{block.path}:{block.line}", cfg.valid_fraction, cfg.test_fraction)
            out.items.append((split, hostile))
            out.stats.setdefault(split, Counter())["docs"] += 1
            continue
        try:
            doc = parse_doc(block, cfg.encoding)
        except UnicodeDecodeError as err:
            split = forced or hash_split(f"{block.path}:{block.line}", cfg.valid_fraction, cfg.test_fraction)
            raw = block.raw[:300].decode(cfg.encoding, "backslashreplace")
            out.items.append(
                (
                    split,
                    Quarantined("invalid_utf8", f"{block.path}:{block.line}", {"byte_offset": err.start, "head": raw}),
                )
            )
            out.stats.setdefault(split, Counter())["docs"] += 1
            continue
        split = forced or hash_split(doc.doc_id or f"{block.path}:{block.line}", cfg.valid_fraction, cfg.test_fraction)
        item, keys = process_doc(doc, split, cfg)
        stats = out.stats.setdefault(split, Counter())
        stats["docs"] += 1
        stats.update(keys)
        if split == "train" and not isinstance(item, Quarantined):
            out.src_counts.update(item[1])
            out.tgt_counts.update(item[2])
        out.items.append((split, item))
    return out


def input_files(patterns: Iterable[str]) -> list[Path]:
    """Files named by paths, directories (every non-hidden file below) or glob patterns, in order."""
    files: list[Path] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found = [Path(p) for p in sorted(glob.glob(pattern, recursive=True)) if Path(p).is_file()]
        elif Path(pattern).is_dir():
            found = sorted(p for p in Path(pattern).rglob("*") if p.is_file() and not p.name.startswith("."))
        elif Path(pattern).is_file():
            found = [Path(pattern)]
        else:
            raise FileNotFoundError(f"gigaword sgml input {pattern} does not exist")
        if not found:
            raise FileNotFoundError(f"gigaword sgml input {pattern} matches no file")
        files.extend(found)
    seen: set[Path] = set()
    for f in files:
        if f.resolve() in seen:
            raise ValueError(f"gigaword sgml input {f} is listed twice")
        seen.add(f.resolve())
    return files


def config_doc_blocks(cfg: Config) -> Iterator[tuple[DocBlock, str | None]]:
    """Every document block of ``cfg``'s SGML inputs, in order, with its forced split (``"test"``
    for ``test_sgml_files``, else None: the doc-id hash decides)."""
    test_files = input_files(cfg.test_sgml_files) if cfg.test_sgml_files else []
    other = input_files(cfg.sgml_files)
    overlap = {f.resolve() for f in test_files} & {f.resolve() for f in other}
    if overlap:
        raise ValueError(f"gigaword: files both in sgml_files and test_sgml_files: {sorted(map(str, overlap))}")
    for path in test_files:
        for block in iter_doc_blocks(path):
            yield block, "test"
    for path in other:
        for block in iter_doc_blocks(path):
            yield block, None


def _spill_items(spill: Path, src_vocab: set | None, tgt_vocab: set | None, stats: SplitStats) -> Iterator:
    """Pass 2: the spilled chunks of one split, rare words replaced, as rows and quarantines."""
    for chunk in read_spill(spill):
        for item in chunk:
            if isinstance(item, Quarantined):
                yield item
                continue
            doc_id, src, tgt = item
            if src_vocab is not None:
                src, tgt = unk_replace(src, src_vocab, UNK), unk_replace(tgt, tgt_vocab, UNK)
            stats.add("src_tokens", len(src))
            stats.add("tgt_tokens", len(tgt))
            stats.add("src_unk", src.count(UNK))
            stats.add("tgt_unk", tgt.count(UNK))
            yield {"id": doc_id, "src": src, "tgt": tgt, "refs": [tgt]}


def _write_sgml(cfg: Config, out_root: Path, map_chunks: Callable) -> dict[str, dict]:
    out_root.parent.mkdir(parents=True, exist_ok=True)
    spill_dir = Path(tempfile.mkdtemp(prefix=f".{out_root.name}.spill-", dir=scratch_parent(out_root)))
    stats = {s: SplitStats() for s in SPLIT_NAMES}
    for split, split_stats in stats.items():  # reported even when nothing was counted
        for key in ["docs", "dateline_stripped"] + [
            f"filtered_{r}" for r in FILTER_RULES if split in cfg.filter_splits
        ]:
            split_stats.add(key, 0)
    try:
        # Pass 1 spills each chunk's rows per split to scratch files (common.spill_by_split).
        handles = {s: open(spill_dir / f"{s}.pkl", "wb") for s in SPLIT_NAMES}
        src_counts: Counter = Counter()
        tgt_counts: Counter = Counter()
        try:
            for result in map_chunks(
                functools.partial(_sgml_chunk, cfg), chunked(config_doc_blocks(cfg), cfg.chunk_size)
            ):
                spill_by_split(result.items, handles)
                for split, counts in result.stats.items():
                    for key, n in counts.items():
                        stats[split].add(key, n)
                src_counts.update(result.src_counts)
                tgt_counts.update(result.tgt_counts)
        finally:
            for fh in handles.values():
                fh.close()
        src_vocab = tgt_vocab = None
        if cfg.unk_min_count > 1:
            src_vocab, tgt_vocab = keep_vocab(src_counts, cfg.unk_min_count), keep_vocab(tgt_counts, cfg.unk_min_count)
            stats["train"].add("src_vocab", len(src_vocab))
            stats["train"].add("tgt_vocab", len(tgt_vocab))
        splits = {s: _spill_items(spill_dir / f"{s}.pkl", src_vocab, tgt_vocab, stats[s]) for s in SPLIT_NAMES}
        return write_corpus(
            out_root,
            splits,
            SCHEMA,
            params=_params(cfg),
            stats=stats,
            sources=sgml_sources(cfg),
            optional_splits=sgml_optional_splits(cfg),
        )
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


def sgml_sources(cfg: Config) -> dict[str, list[str]]:
    """The input files behind each split (for the error about an empty split)."""
    other = list(cfg.sgml_files)
    return {"train": other, "valid": other, "test": list(cfg.test_sgml_files) or other}


def sgml_optional_splits(cfg: Config) -> tuple[str, ...]:
    """The hash-drawn evaluation splits, which a small input may leave empty; not the test split
    of ``test_sgml_files``."""
    return ("valid",) if cfg.test_sgml_files else ("valid", "test")


# --------------------------------------------------------------------------- #
# format: rush
# --------------------------------------------------------------------------- #


def _rush_files(cfg: Config) -> dict[str, tuple[Path, Path]]:
    """The src/tgt pair of each configured split, after checking they exist and align."""
    files = {}
    for split in SPLIT_NAMES:
        src, tgt = getattr(cfg, f"{split}_src_file"), getattr(cfg, f"{split}_tgt_file")
        if src is None:
            continue
        src, tgt = Path(src), Path(tgt)
        missing = [str(p) for p in (src, tgt) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"gigaword {split}: missing input file(s) {', '.join(missing)}")
        n_src, n_tgt = count_lines(src), count_lines(tgt)
        if n_src != n_tgt:
            longer = src if n_src > n_tgt else tgt
            raise CorpusFormatError(
                longer,
                min(n_src, n_tgt) + 1,
                f"line-aligned files differ in length: {src} has {n_src} lines, {tgt} has {n_tgt}",
            )
        files[split] = (src, tgt)
    return files


def _preview(data: bytes) -> str:
    return data[:300].decode("utf-8", "backslashreplace")


def _rush_chunk(
    max_tokens: int, limits: TextLimits, names: tuple[str, str], chunk: list[tuple[int, bytes, bytes]]
) -> tuple[list, dict]:
    """Decode and split a chunk of aligned lines; the counts its rows add to the split's stats.

    The common path is one decode and one ``str.split`` per side, a NUL test and a length test,
    and a substring test for the test set's ``UNK`` (no regex, no per-token Python work unless a
    line is longer than ``max_token_chars``): the files are tokenised already.
    """
    src_name = row_name(names[0])
    short = min(limits.max_line_chars, limits.max_token_chars)
    out: list = []
    n_src = n_tgt = unk_src = unk_tgt = 0
    for line, s, t in chunk:
        try:
            a, b = s.decode("utf-8"), t.decode("utf-8")
        except UnicodeDecodeError:
            out.append(_rush_reject(max_tokens, names, line, s, t, limits))
            continue
        if "\x00" in a or "\x00" in b or len(a) > short or len(b) > short:
            hostile = _hostile_pair(limits, names, line, a, b)
            if hostile is not None:
                out.append(hostile)
                continue
        src, tgt = a.split(), b.split()
        if not src or not tgt or len(src) > max_tokens or len(tgt) > max_tokens:
            out.append(_rush_reject(max_tokens, names, line, s, t, limits))
            continue
        if "UNK" in a:
            src = normalize_unk(src)
        if "UNK" in b:
            tgt = normalize_unk(tgt)
        n_src += len(src)
        n_tgt += len(tgt)
        unk_src += src.count(UNK)
        unk_tgt += tgt.count(UNK)
        out.append({"id": f"{src_name}:{line}", "src": src, "tgt": tgt, "refs": [tgt]})
    return out, {"src_tokens": n_src, "tgt_tokens": n_tgt, "src_unk": unk_src, "tgt_unk": unk_tgt}


def _hostile_pair(limits: TextLimits, names: tuple[str, str], line: int, a: str, b: str) -> Quarantined | None:
    """The first side of a decoded pair with a NUL, an over-long line or token, quarantined."""
    for text, name in ((a, names[0]), (b, names[1])):
        found = limits.problem(text)
        if found is not None:
            reason, details = found
            return Quarantined(reason, f"{name}:{line}", {**details, "src": a[:300], "tgt": b[:300]})
    return None


def _rush_reject(
    max_tokens: int, names: tuple[str, str], line: int, s: bytes, t: bytes, limits: TextLimits
) -> Quarantined:
    """Why an aligned line pair cannot be a row: the first of invalid UTF-8, a NUL or an over-long
    line or token (:class:`TextLimits`), empty, too many tokens."""
    preview = {"src": _preview(s), "tgt": _preview(t)}
    for data, name in ((s, names[0]), (t, names[1])):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            return Quarantined("invalid_utf8", f"{name}:{line}", {"byte_offset": err.start, **preview})
    hostile = _hostile_pair(limits, names, line, s.decode("utf-8"), t.decode("utf-8"))
    if hostile is not None:
        return hostile
    for role, data, name in (("src", s, names[0]), ("tgt", t, names[1])):
        tokens = data.decode("utf-8").split()
        if not tokens:
            return Quarantined(f"empty_{role}", f"{name}:{line}", preview)
        if len(tokens) > max_tokens:
            return Quarantined(
                f"{role}_too_long", f"{name}:{line}", {"tokens": len(tokens), "head": " ".join(tokens[:50])}
            )
    raise AssertionError("_rush_reject called on a valid pair")


def _aligned_lines(src: Path, tgt: Path) -> Iterator[tuple[int, bytes, bytes]]:
    """``(line number, src bytes, tgt bytes)``, line ends and a leading BOM removed."""
    with open_input(src) as fs, open_input(tgt) as ft:
        for line, s, t in zip(count(1), fs, ft):
            if line == 1:
                s, t = s.removeprefix(codecs.BOM_UTF8), t.removeprefix(codecs.BOM_UTF8)
            yield line, s.rstrip(b"\r\n"), t.rstrip(b"\r\n")


def _rush_items(src: Path, tgt: Path, cfg: Config, stats: SplitStats) -> Iterator:
    fn = functools.partial(_rush_chunk, cfg.max_tokens, TextLimits.of(cfg), (src.name, tgt.name))
    for items, counts in serial_map(fn, chunked(_aligned_lines(src, tgt), cfg.chunk_size)):
        for key, n in counts.items():
            stats.add(key, n)
        yield from items


def _write_rush(cfg: Config, out_root: Path) -> dict[str, dict]:
    """The rush files, chunk by chunk in this process.

    Not through ``map_chunks``: decoding and splitting a tokenised line costs less than pickling its
    row back from a worker, and the writer (this process) is the bottleneck. Measured on 400,000
    pairs, 2 cores: 66,000 pairs/s in process, 27,000 pairs/s through ``ProcessMap(2)``.
    """
    files = _rush_files(cfg)
    stats = {s: SplitStats() for s in files}
    splits = {s: _rush_items(src, tgt, cfg, stats[s]) for s, (src, tgt) in files.items()}
    sources = {s: [str(p) for p in pair] for s, pair in files.items()}
    return write_corpus(out_root, splits, SCHEMA, params=_params(cfg), stats=stats, sources=sources)


# --------------------------------------------------------------------------- #
# Entry point
# --------------------------------------------------------------------------- #


def _params(cfg: Config) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the block (re-enabled after, if it was on).

    Rows are acyclic (dicts of lists of str), so reference counting frees them and the cyclic
    collector finds nothing; but each of its full collections re-traverses every live container:
    the shard writer's buffer of up to 50,000 rows and ``write_corpus``'s dedup set. Measured on
    200,000 rush-format pairs: 10 full collections took 2.2 s of 4.7 s of CPU time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def write_splits(cfg: Config, out_root: Path, map_chunks: Callable = serial_map) -> dict[str, dict]:
    """Write ``out_root/<split>/`` for each split; return the manifests by split."""
    out_root = Path(out_root)
    with cyclic_gc_paused():
        if cfg.format == "rush":
            return _write_rush(cfg, out_root)  # in process: see _write_rush
        return _write_sgml(cfg, out_root, map_chunks)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def rush_tokenizer(pretokenized: bool, short_lead_chars: int = 0) -> Callable[[str], list[str]]:
    """Raw text -> Rush et al. source tokens: the lead sentence, a wire dateline removed, PTB
    tokens, lowercase, digits ``#``, ``&`` -> ``&amp;`` (:func:`lead_tokens`; ``short_lead_chars``
    as there). ``pretokenized``: a line of the Rush release, split on whitespace with its ``UNK``
    spellings unified as ``format: rush`` does. Rare words need nothing: the encoder reads every
    word outside its vocabulary as ``<unk>``, as the reader's ``<unk>`` did."""
    if pretokenized:
        return lambda text: rush_normalize(normalize_unk(text.split()))
    # lead_tokens reads a document's paragraphs; the reader's paragraphs are whitespace-collapsed.
    return lambda text: lead_tokens([" ".join(text.split())], short_lead_chars)[0]


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens as either format makes them: :func:`rush_tokenizer`."""
    return rush_tokenizer(pretokenized)
