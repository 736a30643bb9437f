"""TurkCorpus (Xu et al. 2016): the EW-SEW validation and test sets, 8 references each.

WEAN (Ma et al. 2018, section 3.1) trains on EW-SEW and uses "the dataset provided by Xu et al.
(2016)" to validate (2,000 sentences) and test (359 sentences), "each complex sentence paired
with 8 reference simplified sentences provided by Amazon Mechanical Turk workers"; BLEU there is
multi-reference. The release (``cocoxu/simplification``, ``data/turkcorpus/``) is line-aligned::

    <part>.8turkers.tok.norm      English Wikipedia sentence (the source)
    <part>.8turkers.tok.simp      the Simple English Wikipedia sentence it was aligned to
    <part>.8turkers.tok.turk.0-7  the 8 Turkers' simplifications (the references)

with ``part`` = ``tune`` (-> split ``valid``) or ``test`` (-> ``test``). The ``.tok.`` files are
PTB-tokenised (``-lrb-``) and lowercased; the last line has no trailing newline.

Rows: ``id`` = ``<part>.8turkers.tok.norm:<line>``, ``src`` = norm tokens, ``refs`` = the 8 Turker
references in file order, ``tgt`` = ``refs[0]`` (the contract's "first reference"), ``simp`` =
the Simple Wikipedia sentence (not a reference: Xu et al. collected the 8 because it is often
not a simplification). Evaluation splits are never de-duplicated.

Bad input, with the shared rules of :mod:`pipeline.data.corpora.dress`: the 10 files of a part must
have equal line counts (``CorpusFormatError`` naming both files); a non-UTF-8 line ->
``invalid_utf8``; a NUL character, a line over ``max_line_chars`` characters or a token over
``max_token_chars`` -> ``nul_byte`` / ``line_too_long`` / ``token_too_long``; an empty source /
simp / reference -> ``empty_src`` / ``empty_simp`` / ``empty_ref`` (the whole record: a test item
with 7 references would change the metric); over ``max_tokens`` tokens -> ``<role>_too_long``. A
file may be gzipped (``<name>.gz`` read where ``<name>`` is missing; a truncated one is a
``CorpusFormatError`` naming it). A configured split left without rows is an ``EmptySplitError``
naming its files. Stats: ``src_tokens``, ``ref_tokens`` (all 8 references), ``ref_tokens_in_src``,
``refs_identical_to_src``.
"""

from __future__ import annotations

import functools
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
    require_files,
    stream_items,
)
from pipeline.data.corpora.inputs import (
    DEFAULT_LIMITS,
    MAX_LINE_CHARS,
    MAX_TOKEN_CHARS,
    TextLimits,
    resolve_input,
    row_name,
)
from pipeline.data.text.ptb import tokenize
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

PARTS = {"valid": "tune", "test": "test"}  # our split name -> TurkCorpus file part

SCHEMA: pa.Schema = make_schema([pa.field("simp", pa.list_(pa.string()))])


# PTB escapes -> TurkCorpus's forms (whole tokens), for lowercased and for cased text.
_TURK_TOKENS = {
    "(": "-lrb-",
    ")": "-rrb-",
    "[": "-lsb-",
    "]": "-rsb-",
    "{": "-lcb-",
    "}": "-rcb-",
    "``": '"',
    "''": '"',
}
_TURK_TOKENS_CASED = {k: v.upper() if v.startswith("-") else v for k, v in _TURK_TOKENS.items()}


def turk_normalise(tokens: list[str], lowercase: bool) -> tuple[list[str], int]:
    """Map PTB token escapes to TurkCorpus's forms; return the tokens and how many changed."""
    table = _TURK_TOKENS if lowercase else _TURK_TOKENS_CASED
    out = [table.get(tok, tok).replace("\\/", "/").replace("\\*", "*") for tok in tokens]
    return out, sum(a != b for a, b in zip(out, tokens))


def turk_tokenizer(pretokenized: bool, lowercase: bool, turk_tokens: bool) -> Callable[[str], list[str]]:
    """Raw text -> tokens in TurkCorpus's conventions: PTB tokens (:func:`pipeline.data.text.ptb.tokenize`;
    ``pretokenized``: a whitespace split), lowercased if ``lowercase``, then (``turk_tokens``)
    :func:`turk_normalise`'s forms (``-lrb-``, plain ``"``)."""

    def run(text: str) -> list[str]:
        tokens = text.split() if pretokenized else tokenize(text)
        if lowercase:
            tokens = [t.lower() for t in tokens]
        return turk_normalise(tokens, lowercase)[0] if turk_tokens else tokens

    return run


@dataclass(frozen=True)
class Config:
    """Where the TurkCorpus ``.tok`` files are, and which parts to read."""

    data_dir: str
    splits: tuple[str, ...] = ("valid", "test")  # valid <- tune.*, test <- test.*
    n_refs: int = 8
    max_tokens: int = 1000  # longer lines are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    lowercase: bool = False  # the .tok files are lowercased already
    chunk_size: int = 5000

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", tuple(self.splits))
        bad = [s for s in self.splits if s not in PARTS]
        if not self.splits or bad or len(set(self.splits)) != len(self.splits):
            raise ValueError(f"turkcorpus splits must be distinct names from {list(PARTS)}, got {list(self.splits)}")
        if self.n_refs < 1 or self.max_tokens < 1 or self.chunk_size < 1:
            raise ValueError("n_refs, max_tokens and chunk_size must be >= 1")
        TextLimits.of(self)


def part_paths(data_dir: str | Path, part: str, n_refs: int = 8) -> list[Path]:
    """norm, simp, turk.0 .. turk.{n_refs-1} of one part, in that order (each ``<name>.gz`` if only
    that exists)."""
    base = Path(data_dir) / f"{part}.8turkers.tok"
    names = [f"{base}.norm", f"{base}.simp"] + [f"{base}.turk.{k}" for k in range(n_refs)]
    return [resolve_input(name) for name in names]


@dataclass(frozen=True)
class _ChunkSpec:
    names: tuple[str, ...]  # norm, simp, turk.0 .. file names
    max_tokens: int
    lowercase: bool
    limits: TextLimits = DEFAULT_LIMITS


def parse_turk_chunk(spec: _ChunkSpec, chunk: list[tuple[int, list[bytes]]]) -> ChunkResult:
    """Raw aligned lines -> ``[(row or Quarantined, counts)]`` (runs in a worker)."""
    roles = ("src", "simp") + ("ref",) * (len(spec.names) - 2)
    out: ChunkResult = []
    for line, raw in chunk:
        fields = decode_fields(raw, spec.names, roles, line, spec.max_tokens, spec.lowercase, spec.limits)
        if isinstance(fields, Quarantined):
            out.append((fields, None))
            continue
        src, simp, refs = fields[0], fields[1], fields[2:]
        row = {"id": f"{row_name(spec.names[0])}:{line}", "src": src, "tgt": refs[0], "refs": refs, "simp": simp}
        out.append((row, pair_counts(src, refs)))
    return out


def turk_stream(
    data_dir: str | Path,
    split: str,
    stats: SplitStats,
    map_chunks: Callable = serial_map,
    n_refs: int = 8,
    max_tokens: int = 1000,
    lowercase: bool = False,
    chunk_size: int = 5000,
    limits: TextLimits = DEFAULT_LIMITS,
) -> Iterator:
    """Rows (with ``simp``) and quarantined records of one TurkCorpus split (``valid`` or ``test``)."""
    paths = part_paths(data_dir, PARTS[split], n_refs)
    spec = _ChunkSpec(tuple(p.name for p in paths), max_tokens, lowercase, limits)
    chunks = chunked(iter_aligned(paths), chunk_size)
    yield from stream_items(map_chunks, functools.partial(parse_turk_chunk, spec), chunks, stats)


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/valid`` (tune) and ``out_root/test``; return the manifests by split."""
    require_files(p for s in cfg.splits for p in part_paths(cfg.data_dir, PARTS[s], cfg.n_refs))
    stats = {split: SplitStats() for split in cfg.splits}
    streams = {
        split: turk_stream(
            cfg.data_dir,
            split,
            stats[split],
            map_chunks,
            cfg.n_refs,
            cfg.max_tokens,
            cfg.lowercase,
            cfg.chunk_size,
            TextLimits.of(cfg),
        )
        for split in cfg.splits
    }
    sources = {s: [str(p) for p in part_paths(cfg.data_dir, PARTS[s], cfg.n_refs)] for s in cfg.splits}
    return write_corpus(out_root, streams, SCHEMA, params=asdict(cfg), stats=stats, sources=sources)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: PTB tokens in TurkCorpus's forms, always lowercased
    (:func:`turk_tokenizer`): the ``.tok`` files are lowercased as published,
    so this reader's ``lowercase: false`` means "already"."""
    return turk_tokenizer(pretokenized, lowercase=True, turk_tokens=True)
