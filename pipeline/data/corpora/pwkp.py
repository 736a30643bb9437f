"""PWKP (Zhu et al. 2010) from the original ``PWKP_108016`` file, split as WikiSmall (89,042/205/100).

WEAN (Ma et al. 2018, section 3.1): PWKP "consists of aligned complex text from English Wikipedia
... and simple text from Simple Wikipedia ... 108,016 sentence pairs ... Following the previous
work (Zhang and Lapata, 2017), we remove the duplicate sentence pairs, and split the corpus with
89,042 pairs for training, 205 pairs for validation and 100 pairs for test."

Format of ``PWKP_108016`` (Zhu et al. 2010; TU Darmstadt release): blocks separated by a blank
line; a block's first line is the complex (English Wikipedia) sentence, each further line one
simple (Simple Wikipedia) sentence it was aligned to (1:n alignments: sentence splitting).
Sentences are tokenised. The simple side of a pair is its simple sentences joined by a space, as
in the DRESS ``.dst`` files (``stats.multi_sentence_targets`` counts such pairs)::

    April is the fourth month of the year , with 30 days .     <- complex
    April is the fourth month of the year .                    <- simple 1
    It has 30 days .                                           <- simple 2
                                                               <- blank separator

The split, as far as it can be reconstructed: WEAN names only dedup and the sizes; the DRESS
release shows that the 100 test pairs are Zhu et al.'s evaluation set (its ``.ori.test`` files
equal the test set other PWKP systems are scored on); WEAN's wording puts the 205 validation
pairs in the de-duplicated corpus. So: the test set is given, as ``test_file`` (same block format) or as DRESS-layout files
(``test_src_file`` / ``test_dst_file``, e.g. ``PWKP_108016.tag.80.aner.ori.test.{src,dst}``);
from ``PWKP_108016``

1. a block without a simple line -> quarantined ``block_without_simple``; a line that is not UTF-8
   -> ``invalid_utf8``; a line with a NUL character, over ``max_line_chars`` characters or with a
   token over ``max_token_chars`` -> ``nul_byte`` / ``line_too_long`` / ``token_too_long`` (at that
   line); a side over ``max_tokens`` tokens -> ``src_too_long``/``tgt_too_long``;
2. pairs whose complex sentence is a test source are removed -> ``src_in_test`` (no leakage);
3. exact duplicate pairs are removed, first occurrence kept -> ``duplicate_pair``;
4. ``valid_size`` (205) of the remaining pairs are drawn for validation, the rest is train.

The draw is a seeded bottom-k sample: the ``valid_size`` pairs with the smallest keyed BLAKE2b
hash of (``valid_seed``, pair). It is reproducible and independent of file order, but it is NOT
the draw Zhang & Lapata made (their selection is unpublished): with the real file the counts
(89,042 + 205) can be checked, the identity of the 205 pairs cannot. Also unverifiable here: how
the ".tag.80" in their file names (named-entity tagging; a length cap of 80?) changed the pool;
this reader applies no modelling length cap. Pool-level removals (steps 1-3) are recorded in the
train split's quarantine; ``write_corpus`` then also removes train pairs whose complex sentence is
a validation source (``src_in_valid``). A file with more than ``max_block_lines`` lines without a
blank line is not in this format (missing separators): ``CorpusFormatError`` at the block start.
Files may be gzipped (a truncated one is a ``CorpusFormatError`` naming it; ids keep the name
without ``.gz``); a split left without rows is an ``EmptySplitError`` naming its files, and a pool
too small for the validation draw is a ``CorpusFormatError`` naming ``pwkp_file``.

Rows: ``id`` = ``<file name>:<line of the complex sentence>`` (test from DRESS files:
``<src file>:<line>``), ``refs`` = ``[tgt]``. Stats as in :mod:`pipeline.data.corpora.dress`, plus
``multi_sentence_targets``.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import (
    CorpusFormatError,
    EmptySplitError,
    Quarantined,
    SplitStats,
    pair_key,
    write_corpus,
)
from pipeline.data.corpora.dress import (
    ChunkResult,
    iter_aligned,
    pair_counts,
    parse_dress_chunk,
    preview,
    ptb_tokenizer,
    require_files,
    stream_items,
    tokenise_fields,
)
from pipeline.data.corpora.dress import ChunkSpec as DressSpec
from pipeline.data.corpora.inputs import (
    DEFAULT_LIMITS,
    MAX_LINE_CHARS,
    MAX_TOKEN_CHARS,
    TextLimits,
    open_input,
    row_name,
)
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

SCHEMA: pa.Schema = make_schema()


@dataclass(frozen=True)
class Config:
    """The PWKP file, Zhu et al.'s test pairs, and the validation draw."""

    pwkp_file: str  # PWKP_108016
    test_file: str | None = None  # the 100 test pairs in the same block format, or ...
    test_src_file: str | None = None  # ... DRESS layout: <prefix>.ori.test.src
    test_dst_file: str | None = None  # ... and <prefix>.ori.test.dst
    valid_size: int = 205
    valid_seed: int = 2017
    max_tokens: int = 1000  # longer sides are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    max_block_lines: int = 64  # more lines without a blank separator: not this format
    lowercase: bool = False
    chunk_size: int = 5000  # blocks per map_chunks task

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        dress_test = bool(self.test_src_file) + bool(self.test_dst_file)
        if dress_test == 1 or (dress_test == 2) == bool(self.test_file):
            raise ValueError("pwkp needs exactly one test set: test_file, or test_src_file with test_dst_file")
        if self.valid_size < 1 or self.max_tokens < 1 or self.max_block_lines < 2 or self.chunk_size < 1:
            raise ValueError("valid_size, max_tokens, chunk_size must be >= 1 and max_block_lines >= 2")
        TextLimits.of(self)


# --------------------------------------------------------------------------- #
# The block format
# --------------------------------------------------------------------------- #


def iter_blocks(path: Path, max_block_lines: int) -> Iterator[tuple[int, list[bytes]]]:
    """``(line number of the block's first line, [raw lines])`` per blank-line-separated block.

    A run of blank (or whitespace-only) lines separates like one; a missing final separator is
    fine. Lines stay bytes: decoding happens per block in the workers.
    """
    block: list[bytes] = []
    start = 0
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            line = raw.rstrip(b"\r\n")
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")  # UTF-8 BOM
            if not line.strip():
                if block:
                    yield start, block
                    block = []
                continue
            if not block:
                start = number
            block.append(line)
            if len(block) > max_block_lines:
                raise CorpusFormatError(
                    path,
                    start,
                    f"more than {max_block_lines} lines without a blank separator line "
                    "(PWKP blocks are: complex sentence, its simple sentence(s), blank line)",
                )
    if block:
        yield start, block


@dataclass(frozen=True)
class _BlockSpec:
    name: str  # file name, for ids and file:line
    max_tokens: int
    lowercase: bool
    limits: TextLimits = DEFAULT_LIMITS


def parse_block_chunk(spec: _BlockSpec, chunk: list[tuple[int, list[bytes]]]) -> ChunkResult:
    """Blocks -> ``[(row or Quarantined, counts)]`` (runs in a worker)."""
    out: ChunkResult = []
    for start, lines in chunk:
        item = _parse_block(spec, start, lines)
        if isinstance(item, Quarantined):
            out.append((item, None))
            continue
        counts = pair_counts(item["src"], item["refs"])
        counts["multi_sentence_targets"] = int(len(lines) > 2)
        out.append((item, counts))
    return out


def _parse_block(spec: _BlockSpec, start: int, lines: list[bytes]) -> dict | Quarantined:
    names = [f"line{start + i}" for i in range(len(lines))]
    texts = []
    for offset, raw in enumerate(lines):
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            where = f"{spec.name}:{start + offset}"
            return Quarantined("invalid_utf8", where, {"byte_offset": err.start, **preview(lines, names)})
    for offset, text in enumerate(texts):
        found = spec.limits.problem(text)
        if found is not None:
            reason, details = found
            return Quarantined(reason, f"{spec.name}:{start + offset}", {**details, **preview(lines, names)})
    if len(texts) < 2:
        return Quarantined("block_without_simple", f"{spec.name}:{start}", {"complex": texts[0][:300]})
    simple = " ".join(texts[1:])  # 1:n alignment: the simple sentences in order, as DRESS's .dst
    fields = tokenise_fields(  # the lines passed the limits above (the joined simple side may be longer)
        [texts[0], simple], [spec.name, spec.name], ["src", "tgt"], start, spec.max_tokens, spec.lowercase, None
    )
    if isinstance(fields, Quarantined):
        return fields
    src, tgt = fields
    return {"id": f"{row_name(spec.name)}:{start}", "src": src, "tgt": tgt, "refs": [tgt]}


def _block_items(path: Path, cfg: Config, map_chunks: Callable) -> Iterator[tuple]:
    """``(row or Quarantined, counts)`` for every block of ``path``, in file order."""
    spec = _BlockSpec(Path(path).name, cfg.max_tokens, cfg.lowercase, TextLimits.of(cfg))
    chunks = chunked(iter_blocks(Path(path), cfg.max_block_lines), cfg.chunk_size)
    for result in map_chunks(functools.partial(parse_block_chunk, spec), chunks):
        yield from result


# --------------------------------------------------------------------------- #
# The split
# --------------------------------------------------------------------------- #


def zhu_test_stream(cfg: Config, stats: SplitStats, map_chunks: Callable) -> Iterator:
    """Zhu et al.'s test pairs, from the block file or the DRESS-layout pair."""
    if cfg.test_file:
        for item, counts in _block_items(Path(cfg.test_file), cfg, map_chunks):
            for key, n in (counts or {}).items():
                stats.add(key, n)
            yield item
        return
    paths = [Path(cfg.test_src_file), Path(cfg.test_dst_file)]
    spec = DressSpec(tuple(p.name for p in paths), cfg.max_tokens, cfg.lowercase, limits=TextLimits.of(cfg))
    chunks = chunked(iter_aligned(paths), cfg.chunk_size)
    for item in stream_items(map_chunks, functools.partial(parse_dress_chunk, spec), chunks, stats):
        if isinstance(item, dict):
            del item["entities"]
        yield item


def _rank(seed: int, key: bytes) -> int:
    """The pair's position in the seeded draw (smaller is drawn first)."""
    digest = hashlib.blake2b(key, digest_size=8, key=str(seed).encode("ascii")).digest()
    return int.from_bytes(digest, "big")


@dataclass
class _Draw:
    """The outcome of the first pass over the pool."""

    valid: list[tuple[int, dict, dict]]  # (file order, row, counts) of the drawn pairs
    pool: int  # distinct, non-test pairs


def draw_valid(cfg: Config, test_sources: set[bytes], map_chunks: Callable) -> _Draw:
    """Pass 1: the ``valid_size`` pool pairs with the smallest seeded rank (memory O(valid_size))."""
    seen: set[bytes] = set()
    heap: list[tuple[int, int, dict, dict]] = []  # (-rank, order, row, counts): a max-heap on rank
    for order, (item, counts) in enumerate(_block_items(Path(cfg.pwkp_file), cfg, map_chunks)):
        if isinstance(item, Quarantined) or pair_key(item["src"]) in test_sources:
            continue
        key = pair_key(item["src"], item["tgt"])
        if key in seen:
            continue
        seen.add(key)
        heapq.heappush(heap, (-_rank(cfg.valid_seed, key), order, item, counts))
        if len(heap) > cfg.valid_size:
            heapq.heappop(heap)
    if len(seen) <= cfg.valid_size:
        what = f"only {len(seen)} distinct non-test pairs; cannot draw {cfg.valid_size} for validation"
        if not seen:
            raise EmptySplitError("train", [cfg.pwkp_file], f"the train split would have no rows: {what}")
        raise CorpusFormatError(cfg.pwkp_file, None, what)
    return _Draw(sorted((order, row, counts) for _, order, row, counts in heap), len(seen))


def valid_stream(draw: _Draw, stats: SplitStats) -> Iterator[dict]:
    for _, row, counts in draw.valid:
        for key, n in counts.items():
            stats.add(key, n)
        yield row


def train_stream(
    cfg: Config, draw: _Draw, test_sources: set[bytes], stats: SplitStats, map_chunks: Callable
) -> Iterator:
    """Pass 2: every block once more; pool removals are quarantined here, drawn pairs skipped."""
    drawn = {pair_key(row["src"], row["tgt"]) for _, row, _ in draw.valid}
    seen: set[bytes] = set()
    for item, counts in _block_items(Path(cfg.pwkp_file), cfg, map_chunks):
        if isinstance(item, Quarantined):
            yield item
            continue
        if pair_key(item["src"]) in test_sources:
            yield Quarantined("src_in_test", item["id"], {"src": " ".join(item["src"])})
            continue
        key = pair_key(item["src"], item["tgt"])
        if key in seen:
            yield Quarantined(
                "duplicate_pair", item["id"], {"src": " ".join(item["src"]), "tgt": " ".join(item["tgt"])}
            )
            continue
        seen.add(key)
        if key in drawn:
            continue  # written to valid
        for name, n in counts.items():
            stats.add(name, n)
        yield item


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/{train,valid,test}``; return the manifests by split."""
    tests = [cfg.test_file] if cfg.test_file else [cfg.test_src_file, cfg.test_dst_file]
    require_files([Path(cfg.pwkp_file), *map(Path, tests)])
    test_sources = {
        pair_key(item["src"]) for item in zhu_test_stream(cfg, SplitStats(), serial_map) if isinstance(item, dict)
    }
    draw = draw_valid(cfg, test_sources, map_chunks)
    stats = {split: SplitStats() for split in ("train", "valid", "test")}
    stats["train"].add("pool_pairs", draw.pool)
    streams = {
        "train": train_stream(cfg, draw, test_sources, stats["train"], map_chunks),
        "valid": valid_stream(draw, stats["valid"]),
        "test": zhu_test_stream(cfg, stats["test"], map_chunks),
    }
    sources = {"train": [cfg.pwkp_file], "valid": [cfg.pwkp_file], "test": [str(t) for t in tests]}
    return write_corpus(out_root, streams, SCHEMA, params=asdict(cfg), stats=stats, sources=sources)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: PTB tokens, cased as released, with the reader's ``lowercase``
    (:func:`pipeline.data.corpora.dress.ptb_tokenizer`)."""
    return ptb_tokenizer(pretokenized, bool(settings.get("lowercase", False)))
