"""LCSTS (Hu, Chen & Zhu 2015), the Chinese short-text summarisation corpus, as CopyNet and WEAN use it.

Papers. CopyNet (Gu et al. 2016, section 5.2, Table 2): PART_I 2,400,591 pairs; PART_II 10,666
and PART_III 1,106 pairs "manually rated for their quality from 1 to 5", 8,685 and 725 of them
scored >= 3; "we use Part I as the training set and the subset of Part III scored from 3 to 5 as
the testing set". WEAN (Ma et al. 2018, section 3.2.1): "We only reserve pairs with scores no less
than 3 ... we use PART I as training set, PART II as validation set, and PART III as test set".
Hence ``train_file`` PART_I, ``valid_file`` PART_II, ``test_file`` PART_III, ``min_human_label`` 3.
For the TSV form the given ``train.tsv`` / ``val.tsv`` / ``test.tsv`` are configured the same way;
a split whose file is ``null`` is not written (public copies lack PART_I and PART_II).

Formats, chosen per file by its suffix (``.tsv`` -> TSV, anything else -> original):

* original (``LCSTS2.0/DATA/PART_*.txt``): not well-formed XML (unquoted attribute, no root), so it
  is read line by line, each line stripped of its indentation::

      <doc id=2>
          <human_label>5</human_label>          (PART_II / PART_III only)
          <summary>
              雅虎宣布剥离阿里巴巴股份
          </summary>
          <short_text>
              雅虎发布2014年第四季度财报，...
          </short_text>
      </doc>

  Also accepted: ``<doc id="2">``, ``<summary>text</summary>`` on one line, text on the line of an
  opening or closing tag, several text lines (joined by a newline; counted ``multiline_fields``)
  and blank lines anywhere (counted ``blank_lines``).
* TSV (CLGE's LCSTS subset): ``summary<TAB>short_text``, one pair per line, no header.

Rows: ``id`` = ``PART_III.txt#2`` (file name, ``#``, LCSTS doc id) or ``train.tsv:17`` (file:line),
``src`` = short_text tokens, ``tgt`` = summary tokens, ``refs`` = ``[tgt]``, ``human_label`` (int8;
null where the format has none).

Views (``view``; vocabulary sizes -- 3,000 characters (+C) / 10,000 words (+W) in CopyNet Table 3,
4,000 characters in WEAN 3.2.3 -- are the vocab stage's business):

* ``char``: every non-whitespace character is a token; ASCII letters and digits too (``2014年`` ->
  ``2 0 1 4 年``), since neither paper says otherwise (WEAN: "we split the Chinese sentences
  into characters"); full-width punctuation is kept as it is.
* ``word``: jieba words (CopyNet 5.2: "the word-segmentation is obtained with jieba"), HMM on by
  default (``jieba_hmm``), cached by content hash under ``cache_dir`` (:mod:`pipeline.data.text.segment`).

Bad input: a broken *file* raises :class:`CorpusFormatError` (``file:line``), because once its
structure is lost no later record can be trusted; a broken *record* is quarantined.

* CorpusFormatError: a non-blank line outside ``<doc>`` that is not ``<doc id=N>``; unclosed tags
  (``<doc>``, ``<summary>`` or ``<short_text>`` still open when another element opens, another
  closes, or the file ends; ``<human_label>`` without its closing tag on its line); text or an
  unknown tag inside ``<doc>`` outside the elements; a file without any record.
* Quarantine reasons: ``invalid_utf8`` (the first such line of the doc, whose structure is still
  read with the bad bytes replaced / the TSV line), ``nul_byte`` / ``line_too_long`` (the first
  line of the doc / the TSV line with a NUL character or over ``max_line_chars`` characters),
  ``missing_summary``,
  ``missing_short_text``, ``duplicate_summary`` / ``duplicate_short_text`` /
  ``duplicate_human_label``, ``bad_human_label`` (not an integer 1-5), ``missing_human_label``
  (original format, valid/test only: the papers evaluate on scored pairs only), ``empty_summary``,
  ``empty_short_text``, ``summary_too_long`` / ``short_text_too_long`` (over ``max_chars``
  characters: a guard against absurd input, LCSTS texts have <= ~140; no paper filters by
  length), and for TSV ``empty_line`` and ``bad_field_count`` (not exactly 2 tab-separated fields);
  after tokenising, ``token_too_long``: a token over ``max_token_chars`` characters (only the word
  view can make one: the text has no spaces, so the limit applies to jieba's words, not to lines).
* Filter (a paper rule, so counted in the manifest's ``stats``, not quarantined): a doc whose
  human_label < ``min_human_label`` is dropped, ``dropped_human_label_<k>``; every valid label read
  is counted ``human_label_<k>``. A doc without a label in the train file is kept (PART_I has none);
  a labelled doc is filtered whatever its split. Checks run in the order listed (UTF-8, elements,
  label, the filter, empty, length): a label-1 doc with an empty summary is filtered, not quarantined.
* Then :func:`~pipeline.data.corpora.common.write_corpus` quarantines train duplicates
  (``duplicate_pair``) and train sources equal to a valid/test source (``src_in_<split>``).

* A file may be gzipped (``.gz``: the format is chosen by the name without it; a truncated or
  corrupt stream is a ``CorpusFormatError`` naming the file; ids keep the name without ``.gz``);
  a configured split left without rows (an empty file, every record quarantined or filtered)
  is an ``EmptySplitError`` naming its file.

Other ``stats``: ``src_tokens``, ``tgt_tokens``, ``tgt_tokens_in_src`` (summary tokens a copy
mechanism can point at), over the rows the reader produced (before ``write_corpus`` removes train
duplicates and leaks).
"""

from __future__ import annotations

import functools
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import CorpusFormatError, Quarantined, SplitStats, write_corpus
from pipeline.data.corpora.inputs import (
    DEFAULT_LIMITS,
    MAX_LINE_CHARS,
    MAX_TOKEN_CHARS,
    TextLimits,
    open_input,
    row_name,
)
from pipeline.data.text.segment import (
    Segmenter,
    char_chunk,
    char_tokens,
    jieba_chunk,
    jieba_version,
)
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

VIEWS = ("char", "word")
ELEMENTS = ("summary", "short_text")
BOM = b"\xef\xbb\xbf"
PREVIEW = 300  # characters of a field kept in a quarantine record

SCHEMA: pa.Schema = make_schema([pa.field("human_label", pa.int8())])

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    """Which LCSTS files make which split, and how to tokenise them."""

    train_file: str | None = "PART_I.txt"  # null: split not written
    valid_file: str | None = "PART_II.txt"
    test_file: str | None = "PART_III.txt"
    view: str = "char"  # char | word (jieba)
    min_human_label: int = 3  # keep scored pairs with human_label >= this (CopyNet/WEAN: 3)
    jieba_hmm: bool = True  # word view: jieba's HMM for unknown words
    cache_dir: str | None = "data/cache/jieba"  # word view: segmentation cache; null: none
    max_chars: int = 1000  # longer summaries / texts are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer raw line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer token (word view: a jieba word): token_too_long
    chunk_size: int = 5000  # records per map_chunks task

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"lcsts view must be one of {VIEWS}, got {self.view!r}")
        if not self.split_files():
            raise ValueError("lcsts needs at least one of train_file, valid_file, test_file")
        if isinstance(self.min_human_label, bool) or not isinstance(self.min_human_label, int):
            raise ValueError(f"lcsts min_human_label must be an integer, got {self.min_human_label!r}")
        if not isinstance(self.jieba_hmm, bool):
            raise ValueError(f"lcsts jieba_hmm must be true or false, got {self.jieba_hmm!r}")
        if self.max_chars < 1 or self.chunk_size < 1:
            raise ValueError("lcsts max_chars and chunk_size must be >= 1")
        TextLimits.of(self)

    def split_files(self) -> dict[str, Path]:
        """``{split: file}`` for the configured splits, in train/valid/test order."""
        files = {"train": self.train_file, "valid": self.valid_file, "test": self.test_file}
        return {split: Path(f) for split, f in files.items() if f is not None}

    def manifest_params(self) -> dict:
        """What made the rows (the cache location does not change them)."""
        params = {k: v for k, v in asdict(self).items() if k != "cache_dir"}
        params["tokenizer"] = "chars" if self.view == "char" else f"jieba {jieba_version()} HMM={self.jieba_hmm}"
        return params


class Pair(NamedTuple):
    """One well-formed (summary, short_text) record before tokenisation."""

    id: str
    summary: str
    text: str
    label: int | None
    where: str = ""  # file:line, for a quarantine after tokenising


# --------------------------------------------------------------------------- #
# The original format
# --------------------------------------------------------------------------- #

_DOC_OPEN = re.compile(r'<doc\s+id\s*=\s*"?(\d+)"?\s*>')
_LABEL = re.compile(r"<human_label>(.*)</human_label>")
_TAG_LINE = re.compile(r"</?(?:doc|summary|short_text|human_label)\b")
_VALID_LABEL = re.compile(r"[1-5]")


@dataclass
class RawDoc:
    """A ``<doc>`` as read, before any record-level check."""

    doc_id: str
    line: int  # of the <doc> header
    fields: dict[str, list[str]] = field(default_factory=dict)  # element -> text of each occurrence
    labels: list[str] = field(default_factory=list)
    bad_utf8_line: int | None = None  # first line that was not UTF-8
    hostile: tuple[int, str, dict] | None = None  # first line with a NUL or over max_line_chars

    def add(self, element: str, lines: list[str], stats: SplitStats) -> None:
        if len(lines) > 1:
            stats.add("multiline_fields")
        self.fields.setdefault(element, []).append("\n".join(lines))


def _decoded_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """``(line number, stripped text, was valid UTF-8)``; bad bytes become U+FFFD for structure."""
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1:
                raw = raw.removeprefix(BOM)
            try:
                yield number, raw.decode("utf-8").strip(), True
            except UnicodeDecodeError:
                yield number, raw.decode("utf-8", "replace").strip(), False


def parse_original(path: Path, stats: SplitStats, limits: TextLimits = DEFAULT_LIMITS) -> Iterator[RawDoc]:
    """The ``<doc>`` blocks of an original-format LCSTS file; CorpusFormatError on broken structure.

    Written by hand: the file is not XML (``<doc id=0>``, no root element), and a line-level state
    machine can name the line of every structural error, which lenient HTML parsers cannot.
    """
    doc: RawDoc | None = None
    element: str | None = None  # the open <summary>/<short_text>, if any
    element_line = 0
    lines: list[str] = []
    for number, line, utf8 in _decoded_lines(path):
        if doc is None:
            if not line:
                stats.add("blank_lines")
                continue
            match = _DOC_OPEN.fullmatch(line)
            if match is None:
                raise CorpusFormatError(path, number, f"expected <doc id=N>, found {line[:60]!r}")
            doc = RawDoc(match[1], number, bad_utf8_line=None if utf8 else number)
            continue
        if not utf8 and doc.bad_utf8_line is None:
            doc.bad_utf8_line = number
        if doc.hostile is None and (found := limits.line_problem(line)) is not None:
            doc.hostile = (number, *found)
        if element is not None:  # inside <summary> or <short_text>
            close = f"</{element}>"
            if line.endswith(close):
                text = line[: -len(close)].strip()
                doc.add(element, lines + [text] if text else lines, stats)
                element = None
            elif _TAG_LINE.match(line):
                raise CorpusFormatError(
                    path, number, f"<{element}> opened at line {element_line} is not closed (found {line[:40]!r})"
                )
            elif line:
                lines.append(line)
            else:
                stats.add("blank_lines")
            continue
        if not line:
            stats.add("blank_lines")
        elif line == "</doc>":
            yield doc
            doc = None
        elif (opened := _open_element(line)) is not None:
            name, rest = opened
            close = f"</{name}>"
            if rest.endswith(close):  # <summary>text</summary> on one line
                text = rest[: -len(close)].strip()
                doc.add(name, [text] if text else [], stats)
            else:
                element, element_line, lines = name, number, [rest.strip()] if rest.strip() else []
        elif (label := _LABEL.fullmatch(line)) is not None:
            doc.labels.append(label[1].strip())
        elif line.startswith("<human_label>"):
            raise CorpusFormatError(path, number, "<human_label> is not closed on its line")
        elif line.startswith("<doc"):
            raise CorpusFormatError(path, number, f"<doc id={doc.doc_id}> opened at line {doc.line} is not closed")
        else:
            raise CorpusFormatError(
                path, number, f"unexpected {line[:40]!r} inside <doc id={doc.doc_id}> (outside any element)"
            )
    if element is not None:
        raise CorpusFormatError(path, element_line, f"<{element}> is not closed before the end of the file")
    if doc is not None:
        raise CorpusFormatError(path, doc.line, f"<doc id={doc.doc_id}> is not closed before the end of the file")


def _open_element(line: str) -> tuple[str, str] | None:
    """``(element, rest of line)`` if ``line`` opens <summary> or <short_text>."""
    for name in ELEMENTS:
        if line.startswith(f"<{name}>"):
            return name, line[len(name) + 2 :]
    return None


def check_doc(doc: RawDoc, name: str, labelled: bool, cfg: Config, stats: SplitStats) -> Pair | Quarantined | None:
    """A doc's pair, its quarantine, or None when the human_label filter drops it (counted)."""
    record = {
        "doc_id": doc.doc_id,
        "human_label": doc.labels,
        **{el: [t[:PREVIEW] for t in doc.fields.get(el, [])] for el in ELEMENTS},
    }
    where = f"{name}:{doc.line}"
    if doc.bad_utf8_line is not None:
        return Quarantined("invalid_utf8", f"{name}:{doc.bad_utf8_line}", record)
    if doc.hostile is not None:
        line, reason, details = doc.hostile
        return Quarantined(reason, f"{name}:{line}", {**details, **record})
    for el in ELEMENTS:
        n = len(doc.fields.get(el, []))
        if n != 1:
            return Quarantined(f"missing_{el}" if n == 0 else f"duplicate_{el}", where, record)
    if len(doc.labels) > 1:
        return Quarantined("duplicate_human_label", where, record)
    label = None
    if doc.labels:
        if not _VALID_LABEL.fullmatch(doc.labels[0]):
            return Quarantined("bad_human_label", where, record)
        label = int(doc.labels[0])
        stats.add(f"human_label_{label}")
        if label < cfg.min_human_label:
            stats.add(f"dropped_human_label_{label}")
            return None
    elif labelled:
        return Quarantined("missing_human_label", where, record)
    summary, text = doc.fields["summary"][0], doc.fields["short_text"][0]
    return check_pair(f"{row_name(name)}#{doc.doc_id}", where, summary, text, label, cfg, record)


def iter_original(path: Path, labelled: bool, cfg: Config, stats: SplitStats) -> Iterator[Pair | Quarantined]:
    """Checked records of an original-format file (label-filtered docs left out, counted)."""
    docs = 0
    for doc in parse_original(path, stats, TextLimits.of(cfg)):
        docs += 1
        item = check_doc(doc, path.name, labelled, cfg, stats)
        if item is not None:
            yield item
    if docs == 0:
        raise CorpusFormatError(path, None, "no <doc> records in the file")


# --------------------------------------------------------------------------- #
# The TSV form
# --------------------------------------------------------------------------- #


def iter_tsv(path: Path, cfg: Config) -> Iterator[Pair | Quarantined]:
    """Checked records of a ``summary<TAB>short_text`` file.

    By hand, not polars' CSV reader: a bad line must be quarantined with its own line number,
    while the reader would fail (or silently repair) the whole file.
    """
    number = 0
    limits = TextLimits.of(cfg)
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            raw = raw.rstrip(b"\r\n")
            if number == 1:
                raw = raw.removeprefix(BOM)
            where = f"{path.name}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                preview = raw.decode("utf-8", "backslashreplace")[:PREVIEW]
                yield Quarantined("invalid_utf8", where, {"byte_offset": err.start, "line": preview})
                continue
            if (found := limits.line_problem(line)) is not None:
                yield Quarantined(found[0], where, {**found[1], "line": line[:PREVIEW]})
                continue
            if not line.strip():
                yield Quarantined("empty_line", where, {"line": line[:PREVIEW]})
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                yield Quarantined("bad_field_count", where, {"fields": len(fields), "line": line[:PREVIEW]})
                continue
            pair_id = f"{row_name(path.name)}:{number}"
            yield check_pair(pair_id, where, fields[0].strip(), fields[1].strip(), None, cfg)
    if number == 0:
        raise CorpusFormatError(path, None, "empty file: no records")


def check_pair(
    pair_id: str, where: str, summary: str, text: str, label: int | None, cfg: Config, record: dict | None = None
) -> Pair | Quarantined:
    """Record-level checks shared by both formats: empty or absurdly long fields."""
    record = record or {"summary": summary[:PREVIEW], "short_text": text[:PREVIEW]}
    for name, value in (("summary", summary), ("short_text", text)):
        if not value:
            return Quarantined(f"empty_{name}", where, record)
        if len(value) > cfg.max_chars:
            return Quarantined(f"{name}_too_long", where, {"chars": len(value), **record})
    return Pair(pair_id, summary, text, label, where)


# --------------------------------------------------------------------------- #
# Tokenisation and rows
# --------------------------------------------------------------------------- #

Tokenize = Callable[[Iterable[list[str]]], Iterator[list[list[str]]]]  # text chunks -> token chunks


def records(path: Path, split: str, cfg: Config, stats: SplitStats) -> Iterator[Pair | Quarantined]:
    """The checked records of one split's file, whichever its format (by its name without ``.gz``)."""
    if Path(row_name(path.name)).suffix.lower() == ".tsv":
        return iter_tsv(path, cfg)
    return iter_original(path, labelled=split != "train", cfg=cfg, stats=stats)


def to_rows(
    items: Iterable[Pair | Quarantined],
    tokenize: Tokenize,
    chunk_size: int,
    stats: SplitStats,
    limits: TextLimits | None = None,
) -> Iterator[dict | Quarantined]:
    """Tokenise records chunk by chunk (summary, text, summary, text ...); yield rows in order.
    ``limits``: quarantine a record with a token over ``max_token_chars`` (``token_too_long``)."""
    pending: deque[list] = deque()

    def text_chunks() -> Iterator[list[str]]:
        for chunk in chunked(items, chunk_size):
            pending.append(chunk)
            yield [t for item in chunk if isinstance(item, Pair) for t in (item.summary, item.text)]

    for tokens in tokenize(text_chunks()):
        chunk = pending.popleft()
        it = iter(tokens)
        src_n = tgt_n = copyable = 0
        for item in chunk:
            if isinstance(item, Quarantined):
                yield item
                continue
            tgt, src = next(it), next(it)
            if limits is not None and (found := limits.token_problem(tgt) or limits.token_problem(src)):
                record = {"summary": item.summary[:PREVIEW], "short_text": item.text[:PREVIEW]}
                yield Quarantined(found[0], item.where, {**found[1], **record})
                continue
            source = set(src)
            src_n, tgt_n = src_n + len(src), tgt_n + len(tgt)
            copyable += sum(t in source for t in tgt)
            yield {"id": item.id, "src": src, "tgt": tgt, "refs": [tgt], "human_label": item.label}
        stats.add("src_tokens", src_n)
        stats.add("tgt_tokens", tgt_n)
        stats.add("tgt_tokens_in_src", copyable)


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/<split>/`` for every configured file; return the manifests by split."""
    files = cfg.split_files()
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"missing LCSTS file(s): {', '.join(missing)}; set the *_file of a split you do not have to null"
        )
    stats = {split: SplitStats() for split in files}
    segmenter = Segmenter(cfg.jieba_hmm, cfg.cache_dir) if cfg.view == "word" else None
    tokenize: Tokenize = (
        functools.partial(map_chunks, char_chunk)
        if segmenter is None
        else functools.partial(segmenter.segment_chunks, map_chunks=map_chunks)
    )
    try:
        limits = TextLimits.of(cfg) if segmenter is not None else None  # the char view's tokens are 1 character
        streams = {
            split: to_rows(records(path, split, cfg, stats[split]), tokenize, cfg.chunk_size, stats[split], limits)
            for split, path in files.items()
        }
        sources = {split: [str(path)] for split, path in files.items()}
        manifests = write_corpus(out_root, streams, SCHEMA, params=cfg.manifest_params(), stats=stats, sources=sources)
    finally:
        if segmenter is not None:
            segmenter.close()
    if segmenter is not None:
        log.info("jieba segmentation: %s", segmenter.counts)
    return manifests


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


DETOKENIZE_JOIN = ""  # Chinese (either view): output tokens are joined without spaces


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens of the reader's ``view``: ``char``, every non-whitespace character
    (:func:`pipeline.data.text.segment.char_tokens`); ``word``, jieba words with the reader's
    ``jieba_hmm`` (:func:`pipeline.data.text.segment.jieba_chunk`). ``pretokenized``: a whitespace split."""
    view = settings.get("view", "char")
    if pretokenized:
        return str.split
    if view == "char":
        return char_tokens
    if view == "word":
        hmm = bool(settings.get("jieba_hmm", True))
        return lambda text: jieba_chunk(hmm, [text.strip()])[0].split()
    raise ValueError(f"lcsts view must be 'char' or 'word', got {view!r}")
