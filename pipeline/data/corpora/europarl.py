"""Europarl v7 en-fr + WMT newstest2011 for Pointer Softmax NMT (Gulcehre et al. 2016, section 5.3).

The paper: "we train NMT models with attention over the Europarl corpus ... over the sequences of
length up to 50 for English to French translation", with the dl4mt-material code; "evaluations
... are done on newstest2011 by using BLEU ... multi-bleu.perl ... on tokenized sentence pairs".
The development set is not named in the paper; dl4mt-material (the code it used) early-stops on
``newstest2011`` as well (``valid_datasets=[.../newstest2011.en.tok, .../newstest2011.fr.tok]``),
so by default ``valid`` and ``test`` are both newstest2011. ``valid_stem`` / ``valid_dir`` /
``valid_format`` name another WMT set for validation (the project's params: newstest2012, plain
files in its own folder), so that model selection never sees the test set. Europarl is the training
split.

Inputs (the published formats)
    ``<europarl_dir>/<europarl_stem>.<lang>`` (``europarl-v7.fr-en.en`` / ``.fr``): line-aligned,
    one raw (untokenised, cased) sentence a line, UTF-8. ``<newstest_dir>`` is a WMT ``dev/``
    folder with, per test set ``<stem>``:

    * SGML (``eval_format: sgm``, the default): ``<stem>-src.<src_lang>.sgm`` (``<srcset>``) and
      ``<stem>-ref.<tgt_lang>.sgm`` (``<refset>``), ``<doc docid=...>`` blocks of ``<seg id=N>``
      lines, one segment a line. It is SGML, not XML (raw ``&``, attribute quotes optional), so it
      is parsed line by line here. Segments are matched by ``(docid, seg id)``, never by position;
      a segment without its counterpart is a ``CorpusFormatError`` naming the file that lacks it.
    * plain (``eval_format: plain``): line-aligned ``<stem>.<src_lang>`` / ``<stem>.<tgt_lang>``.

Tokenisation: dl4mt-material runs Moses ``tokenizer.perl -l <lang>`` (no ``-a``, no lowercasing)
on every file; here its Python port ``sacremoses`` (same rules, e.g. French ``l'`` + ``ODS``) with
``aggressive_dash_splits`` off. ``escape: false`` (default) keeps ``&``, ``'``, ``"`` as they are;
``escape: true`` writes tokenizer.perl's ``&amp;``/``&apos;``/``&quot;`` entities. No lowercasing:
the paper does none.

Shortlist and pointers (section 5.3)
    "We use 30,000 tokens for both the source and the target language shortlist vocabularies (1 of
    the token is still reserved for the unknown words)": the shortlists themselves are the vocab
    stage's job, but the pointer targets depend on the *target* shortlist, so it is computed here
    from the train split's target counts, by the vocab stage's own rule
    (:func:`pipeline.vocab.vocabulary.build_vocab` with ``max_size = shortlist_size``: the 4 specials
    ``<pad> <unk> <s> </s>`` included, count descending, ties by token), and written to
    ``<out_root>/shortlist.<tgt_lang>.txt`` in the vocab file format. Set ``vocab.tgt_max_size`` to
    the same ``shortlist_size`` so the model's target vocabulary is this shortlist. The counts are
    taken over exactly the train rows that are written (after the filters, the duplicate and
    leakage removals): a first streaming pass counts, the second annotates and writes.

    The heuristic, per target token y_t: "If the word is not in the short-list vocabulary, we first
    check if the same word y_t appears in the source sentence. If it is not, we then check if a
    translated version of the word exists in the source sentence by using a look-up table ...
    Otherwise we check if one of the English senses from the cross-language dictionary of the
    French word is in the source ... Otherwise we just use the argmax of l_t as the target."

    * y_t in the shortlist: ``tgt_switch`` False, ``tgt_pointer`` -1 (shortlist softmax);
    * else y_t itself in the source: pointer to its first occurrence (the paper's conflict rule,
      section 5.2: "the first occurrence"), switch True -- counted ``pointers_identical``;
    * else a translation of y_t from the dictionary in the source: the dictionary's translations
      of y_t are tried in file order (the first listed plays the look-up table, the further ones
      the other senses), pointer to the first occurrence of the first that occurs -- counted
      ``pointers_dictionary``;
    * else (``oov_unmatched``): ``unmatched: location`` (default, section 5.3) sets switch True and
      pointer -1, meaning "location softmax, target = the model's own argmax of l_t";
      ``unmatched: shortlist`` follows section 4 instead ("neither in the shortlist nor in the
      context ... the shortlist softmax predicts UNK"): switch False, pointer -1.

    So ``tgt_switch`` True means "produced by the location softmax" (the paper's z_t = 0), as in
    :mod:`pipeline.data.text.pointers`; unlike there, with ``unmatched: location`` a switch can be True
    with pointer -1. Every split is annotated with the train shortlist.

Dictionary file (``dictionary_file``, optional; the paper's 15,953-word French-English dictionary
is not public): UTF-8, one translation a line, ``<target-language word><TAB><source-language
word>`` -- for en->fr ``fr_word<TAB>en_word``, the paper's French-to-English direction. Words are
compared with the Moses tokens as they are (cased). Several lines for one target word list its
senses in priority order; an exact repeat of a line is ignored. Blank lines and lines starting with
``#`` are skipped. Anything else (not two tab-separated fields, an empty field, whitespace inside a
word, invalid UTF-8) is a ``CorpusFormatError`` naming ``file:line``.

Filter rules (quarantine reasons; every raw pair ends in a shard or in ``quarantine.jsonl``)
    * ``invalid_utf8``: a line that is not UTF-8 (``where`` names that side's file and line);
    * ``nul_byte`` / ``line_too_long`` / ``token_too_long``: a line with a NUL character, over
      ``max_line_chars`` characters, or with a whitespace-separated token over ``max_token_chars``
      characters (:class:`pipeline.data.corpora.inputs.TextLimits`; a guard against absurd input,
      checked before tokenising; all splits);
    * ``empty_src`` / ``empty_tgt``: a line with no token (Europarl has such lines: 6 empty French
      lines in its first 3,000);
    * ``longer_than_max_len``: train only, a pair with a side over ``max_len`` (50) tokens, the
      paper's "sequences of length up to 50" (dl4mt drops such training pairs; evaluation sets are
      kept whole);
    * ``duplicate_pair`` / ``src_in_valid`` / ``src_in_test``: train only, the rules of
      :func:`pipeline.data.corpora.common.write_corpus`, applied here already so that the shortlist and
      the stats count the rows actually written.

    Line-aligned files with different line counts, malformed SGML (unclosed ``<seg>``/``<doc>``/
    set, a segment outside a ``<doc>``, a duplicate ``(docid, seg id)``, a ``<refset>`` whose
    ``trglang`` is not ``tgt_lang``), a missing counterpart segment and a truncated or corrupt
    ``.gz`` raise ``CorpusFormatError`` with file and line before anything is written; a split
    left without rows (empty files, every pair quarantined) raises ``EmptySplitError`` naming its
    files. Every input may be gzipped: ``<name>.gz`` is read where ``<name>`` is missing.

Rows: ``id`` = ``<europarl_stem>:<line>`` (train), ``<stem>:<docid>:<seg id>`` (SGML) or
``<stem>:<line>`` (plain); ``refs`` = ``[tgt]`` (newstest2011 has one reference); ``tgt_pointer``
(list<int32>), ``tgt_switch`` (list<bool>). Manifest ``stats`` per split: ``tgt_tokens``,
``tgt_oov`` (target tokens outside the shortlist), ``pointers_identical``, ``pointers_dictionary``,
``oov_unmatched``, and per 100 examples ``pointers_per_100`` (identical + dictionary),
``identical_per_100``, ``dictionary_per_100``; train also ``shortlist_words`` and
``dictionary_words``.

Tokenising and annotating run in module-level functions over chunks of raw pairs, through the
injected ``map_chunks``; Europarl is streamed (twice), never loaded. The SGML test set (3,003
segments) is matched through a dict of the reference file's segments.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from sacremoses import MosesTokenizer

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import CorpusFormatError, Quarantined, SplitStats, pair_key, write_corpus
from pipeline.data.corpora.inputs import MAX_TOKEN_CHARS, TextLimits, open_input, resolve_input
from pipeline.data.corpora.keyset import KeySet
from pipeline.io.files import sha256_file
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema
from pipeline.vocab.vocabulary import SPECIALS, build_vocab

SCHEMA: pa.Schema = make_schema(
    [pa.field("tgt_pointer", pa.list_(pa.int32())), pa.field("tgt_switch", pa.list_(pa.bool_()))]
)
EVAL_FORMATS = ("sgm", "plain")
UNMATCHED = ("location", "shortlist")
PREVIEW_CHARS = 300  # raw text kept per side in a quarantine record


@dataclass(frozen=True)
class Config:
    """Where the files are, the translation direction, and the section 5.3 settings."""

    europarl_dir: str  # holds <europarl_stem>.<src_lang> and .<tgt_lang>
    newstest_dir: str  # a WMT dev/ folder with the test set (and the valid set, unless valid_dir)
    europarl_stem: str = "europarl-v7.fr-en"
    valid_stem: str = "newstest2011"  # dl4mt-material's development set (the paper's code)
    test_stem: str = "newstest2011"  # section 5.3: "evaluations ... on newstest2011"
    eval_format: str = "sgm"  # sgm: <stem>-src/-ref .sgm matched by (docid, seg id); plain: <stem>.<lang>
    valid_dir: str | None = None  # the valid set's folder when it is not newstest_dir (e.g. newstest2012's)
    valid_format: str | None = None  # the valid set's format when it differs from eval_format
    src_lang: str = "en"  # section 5.3: English to French
    tgt_lang: str = "fr"
    max_len: int = 50  # train pairs with a side over this many tokens are filtered
    shortlist_size: int = 30000  # target shortlist size incl. the 4 specials (vocab.build_vocab max_size)
    dictionary_file: str | None = None  # <tgt word>\t<src word> lines, see the module docstring
    unmatched: str = "location"  # OOV with no source match: location (5.3 argmax of l_t) | shortlist (UNK)
    escape: bool = False  # Moses XML escaping (&amp; &apos; ...) as tokenizer.perl does by default
    max_line_chars: int = 5000  # longer raw lines are quarantined (line_too_long) as absurd input
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    chunk_size: int = 5000  # sentence pairs per map_chunks task

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        for name in ("eval_format", "valid_format"):
            if getattr(self, name) not in (*EVAL_FORMATS, *([None] if name == "valid_format" else [])):
                raise ValueError(f"europarl {name} must be one of {EVAL_FORMATS}, got {getattr(self, name)!r}")
        if self.unmatched not in UNMATCHED:
            raise ValueError(f"europarl unmatched must be one of {UNMATCHED}, got {self.unmatched!r}")
        if self.src_lang == self.tgt_lang:
            raise ValueError(f"src_lang and tgt_lang must differ, both are {self.src_lang!r}")
        if self.shortlist_size <= len(SPECIALS):
            raise ValueError(f"shortlist_size must exceed the {len(SPECIALS)} specials, got {self.shortlist_size}")
        if min(self.max_len, self.max_line_chars, self.chunk_size) < 1:
            raise ValueError("max_len, max_line_chars and chunk_size must be >= 1")
        TextLimits.of(self)

    # -- the input files -------------------------------------------------- #

    def train_paths(self) -> tuple[Path, Path]:
        base = Path(self.europarl_dir) / self.europarl_stem
        return resolve_input(f"{base}.{self.src_lang}"), resolve_input(f"{base}.{self.tgt_lang}")

    def eval_set(self, split: str) -> tuple[str, Path, str]:
        """(stem, folder, format) of the ``valid`` or ``test`` set."""
        if split == "valid":
            return self.valid_stem, Path(self.valid_dir or self.newstest_dir), self.valid_format or self.eval_format
        return self.test_stem, Path(self.newstest_dir), self.eval_format

    def eval_paths(self, split: str) -> tuple[Path, Path]:
        stem, folder, fmt = self.eval_set(split)
        if fmt == "sgm":
            pair = folder / f"{stem}-src.{self.src_lang}.sgm", folder / f"{stem}-ref.{self.tgt_lang}.sgm"
        else:
            pair = folder / f"{stem}.{self.src_lang}", folder / f"{stem}.{self.tgt_lang}"
        return resolve_input(pair[0]), resolve_input(pair[1])


# --------------------------------------------------------------------------- #
# Raw pairs: line-aligned files and WMT SGML
# --------------------------------------------------------------------------- #


class RawPair(NamedTuple):
    """One undecoded sentence pair and where each side came from (``file:line``)."""

    id: str
    src_where: str
    tgt_where: str
    src: bytes
    tgt: bytes


def require_files(paths: Iterable[Path]) -> None:
    """FileNotFoundError naming every missing input (checked before anything is written)."""
    missing = [str(p) for p in paths if not resolve_input(p).is_file()]
    if missing:
        raise FileNotFoundError(f"missing europarl/newstest input file(s): {', '.join(missing)}")


def iter_line_pairs(src_path: Path, tgt_path: Path, id_prefix: str) -> Iterator[RawPair]:
    """Line-aligned files in lockstep, as bytes (decoding is per record: one bad line is quarantined).

    Lines end at ``\\n`` only (a stray ``\\r`` or U+2028 inside a line must not shift the alignment);
    a last line without its newline counts. Different line counts: ``CorpusFormatError`` at the
    shorter file's first missing line.
    """
    with open_input(src_path) as src_fh, open_input(tgt_path) as tgt_fh:
        for number, (src, tgt) in enumerate(zip_longest(src_fh, tgt_fh), start=1):
            if src is None or tgt is None:
                shorter, longer = (src_path, tgt_path) if src is None else (tgt_path, src_path)
                raise CorpusFormatError(
                    shorter, number, f"ends after {number - 1} lines but its aligned file {longer} goes on"
                )
            if number == 1:
                src, tgt = src.removeprefix(b"\xef\xbb\xbf"), tgt.removeprefix(b"\xef\xbb\xbf")
            yield RawPair(
                f"{id_prefix}:{number}",
                f"{src_path.name}:{number}",
                f"{tgt_path.name}:{number}",
                src.rstrip(b"\r\n"),
                tgt.rstrip(b"\r\n"),
            )


class Segment(NamedTuple):
    docid: str
    segid: str
    line: int
    text: bytes


# Hand-written because WMT SGML is not XML (raw "&", unquoted attributes in older sets), so XML
# parsers reject it, and no PyPI package parses it with line numbers for error messages.
_SEG = re.compile(rb"^\s*<seg\b([^>]*)>(.*)</seg>\s*$", re.IGNORECASE)
_TAG = re.compile(rb"^\s*<(/?)([A-Za-z][A-Za-z0-9]*)\b([^>]*)>\s*$")
_ATTR = re.compile(r"""([A-Za-z_][\w.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


def _attrs(raw: bytes, path: Path, line: int) -> dict[str, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusFormatError(path, line, f"markup is not UTF-8 (byte {err.start})") from None
    # an attribute value is double-quoted (group 2), single-quoted (3) or bare (4)
    return {m[1].lower(): next(v for v in m.groups()[1:] if v is not None) for m in _ATTR.finditer(text)}


def iter_sgm(path: Path, set_tag: str, expect_lang: tuple[str, str] | None = None) -> Iterator[Segment]:
    """The segments of a WMT SGML file (``set_tag`` ``srcset`` or ``refset``), in file order.

    Structure checked: the set element opens the file (after blank lines) and closes it; ``<doc>``
    elements (with a ``docid``) do not nest and are closed; every ``<seg id=..>`` is inside a
    ``<doc>``, on one line with its ``</seg>``, its id unique in the doc. Other tag-only lines
    (``<p>``, ``<hl>``, ``<h1>`` ...) are layout and skipped. ``expect_lang`` = (attribute, value),
    e.g. ``("trglang", "fr")``: the set element must not carry another value.
    """
    opened_set = closed_set = False
    doc: str | None = None
    doc_line = 0
    seen: dict[tuple[str, str], int] = {}
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            if closed_set:
                raise CorpusFormatError(path, number, f"content after </{set_tag}>")
            seg = _SEG.match(line)
            if seg is not None:
                if doc is None:
                    raise CorpusFormatError(path, number, "<seg> outside a <doc>")
                if re.search(rb"</?seg\b", seg[2], re.IGNORECASE):
                    raise CorpusFormatError(path, number, "more than one <seg> on a line")
                segid = _attrs(seg[1], path, number).get("id")
                if not segid:
                    raise CorpusFormatError(path, number, "<seg> without an id")
                key = (doc, segid)
                if key in seen:
                    raise CorpusFormatError(
                        path, number, f"duplicate seg id={segid} in doc {doc} (first at line {seen[key]})"
                    )
                seen[key] = number
                yield Segment(doc, segid, number, seg[2].strip())
                continue
            if re.match(rb"^\s*<seg\b", line, re.IGNORECASE):
                raise CorpusFormatError(path, number, "unclosed <seg> (WMT SGML has one <seg>...</seg> per line)")
            tag = _TAG.match(line)
            if tag is None:
                raise CorpusFormatError(path, number, f"text outside a <seg>: {line[:80]!r}")
            closing, name = bool(tag[1]), tag[2].decode("ascii").lower()
            if not opened_set:
                if name != set_tag or closing:
                    found = f"<{'/' if closing else ''}{name}>"
                    raise CorpusFormatError(path, number, f"expected <{set_tag}> first, found {found}")
                attrs = _attrs(tag[3], path, number)
                if expect_lang:
                    attr, lang = expect_lang
                    if attrs.get(attr, lang) not in (lang, "any"):
                        raise CorpusFormatError(
                            path, number, f"<{set_tag}> has {attr}={attrs[attr]!r}, expected {lang!r}"
                        )
                opened_set = True
            elif name == set_tag:
                if not closing:
                    raise CorpusFormatError(path, number, f"second <{set_tag}>")
                if doc is not None:
                    raise CorpusFormatError(path, doc_line, f"unclosed <doc> (</{set_tag}> at line {number})")
                closed_set = True
            elif name == "doc" and not closing:
                if doc is not None:
                    raise CorpusFormatError(path, doc_line, f"unclosed <doc> (next <doc> at line {number})")
                doc = _attrs(tag[3], path, number).get("docid")
                if not doc:
                    raise CorpusFormatError(path, number, "<doc> without a docid")
                doc_line = number
            elif name == "doc":
                if doc is None:
                    raise CorpusFormatError(path, number, "</doc> without an open <doc>")
                doc = None
    if not opened_set:
        raise CorpusFormatError(path, None, f"no <{set_tag}> element (empty file?)")
    if doc is not None:
        raise CorpusFormatError(path, doc_line, "unclosed <doc> at end of file")
    if not closed_set:
        raise CorpusFormatError(path, None, f"unclosed <{set_tag}>: the file ends without </{set_tag}>")


def iter_sgm_pairs(src_path: Path, ref_path: Path, stem: str, tgt_lang: str) -> Iterator[RawPair]:
    """Source and reference segments matched by ``(docid, seg id)``, in source order.

    The reference file is read first into a dict (a test set is a few thousand segments).
    """
    refs = {(s.docid, s.segid): s for s in iter_sgm(ref_path, "refset", ("trglang", tgt_lang))}
    for seg in iter_sgm(src_path, "srcset"):
        ref = refs.pop((seg.docid, seg.segid), None)
        if ref is None:
            raise CorpusFormatError(
                ref_path, None, f"no segment docid={seg.docid} id={seg.segid} (source {src_path.name}:{seg.line})"
            )
        yield RawPair(
            f"{stem}:{seg.docid}:{seg.segid}",
            f"{src_path.name}:{seg.line}",
            f"{ref_path.name}:{ref.line}",
            seg.text,
            ref.text,
        )
    if refs:
        ref = min(refs.values(), key=lambda s: s.line)
        raise CorpusFormatError(
            src_path,
            None,
            f"no segment docid={ref.docid} id={ref.segid} "
            f"(reference {ref_path.name}:{ref.line}; {len(refs)} unmatched)",
        )


def eval_pairs(cfg: Config, split: str) -> Iterator[RawPair]:
    stem, _, fmt = cfg.eval_set(split)
    src, tgt = cfg.eval_paths(split)
    if fmt == "sgm":
        return iter_sgm_pairs(src, tgt, stem, cfg.tgt_lang)
    return iter_line_pairs(src, tgt, stem)


def train_pairs(cfg: Config) -> Iterator[RawPair]:
    return iter_line_pairs(*cfg.train_paths(), cfg.europarl_stem)


# --------------------------------------------------------------------------- #
# Per-pair work (runs in the workers)
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TokenSpec:
    """What a worker needs to turn a raw pair into tokens."""

    src_lang: str
    tgt_lang: str
    escape: bool
    limits: TextLimits  # max_line_chars, max_token_chars
    max_len: int | None  # None: no length filter (evaluation splits)


@functools.cache
def moses(lang: str) -> MosesTokenizer:
    """One Moses tokeniser per language and process (building one compiles its regexes)."""
    return MosesTokenizer(lang=lang)


def tokenise(text: str, lang: str, escape: bool) -> list[str]:
    """Moses ``tokenizer.perl -l <lang>`` tokens (no ``-a``)."""
    return moses(lang).tokenize(text, escape=escape, aggressive_dash_splits=False)


def _preview(pair: RawPair) -> dict[str, str]:
    return {
        "src": pair.src.decode("utf-8", "backslashreplace")[:PREVIEW_CHARS],
        "tgt": pair.tgt.decode("utf-8", "backslashreplace")[:PREVIEW_CHARS],
    }


def tokenise_pair(spec: TokenSpec, pair: RawPair) -> tuple[list[str], list[str]] | Quarantined:
    """(src tokens, tgt tokens) of a raw pair, or the reason it cannot be a row."""
    sides = (("src", pair.src_where, pair.src, spec.src_lang), ("tgt", pair.tgt_where, pair.tgt, spec.tgt_lang))
    texts = []
    for role, where, raw, _ in sides:
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            return Quarantined("invalid_utf8", where, {"side": role, "byte_offset": err.start, **_preview(pair)})
    for (role, where, _, _), text in zip(sides, texts):
        found = spec.limits.problem(text)
        if found is not None:
            reason, details = found
            return Quarantined(reason, where, {"side": role, **details, **_preview(pair)})
    tokens = []
    for (role, where, _, lang), text in zip(sides, texts):
        toks = tokenise(text, lang, spec.escape) if text.strip() else []
        if not toks:
            return Quarantined(f"empty_{role}", where, _preview(pair))
        tokens.append(toks)
    src, tgt = tokens
    if spec.max_len is not None and max(len(src), len(tgt)) > spec.max_len:
        return Quarantined(
            "longer_than_max_len", pair.src_where, {"src_tokens": len(src), "tgt_tokens": len(tgt), **_preview(pair)}
        )
    return src, tgt


def count_chunk(spec: TokenSpec, chunk: list[RawPair]) -> tuple[list[tuple[bytes, bytes, str]], Counter]:
    """Pass 1: for each pair that tokenises, (src key, pair key, target joined by spaces); and the
    chunk's target token counts. Quarantined pairs are left out (pass 2 reports them)."""
    keys: list[tuple[bytes, bytes, str]] = []
    counts: Counter = Counter()
    for pair in chunk:
        result = tokenise_pair(spec, pair)
        if isinstance(result, Quarantined):
            continue
        src, tgt = result
        keys.append((pair_key(src), pair_key(src, tgt), " ".join(tgt)))
        counts.update(tgt)
    return keys, counts


@dataclass(frozen=True)
class PointerRules:
    """The section 5.3 heuristic's inputs: the target shortlist and the dictionary."""

    shortlist: frozenset[str]
    dictionary: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # tgt word -> src senses
    unmatched: str = "location"


class PointerCounts(NamedTuple):
    oov: int = 0  # target tokens outside the shortlist
    identical: int = 0  # ... pointing at the same word in the source
    dictionary: int = 0  # ... pointing at a dictionary translation in the source
    unmatched: int = 0  # ... with no source match


def annotate(
    src: Sequence[str], tgt: Sequence[str], rules: PointerRules
) -> tuple[list[int], list[bool], PointerCounts]:
    """``tgt_pointer``, ``tgt_switch`` and counts for one pair (section 5.3; module docstring)."""
    first: dict[str, int] = {}
    for i, tok in enumerate(src):
        first.setdefault(tok, i)  # first occurrence wins (section 5.2)
    pointers: list[int] = []
    switches: list[bool] = []
    oov = identical = dictionary = unmatched = 0
    for tok in tgt:
        if tok in rules.shortlist:
            pointers.append(-1)
            switches.append(False)
            continue
        oov += 1
        pos = first.get(tok)
        if pos is not None:
            identical += 1
        else:
            pos = next((first[s] for s in rules.dictionary.get(tok, ()) if s in first), None)
            dictionary += pos is not None
        if pos is None:
            unmatched += 1
            pointers.append(-1)
            switches.append(rules.unmatched == "location")
        else:
            pointers.append(pos)
            switches.append(True)
    return pointers, switches, PointerCounts(oov, identical, dictionary, unmatched)


def annotate_chunk(
    spec: TokenSpec, rules: PointerRules, chunk: list[RawPair]
) -> list[tuple[dict | Quarantined, PointerCounts | None]]:
    """Pass 2: ``(row or Quarantined, pointer counts)`` per raw pair, in order."""
    out: list[tuple[dict | Quarantined, PointerCounts | None]] = []
    for pair in chunk:
        result = tokenise_pair(spec, pair)
        if isinstance(result, Quarantined):
            out.append((result, None))
            continue
        src, tgt = result
        pointers, switches, counts = annotate(src, tgt, rules)
        row = {"id": pair.id, "src": src, "tgt": tgt, "refs": [tgt], "tgt_pointer": pointers, "tgt_switch": switches}
        out.append((row, counts))
    return out


# --------------------------------------------------------------------------- #
# Dictionary, shortlist, train gate
# --------------------------------------------------------------------------- #


def load_dictionary(path: Path) -> dict[str, tuple[str, ...]]:
    """``target word -> source translations`` (file order) from ``<tgt>\\t<src>`` lines."""
    senses: dict[str, list[str]] = {}
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise CorpusFormatError(path, number, f"not UTF-8 (byte {err.start})") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(fields) or any(re.search(r"\s", f) for f in fields):
                raise CorpusFormatError(
                    path, number, f"expected '<target word><TAB><source word>' (single words), got {line[:80]!r}"
                )
            tgt_word, src_word = fields
            known = senses.setdefault(tgt_word, [])
            if src_word not in known:
                known.append(src_word)
    return {word: tuple(srcs) for word, srcs in senses.items()}


class TrainGate:
    """``write_corpus``'s train rules (duplicates, evaluation sources), applied by the reader so the
    shortlist and the stats see only the rows that are written. Same reasons, same order."""

    def __init__(self, eval_sources: Mapping[bytes, str]) -> None:
        self.eval_sources = eval_sources
        self.seen = KeySet()  # 8 bytes a distinct pair (Europarl has two million)

    def reason(self, src_key: bytes, key: bytes) -> str | None:
        split = self.eval_sources.get(src_key)
        if split is not None:
            return f"src_in_{split}"
        if not self.seen.add(key):
            return "duplicate_pair"
        return None


def count_train_targets(cfg: Config, eval_sources: Mapping[bytes, str], map_chunks: Callable) -> Counter:
    """Pass 1: target token counts over the train rows that will be written."""
    spec = TokenSpec(cfg.src_lang, cfg.tgt_lang, cfg.escape, TextLimits.of(cfg), cfg.max_len)
    gate = TrainGate(eval_sources)
    total: Counter = Counter()
    chunks = chunked(train_pairs(cfg), cfg.chunk_size)
    for keys, counts in map_chunks(functools.partial(count_chunk, spec), chunks):
        for src_key, key, tgt in keys:
            if gate.reason(src_key, key) is not None:
                counts.subtract(tgt.split(" "))
        total.update(+counts)
    return total


def eval_source_keys(cfg: Config, map_chunks: Callable) -> dict[bytes, str]:
    """``pair_key(src) -> split`` for the evaluation splits, first split wins (as write_corpus)."""
    spec = TokenSpec(cfg.src_lang, cfg.tgt_lang, cfg.escape, TextLimits.of(cfg), None)
    sources: dict[bytes, str] = {}
    splits = ["valid"] + (["test"] if cfg.eval_paths("test") != cfg.eval_paths("valid") else [])
    for split in splits:
        chunks = chunked(eval_pairs(cfg, split), cfg.chunk_size)
        for keys, _ in map_chunks(functools.partial(count_chunk, spec), chunks):
            for src_key, _, _ in keys:
                sources.setdefault(src_key, split)
    return sources


# --------------------------------------------------------------------------- #
# The splits
# --------------------------------------------------------------------------- #


def annotated_stream(
    pairs: Iterable[RawPair],
    spec: TokenSpec,
    rules: PointerRules,
    chunk_size: int,
    stats: SplitStats,
    map_chunks: Callable,
    gate: TrainGate | None = None,
) -> Iterator[dict | Quarantined]:
    """Rows and quarantined pairs, in input order; pointer counts of the kept rows go to ``stats``."""
    fn = functools.partial(annotate_chunk, spec, rules)
    for result in map_chunks(fn, chunked(pairs, chunk_size)):
        for item, counts in result:
            if isinstance(item, dict) and gate is not None:
                reason = gate.reason(pair_key(item["src"]), pair_key(item["src"], item["tgt"]))
                if reason is not None:
                    item = Quarantined(reason, item["id"], {"src": " ".join(item["src"]), "tgt": " ".join(item["tgt"])})
            if isinstance(item, Quarantined):
                yield item
                continue
            stats.add("rows")
            stats.add("tgt_tokens", len(item["tgt"]))
            for name, n in zip(("tgt_oov", "pointers_identical", "pointers_dictionary", "oov_unmatched"), counts):
                stats.add(name, n)
            yield item
    _add_rates(stats)


def _add_rates(stats: SplitStats) -> None:
    """Pointers per 100 examples (the paper's unit, section 5.2), from the integer counts."""
    c = stats.counts
    rows = c.pop("rows", 0)
    for name in ("tgt_tokens", "tgt_oov", "pointers_identical", "pointers_dictionary", "oov_unmatched"):
        c.setdefault(name, 0)
    per_100 = (lambda n: round(100.0 * n / rows, 3)) if rows else (lambda n: 0.0)
    c["identical_per_100"] = per_100(c["pointers_identical"])
    c["dictionary_per_100"] = per_100(c["pointers_dictionary"])
    c["pointers_per_100"] = per_100(c["pointers_identical"] + c["pointers_dictionary"])


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/{valid,test,train}`` and ``out_root/shortlist.<tgt_lang>.txt``; return the manifests."""
    out_root = Path(out_root)
    inputs = [*cfg.train_paths(), *cfg.eval_paths("valid"), *cfg.eval_paths("test")]
    require_files(inputs + ([Path(cfg.dictionary_file)] if cfg.dictionary_file else []))
    dictionary = load_dictionary(Path(cfg.dictionary_file)) if cfg.dictionary_file else {}

    eval_sources = eval_source_keys(cfg, map_chunks)  # also validates the SGML before any write
    counts = count_train_targets(cfg, eval_sources, map_chunks)
    shortlist_vocab = build_vocab(dict(counts), max_size=cfg.shortlist_size)
    rules = PointerRules(frozenset(shortlist_vocab.itos[len(SPECIALS) :]), dictionary, cfg.unmatched)

    stats = {split: SplitStats() for split in ("valid", "test", "train")}
    stats["train"].add("shortlist_words", len(rules.shortlist))
    stats["train"].add("dictionary_words", len(dictionary))
    eval_spec = TokenSpec(cfg.src_lang, cfg.tgt_lang, cfg.escape, TextLimits.of(cfg), None)
    train_spec = TokenSpec(cfg.src_lang, cfg.tgt_lang, cfg.escape, TextLimits.of(cfg), cfg.max_len)
    streams = {
        "valid": annotated_stream(
            eval_pairs(cfg, "valid"), eval_spec, rules, cfg.chunk_size, stats["valid"], map_chunks
        ),
        "test": annotated_stream(eval_pairs(cfg, "test"), eval_spec, rules, cfg.chunk_size, stats["test"], map_chunks),
        "train": annotated_stream(
            train_pairs(cfg), train_spec, rules, cfg.chunk_size, stats["train"], map_chunks, TrainGate(eval_sources)
        ),
    }
    params = {**asdict(cfg), "dictionary_sha256": sha256_file(cfg.dictionary_file) if cfg.dictionary_file else None}
    sources = {
        "valid": [str(p) for p in cfg.eval_paths("valid")],
        "test": [str(p) for p in cfg.eval_paths("test")],
        "train": [str(p) for p in cfg.train_paths()],
    }
    manifests = write_corpus(out_root, streams, SCHEMA, params=params, stats=stats, sources=sources)
    shortlist_vocab.save(out_root / f"shortlist.{cfg.tgt_lang}.txt")
    return manifests


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: Moses ``tokenizer.perl -l <src_lang>`` (:func:`tokenise`, the
    reader's ``escape``); blank text -> no tokens. ``pretokenized``: a whitespace split."""
    if pretokenized:
        return str.split
    lang, escape = settings.get("src_lang", "en"), bool(settings.get("escape", False))
    return lambda text: tokenise(text, lang, escape) if text.strip() else []
