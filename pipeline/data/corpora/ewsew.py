"""EW-SEW (WEAN, Ma et al. 2018, section 3.1): Hwang et al. (2015) alignments to train on, TurkCorpus
to validate and test.

WEAN: "EW-SEW is a publicly available dataset provided by Hwang et al. (2015) ... classify each
sentence pair as a good, good partial, partial, or bad match. Following the previous work (Nisioi
et al., 2017), we discard the unclassified matches, and use the good matches and partial matches
with a scaled threshold greater than 0.45 ... about 150K good matches and 130K good partial
matches. We use this corpus as the training set, and the dataset provided by Xu et al. (2016) as
the validation set and the test set" (2,000 / 359 sentences, 8 references each).

Training data, ``train_source: hwang``: the two released files of Hwang et al.,
``aligned-good-0.67.txt`` (``good_file``) and ``aligned-good_partial-0.53.txt``
(``good_partial_file``), one pair a line::

    <English Wikipedia sentence> TAB <Simple English Wikipedia sentence> TAB <similarity score>

tokenised, cased. Filters, in order, each counted:

* only the good and good-partial files are read: the unclassified / partial / bad matches are not
  in them, so they are dropped by construction (stats ``origin_hwang_good`` /
  ``origin_hwang_good_partial`` count what each file contributes);
* a line without exactly 3 tab-separated fields -> quarantined ``bad_field_count``; a score that
  is not a finite number -> ``bad_score``;
* ``score <= min_score`` (0.45, "a scaled threshold greater than 0.45") -> ``score_below_threshold``;
* the shared line rules of :mod:`pipeline.data.corpora.dress`: ``invalid_utf8``; ``nul_byte`` /
  ``line_too_long`` / ``token_too_long`` (a NUL character, a line over ``max_line_chars``
  characters, a token over ``max_token_chars``; checked on the whole line before its fields);
  ``empty_src`` / ``empty_tgt``, ``src_too_long`` / ``tgt_too_long`` (over ``max_tokens``, absurd
  input only);
* ``write_corpus``: an exact duplicate of an earlier train pair -> ``duplicate_pair`` (if the
  good-partial file also holds the good pairs, they fall here); a source equal to a TurkCorpus
  source -> ``src_in_valid`` / ``src_in_test`` (the test sentences come from the same Wikipedia).

The Hwang files are not available here. ``train_source: kauchak`` reads the closest real
substitute, Kauchak's (2013) English/Simple Wikipedia sentence alignments, line-aligned pairs of
files (``kauchak_src_files`` = complex side, ``kauchak_tgt_files`` = simple side), either in the
released layout (``kauchak_layout: v2``: ``normal.aligned`` / ``simple.aligned``, each line
``article title TAB paragraph number TAB sentence``; fields != 3 -> ``bad_field_count``, titles of
the two sides differing -> ``title_mismatch``) or with those columns stripped (``plain``: one
sentence a line, as in ``shared/data/ew_sew_kauchak_v2_slice``). Unequal line counts ->
``CorpusFormatError`` naming both files. Every file may be gzipped (TurkCorpus: ``<name>.gz``
where ``<name>`` is missing); a truncated one is a ``CorpusFormatError`` naming it. A split left
without rows (empty files, every line quarantined) is an ``EmptySplitError`` naming its files.

TurkCorpus's ``.tok`` files are lowercased with ``-lrb-`` brackets and plain ``"`` quotes; the
training side is brought to the same conventions so vocabularies and leakage checks agree:
``lowercase`` (default on) and ``turk_tokens`` (default on: ``(`` ``)`` ``[`` ``]`` ``{`` ``}`` ->
``-lrb-`` ``-rrb-`` ``-lsb-`` ``-rsb-`` ``-lcb-`` ``-rcb-``, ``\\`\\``` and ``''`` -> ``"``, ``\\/`` ->
``/``, ``\\*`` -> ``*``; stat ``tokens_normalised``). TurkCorpus itself is read as published.

Rows: train ``id`` = ``<file>:<line>``; valid/test rows as in :mod:`pipeline.data.corpora.turkcorpus`
(``refs`` = the 8 Turker references, ``tgt`` = the first). Extra columns ``origin``
(``hwang_good``, ``hwang_good_partial``, ``kauchak``, ``turk_tune``, ``turk_test``) and ``score``
(Hwang's similarity; null elsewhere). Stats as in :mod:`pipeline.data.corpora.dress`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import Quarantined, SplitStats, write_corpus
from pipeline.data.corpora.dress import (
    ChunkResult,
    decode_fields,
    iter_aligned,
    pair_counts,
    preview,
    require_files,
    stream_items,
    tokenise_fields,
)
from pipeline.data.corpora.inputs import DEFAULT_LIMITS, MAX_LINE_CHARS, MAX_TOKEN_CHARS, TextLimits, row_name
from pipeline.data.corpora.turkcorpus import PARTS, part_paths, turk_normalise, turk_stream, turk_tokenizer
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

TRAIN_SOURCES = ("hwang", "kauchak")
KAUCHAK_LAYOUTS = ("v2", "plain")

SCHEMA: pa.Schema = make_schema([pa.field("origin", pa.string()), pa.field("score", pa.float64())])


@dataclass(frozen=True)
class Config:
    """Training source (Hwang et al. files, or the Kauchak substitute) and the TurkCorpus folder."""

    turk_dir: str
    train_source: str = "hwang"  # hwang | kauchak
    good_file: str | None = None  # aligned-good-0.67.txt
    good_partial_file: str | None = None  # aligned-good_partial-0.53.txt
    min_score: float = 0.45  # keep score > min_score
    kauchak_layout: str = "v2"  # v2: title TAB paragraph TAB sentence; plain: sentence only
    kauchak_src_files: tuple[str, ...] = ()  # complex side (normal.aligned), one per pair
    kauchak_tgt_files: tuple[str, ...] = ()  # simple side (simple.aligned)
    lowercase: bool = True  # TurkCorpus is lowercased
    turk_tokens: bool = True  # PTB escapes -> TurkCorpus's token forms
    max_tokens: int = 1000  # longer lines are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    chunk_size: int = 5000

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kauchak_src_files", tuple(self.kauchak_src_files))
        object.__setattr__(self, "kauchak_tgt_files", tuple(self.kauchak_tgt_files))
        if self.train_source not in TRAIN_SOURCES:
            raise ValueError(f"ewsew train_source must be one of {TRAIN_SOURCES}, got {self.train_source!r}")
        if self.train_source == "hwang" and not (self.good_file or self.good_partial_file):
            raise ValueError("ewsew train_source hwang needs good_file and/or good_partial_file")
        if self.train_source == "kauchak":
            if self.kauchak_layout not in KAUCHAK_LAYOUTS:
                raise ValueError(f"ewsew kauchak_layout must be one of {KAUCHAK_LAYOUTS}, got {self.kauchak_layout!r}")
            if not self.kauchak_src_files or len(self.kauchak_src_files) != len(self.kauchak_tgt_files):
                raise ValueError("ewsew kauchak_src_files and kauchak_tgt_files must be non-empty and pair up")
        if self.max_tokens < 1 or self.chunk_size < 1:
            raise ValueError("max_tokens and chunk_size must be >= 1")
        TextLimits.of(self)


# --------------------------------------------------------------------------- #
# Training side
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _TrainSpec:
    """What a worker needs to parse one training file (pair); picklable."""

    names: tuple[str, ...]  # the file (hwang) or the src/tgt files (kauchak)
    origin: str
    layout: str  # hwang | v2 | plain
    min_score: float
    max_tokens: int
    lowercase: bool
    turk_tokens: bool
    limits: TextLimits = DEFAULT_LIMITS


def _train_row(spec: _TrainSpec, line: int, src: list[str], tgt: list[str], score: float | None) -> tuple:
    changed = 0
    if spec.turk_tokens:
        src, n_src = turk_normalise(src, spec.lowercase)
        tgt, n_tgt = turk_normalise(tgt, spec.lowercase)
        changed = n_src + n_tgt
    row = {
        "id": f"{row_name(spec.names[0])}:{line}",
        "src": src,
        "tgt": tgt,
        "refs": [tgt],
        "origin": spec.origin,
        "score": score,
    }
    counts = pair_counts(src, [tgt])
    counts.update({"tokens_normalised": changed, f"origin_{spec.origin}": 1})
    return row, counts


def parse_hwang_chunk(spec: _TrainSpec, chunk: list[tuple[int, list[bytes]]]) -> ChunkResult:
    """``standard TAB simple TAB score`` lines -> ``[(row or Quarantined, counts)]`` (worker)."""
    name = spec.names[0]
    out: ChunkResult = []
    for line, (raw,) in chunk:
        where = f"{name}:{line}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            bad = Quarantined("invalid_utf8", where, {"byte_offset": err.start, **preview([raw], [name])})
            out.append((bad, None))
            continue
        hostile = spec.limits.check(text, where)
        if hostile is not None:
            out.append((hostile, None))
            continue
        parts = text.split("\t")
        if len(parts) != 3:
            out.append((Quarantined("bad_field_count", where, {"fields": len(parts), "line": text[:300]}), None))
            continue
        try:
            score = float(parts[2])
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            out.append((Quarantined("bad_score", where, {"score": parts[2][:50]}), None))
            continue
        if score <= spec.min_score:
            out.append((Quarantined("score_below_threshold", where, {"score": score, "src": parts[0][:300]}), None))
            continue
        fields = tokenise_fields(
            parts[:2], [name, name], ["src", "tgt"], line, spec.max_tokens, spec.lowercase, spec.limits
        )
        if isinstance(fields, Quarantined):
            out.append((fields, None))
            continue
        out.append(_train_row(spec, line, fields[0], fields[1], score))
    return out


def parse_kauchak_chunk(spec: _TrainSpec, chunk: list[tuple[int, list[bytes]]]) -> ChunkResult:
    """Aligned normal/simple lines (v2 or plain layout) -> ``[(row or Quarantined, counts)]``."""
    out: ChunkResult = []
    for line, raw in chunk:
        if spec.layout == "plain":
            fields = decode_fields(raw, spec.names, ["src", "tgt"], line, spec.max_tokens, spec.lowercase, spec.limits)
        else:
            fields = _kauchak_v2_fields(spec, line, raw)
        if isinstance(fields, Quarantined):
            out.append((fields, None))
            continue
        out.append(_train_row(spec, line, fields[0], fields[1], None))
    return out


def _kauchak_v2_fields(spec: _TrainSpec, line: int, raw: list[bytes]) -> list[list[str]] | Quarantined:
    """``title TAB paragraph TAB sentence`` on both sides; the titles must agree."""
    texts = decode_fields(raw, spec.names, ["src", "tgt"], line, 10**9, False, spec.limits)  # UTF-8, limits
    if isinstance(texts, Quarantined):
        return texts
    columns = [b.decode("utf-8").split("\t") for b in raw]
    for name, cols in zip(spec.names, columns):
        if len(cols) != 3:
            return Quarantined("bad_field_count", f"{name}:{line}", {"fields": len(cols), **preview(raw, spec.names)})
    if columns[0][0] != columns[1][0]:
        return Quarantined("title_mismatch", f"{spec.names[0]}:{line}", preview(raw, spec.names))
    sentences = [c[2] for c in columns]
    return tokenise_fields(sentences, spec.names, ["src", "tgt"], line, spec.max_tokens, spec.lowercase, spec.limits)


def _train_inputs(cfg: Config) -> list[tuple[list[Path], str]]:
    """(files read together, origin) in reading order."""
    if cfg.train_source == "hwang":
        named = [(cfg.good_file, "hwang_good"), (cfg.good_partial_file, "hwang_good_partial")]
        return [([Path(f)], origin) for f, origin in named if f]
    return [([Path(s), Path(t)], "kauchak") for s, t in zip(cfg.kauchak_src_files, cfg.kauchak_tgt_files)]


def train_stream(cfg: Config, stats: SplitStats, map_chunks: Callable) -> Iterator:
    """Training rows and quarantined records, file after file."""
    for paths, origin in _train_inputs(cfg):
        layout = "hwang" if cfg.train_source == "hwang" else cfg.kauchak_layout
        spec = _TrainSpec(
            tuple(p.name for p in paths),
            origin,
            layout,
            cfg.min_score,
            cfg.max_tokens,
            cfg.lowercase,
            cfg.turk_tokens,
            TextLimits.of(cfg),
        )
        fn = parse_hwang_chunk if layout == "hwang" else parse_kauchak_chunk
        chunks = chunked(iter_aligned(paths), cfg.chunk_size)
        yield from stream_items(map_chunks, functools.partial(fn, spec), chunks, stats)


# --------------------------------------------------------------------------- #
# Evaluation side (TurkCorpus) and the writer
# --------------------------------------------------------------------------- #


def eval_stream(cfg: Config, split: str, stats: SplitStats, map_chunks: Callable) -> Iterator:
    """TurkCorpus rows reshaped to this schema (``simp`` dropped, ``origin``/``score`` added)."""
    origin = f"turk_{PARTS[split]}"
    items = turk_stream(
        cfg.turk_dir,
        split,
        stats,
        map_chunks,
        max_tokens=cfg.max_tokens,
        chunk_size=cfg.chunk_size,
        limits=TextLimits.of(cfg),
    )
    for item in items:
        if isinstance(item, Quarantined):
            yield item
            continue
        del item["simp"]
        yield {**item, "origin": origin, "score": None}


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/{train,valid,test}``; return the manifests by split."""
    require_files(
        [p for paths, _ in _train_inputs(cfg) for p in paths]
        + [p for split in PARTS for p in part_paths(cfg.turk_dir, PARTS[split])]
    )
    stats = {split: SplitStats() for split in ("train", "valid", "test")}
    streams = {
        "train": train_stream(cfg, stats["train"], map_chunks),
        "valid": eval_stream(cfg, "valid", stats["valid"], map_chunks),
        "test": eval_stream(cfg, "test", stats["test"], map_chunks),
    }
    sources = {"train": [str(p) for paths, _ in _train_inputs(cfg) for p in paths]}
    sources.update({s: [str(p) for p in part_paths(cfg.turk_dir, PARTS[s])] for s in PARTS})
    return write_corpus(out_root, streams, SCHEMA, params=asdict(cfg), stats=stats, sources=sources)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: :func:`turk_tokenizer` with the reader's ``lowercase`` and
    ``turk_tokens`` (both default on)."""
    return turk_tokenizer(pretokenized, bool(settings.get("lowercase", True)), bool(settings.get("turk_tokens", True)))
